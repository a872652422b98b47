"""FedMedian (Yin et al., 2018, https://arxiv.org/abs/1803.01498): Flower's own class.

The coordinate-wise median of the replies: robust to a minority of
arbitrary updates, at some cost in accuracy on honest heterogeneous data.
"""

from __future__ import annotations

import numpy as np
from flwr.serverapp.strategy import FedMedian

from ripple_flwr.app.server.bases.flower import FlowerMethod
from ripple_flwr.settings import RunSettings


class FedMedianMethod(FlowerMethod):
    """Flower's FedMedian over the app's clients."""

    flower_class = FedMedian

    state_fields = ()

    def __init__(self, settings: RunSettings, initial_state: dict[str, np.ndarray]) -> None:
        super().__init__(settings, initial_state)


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = FedMedianMethod
