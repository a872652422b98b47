"""FedAvg (McMahan et al., 2017, https://arxiv.org/abs/1602.05629): Flower's own class."""

from __future__ import annotations

import numpy as np
from flwr.serverapp.strategy import FedAvg

from ripple_flwr.app.server.bases.flower import FlowerMethod
from ripple_flwr.settings import RunSettings


class FedAvgMethod(FlowerMethod):
    """Flower's FedAvg (weighted by ``num-examples``) over the app's clients."""

    flower_class = FedAvg

    state_fields = ()

    def __init__(self, settings: RunSettings, initial_state: dict[str, np.ndarray]) -> None:
        super().__init__(settings, initial_state)


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = FedAvgMethod
