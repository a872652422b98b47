"""FedTrimmedAvg (Yin et al., 2018, https://arxiv.org/abs/1803.01498): Flower's own class.

The coordinate-wise mean after cutting the ``trimmed-beta`` share of the
lowest and of the highest values.
"""

from __future__ import annotations

import numpy as np
from flwr.serverapp.strategy import FedTrimmedAvg

from ripple_flwr.app.server.bases.flower import FlowerMethod
from ripple_flwr.methods.fedtrimmedavg.spec import TRIMMED_BETA
from ripple_flwr.settings import RunSettings


class FedTrimmedAvgMethod(FlowerMethod):
    """Flower's FedTrimmedAvg over the app's clients; ``trimmed-beta`` from the run config."""

    flower_class = FedTrimmedAvg

    state_fields = ()

    def __init__(self, settings: RunSettings, initial_state: dict[str, np.ndarray]) -> None:
        super().__init__(settings, initial_state, beta=TRIMMED_BETA.of(settings))


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = FedTrimmedAvgMethod
