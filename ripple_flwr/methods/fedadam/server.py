"""FedAdam (Reddi et al., 2021, https://arxiv.org/abs/2003.00295): Flower's own class."""

from __future__ import annotations

import numpy as np
from flwr.serverapp.strategy import FedAdam

from ripple_flwr.app.server.bases.flower import FlowerMethod, fedopt_kwargs
from ripple_flwr.settings import RunSettings


class FedAdamMethod(FlowerMethod):
    """Flower's FedAdam over the app's clients; eta, beta1, beta2, tau from the run config."""

    flower_class = FedAdam

    state_fields = ("current_arrays", "m_t", "v_t")  # Flower's FedOpt state

    def __init__(self, settings: RunSettings, initial_state: dict[str, np.ndarray]) -> None:
        super().__init__(settings, initial_state, **fedopt_kwargs(settings))


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = FedAdamMethod
