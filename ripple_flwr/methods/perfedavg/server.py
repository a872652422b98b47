"""Per-FedAvg, first order (Fallah et al., 2020, https://arxiv.org/abs/2002.07948).

Clients run first-order MAML steps (``perfedavg`` client rule: an alpha
step on one half-batch, the gradient at that point applied with beta from
the other); the server averages the returned models as FedAvg does. Every
client is scored with the global model after one alpha step on its own
train split.
"""

from __future__ import annotations

import numpy as np

from ripple_flwr.app.server.bases.global_model import GlobalModel, stacked_mean
from ripple_flwr.app.server.replies.validation import Accepted


class PerFedAvgMethod(GlobalModel):
    """Per-FedAvg (FO): the example-weighted mean of the clients' meta-trained models."""

    state_fields = ()  # GlobalModel's

    def update(self, accepted: list[Accepted]) -> dict[str, np.ndarray]:
        weights = np.asarray([a.num_examples for a in accepted], dtype=np.float64)
        new = self.non_float_from(accepted)
        for k in self.float_keys:
            new[k] = stacked_mean(accepted, k, weights)
        return new


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = PerFedAvgMethod
