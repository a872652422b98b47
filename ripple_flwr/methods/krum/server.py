"""Krum (Blanchard et al., 2017, https://arxiv.org/abs/1703.02757): Flower's own class.

Keeps the one reply closest (in summed squared distance) to its
``n - krum-malicious - 2`` nearest neighbours.
"""

from __future__ import annotations

import numpy as np
from flwr.serverapp.strategy import Krum

from ripple_flwr.app.server.bases.flower import FlowerMethod
from ripple_flwr.methods.krum.spec import KRUM_MALICIOUS
from ripple_flwr.settings import ConfigError, RunSettings


class KrumMethod(FlowerMethod):
    """Flower's Krum over the app's clients; ``krum-malicious`` from the run config."""

    flower_class = Krum

    state_fields = ()

    @classmethod
    def check_settings(cls, settings: RunSettings) -> None:
        """Krum needs n >= 2f + 3 replies a round to pick one from its neighbours."""
        f = KRUM_MALICIOUS.of(settings)
        if settings.training.clients_per_round < 2 * f + 3:
            raise ConfigError(
                f"Krum needs clients-per-round >= 2 x krum-malicious + 3 = {2 * f + 3}, got "
                f"{settings.training.clients_per_round}; lower krum-malicious or raise "
                "clients-per-round"
            )

    def __init__(self, settings: RunSettings, initial_state: dict[str, np.ndarray]) -> None:
        super().__init__(settings, initial_state, num_malicious_nodes=KRUM_MALICIOUS.of(settings))


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = KrumMethod
