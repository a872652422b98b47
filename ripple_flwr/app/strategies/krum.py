"""Krum (Blanchard et al., 2017, https://arxiv.org/abs/1703.02757): Flower's own class.

Keeps the one reply closest (in summed squared distance) to its
``n - krum-malicious - 2`` nearest neighbours.
"""

from __future__ import annotations

import numpy as np
from flwr.serverapp.strategy import Krum

from ripple_flwr.app.strategies.core.flower import FlowerModel, flower_kwargs
from ripple_flwr.settings import RunSettings


class KrumMethod(FlowerModel, Krum):
    """Flower's Krum over the app's clients; ``krum-malicious`` from the run config."""

    def __init__(self, settings: RunSettings, initial_state: dict[str, np.ndarray]) -> None:
        Krum.__init__(self, **flower_kwargs(settings), num_malicious_nodes=settings.krum_malicious)
        self._init_app(settings, initial_state)
