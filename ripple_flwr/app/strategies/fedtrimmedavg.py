"""FedTrimmedAvg (Yin et al., 2018, https://arxiv.org/abs/1803.01498): Flower's own class.

The coordinate-wise mean after cutting the ``trimmed-beta`` share of the
lowest and of the highest values.
"""

from __future__ import annotations

import numpy as np
from flwr.serverapp.strategy import FedTrimmedAvg

from ripple_flwr.app.strategies.core.flower import FlowerModel, flower_kwargs
from ripple_flwr.settings import RunSettings


class FedTrimmedAvgMethod(FlowerModel, FedTrimmedAvg):
    """Flower's FedTrimmedAvg over the app's clients; ``trimmed-beta`` from the run config."""

    def __init__(self, settings: RunSettings, initial_state: dict[str, np.ndarray]) -> None:
        FedTrimmedAvg.__init__(self, **flower_kwargs(settings), beta=settings.trimmed_beta)
        self._init_app(settings, initial_state)
