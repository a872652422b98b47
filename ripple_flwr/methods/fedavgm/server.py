"""FedAvgM (Hsu et al., 2019, https://arxiv.org/abs/1909.06335): Flower's own class.

The server applies the mean update with momentum: v <- beta v + (x - mean_k x_k),
x <- x - eta_s v; beta = ``fedavgm-momentum``, eta_s = ``server-lr``.
"""

from __future__ import annotations

import numpy as np
from flwr.serverapp.strategy import FedAvgM

from ripple_flwr.app.server.bases.flower import FlowerMethod
from ripple_flwr.methods.fedavgm.spec import FEDAVGM_MOMENTUM
from ripple_flwr.settings import RunSettings


class FedAvgMMethod(FlowerMethod):
    """Flower's FedAvgM over the app's clients; ``fedavgm-momentum`` and ``server-lr``."""

    flower_class = FedAvgM

    state_fields = ("current_arrays", "momentum_vector")  # Flower's FedAvgM state

    def __init__(self, settings: RunSettings, initial_state: dict[str, np.ndarray]) -> None:
        super().__init__(
            settings,
            initial_state,
            server_learning_rate=settings.training.server_lr,
            server_momentum=FEDAVGM_MOMENTUM.of(settings),
        )


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = FedAvgMMethod
