"""FedProx (Li et al., 2020, https://arxiv.org/abs/1812.06127): Flower's own class.

Flower's ``FedProx.configure_train`` puts ``proximal-mu`` in every training
message; the client's ``fedprox`` training rule adds mu/2 ||w - w_global||^2.
"""

from __future__ import annotations

import numpy as np
from flwr.serverapp.strategy import FedProx

from ripple_flwr.app.server.bases.flower import FlowerMethod
from ripple_flwr.methods.fedprox.spec import PROXIMAL_MU
from ripple_flwr.settings import RunSettings


class FedProxMethod(FlowerMethod):
    """Flower's FedProx over the app's clients; ``proximal-mu`` from the run config."""

    flower_class = FedProx

    state_fields = ()

    def __init__(self, settings: RunSettings, initial_state: dict[str, np.ndarray]) -> None:
        super().__init__(settings, initial_state, proximal_mu=PROXIMAL_MU.of(settings))


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = FedProxMethod
