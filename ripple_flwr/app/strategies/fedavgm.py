"""FedAvgM (Hsu et al., 2019, https://arxiv.org/abs/1909.06335): Flower's own class.

The server applies the mean update with momentum: v <- beta v + (x - mean_k x_k),
x <- x - eta_s v; beta = ``fedavgm-momentum``, eta_s = ``server-lr``.
"""

from __future__ import annotations

import numpy as np
from flwr.serverapp.strategy import FedAvgM

from ripple_flwr.app.strategies.core.flower import FlowerModel
from ripple_flwr.settings import Option, RunSettings

FEDAVGM_MOMENTUM = Option(
    "fedavgm-momentum", float, 0.9, "FedAvgM: server momentum beta", low=0, high=1, high_open=True
)


class FedAvgMMethod(FlowerModel, FedAvgM):
    """Flower's FedAvgM over the app's clients; ``fedavgm-momentum`` and ``server-lr``."""

    options = (FEDAVGM_MOMENTUM,)
    state_fields = ("current_arrays", "momentum_vector")  # Flower's FedAvgM state

    def __init__(self, settings: RunSettings, initial_state: dict[str, np.ndarray]) -> None:
        super().__init__(
            settings,
            initial_state,
            server_learning_rate=settings.server_lr,
            server_momentum=FEDAVGM_MOMENTUM.of(settings),
        )
