"""FedDyn (Acar et al., 2021, https://arxiv.org/abs/2111.04263).

Clients minimise L_k(theta) - <g_k, theta> + alpha/2 ||theta - theta_prev||^2
and keep g_k in Flower's ``context.state`` (``feddyn`` client rule). The
server keeps h: h <- h - alpha (1/m) sum_k (theta_k - theta_prev) over the
round's replies (m: all clients), then theta = mean_k theta_k - h / alpha.
One model each way, FedAvg's bytes.
"""

from __future__ import annotations

import numpy as np

from ripple_flwr.app.server.bases.global_model import GlobalModel, stacked_mean
from ripple_flwr.app.server.replies.validation import Accepted
from ripple_flwr.methods.feddyn.spec import FEDDYN_ALPHA
from ripple_flwr.settings import RunSettings


class FedDynMethod(GlobalModel):
    """FedDyn: server state h, client state g_k; alpha = ``feddyn-alpha``."""

    state_fields = ("h",)

    def __init__(self, settings: RunSettings, initial_state: dict[str, np.ndarray]) -> None:
        super().__init__(settings, initial_state)
        self.alpha = FEDDYN_ALPHA.of(settings)
        self.h = {
            k: np.zeros(v.shape, dtype=np.float64) for k, v in self.zeros_like_floats().items()
        }

    def update(self, accepted: list[Accepted]) -> dict[str, np.ndarray]:
        m = len(self.run.clients)
        new = self.non_float_from(accepted)
        for k in self.float_keys:
            prev = self.global_state[k].astype(np.float64)
            mean = stacked_mean(accepted, k)
            self.h[k] = self.h[k] - self.alpha * len(accepted) * (mean - prev) / m
            new[k] = mean - self.h[k] / self.alpha
        return new


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = FedDynMethod
