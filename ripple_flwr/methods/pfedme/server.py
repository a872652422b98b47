"""pFedMe (T Dinh et al., 2020, https://arxiv.org/abs/2006.08848).

Clients solve for a personal model theta_tilde (Moreau envelope, K inner
steps per batch) and move their local copy w towards it (``pfedme`` client
rule); theta_tilde stays in Flower's ``context.state`` and is what the
client is scored with. The server mixes: theta <- (1 - beta) theta + beta
mean_k w_k, beta = ``pfedme-beta``.
"""

from __future__ import annotations

import numpy as np

from ripple_flwr.app.server.bases.global_model import GlobalModel, stacked_mean
from ripple_flwr.app.server.replies.validation import Accepted
from ripple_flwr.methods.pfedme.spec import PFEDME_BETA
from ripple_flwr.settings import RunSettings


class PFedMeMethod(GlobalModel):
    """pFedMe: the server's beta-mix of the global model and the clients' local models."""

    state_fields = ()  # GlobalModel's

    def __init__(self, settings: RunSettings, initial_state: dict[str, np.ndarray]) -> None:
        super().__init__(settings, initial_state)
        self.beta = PFEDME_BETA.of(settings)

    def update(self, accepted: list[Accepted]) -> dict[str, np.ndarray]:
        weights = np.asarray([a.num_examples for a in accepted], dtype=np.float64)
        new = self.non_float_from(accepted)
        for k in self.float_keys:
            prev = self.global_state[k].astype(np.float64)
            new[k] = (1.0 - self.beta) * prev + self.beta * stacked_mean(accepted, k, weights)
        return new


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = PFedMeMethod
