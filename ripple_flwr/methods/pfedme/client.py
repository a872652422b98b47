"""pFedMe's client rule: the Moreau envelope, as the authors' code (``CharlieDinh/pFedMe``);
its inner solver carries the references' L2 term mu = 1e-3."""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from ripple_flwr.methods.pfedme.spec import (
    PFEDME_INNER_STEPS,
    PFEDME_LAMBDA,
    PFEDME_MU,
    PFEDME_PERSONAL_LR,
)
from ripple_flwr.settings import RunSettings
from ripple_flwr.training.rules import (
    ClientRule,
    RoundInputs,
    Store,
    to_numpy,
    trainable,
)

log = logging.getLogger("flwr.ripple")


class PFedMeRule(ClientRule):
    """pFedMe (T Dinh et al., 2020): a personal model theta_tilde by a Moreau envelope.

    For every batch, K inner steps of plain gradient descent (personal lr)
    on f(theta_tilde; batch) + lambda/2 ||theta_tilde - w||^2 + mu/2
    ||theta_tilde||^2 (mu: the references' L2 term, 1e-3 in the authors'
    ``pFedMeOptimizer`` and PFLlib's, ``pfedme-mu``); then the local
    model w takes one step of the run's optimiser along the envelope's
    gradient lambda (w - theta_tilde): pFedMe's w <- w - lr lambda (w -
    theta_tilde), with the momentum every method's clients use here.
    theta_tilde starts the round at the received model and carries over from
    batch to batch; the reply is w. theta_tilde is kept in the node's state
    and is the model the client is scored with (the received global model
    until it has one).
    """

    KEY = "pfedme.theta"
    stateful = True

    def __init__(self, lam: float, inner_steps: int, personal_lr: float, mu: float = 0.0) -> None:
        if not lam > 0 or inner_steps < 1 or not personal_lr > 0 or not mu >= 0:
            raise ValueError(
                f"pfedme-lambda and -personal-lr must be > 0, -inner-steps >= 1 and -mu >= 0, "
                f"got {lam}, {personal_lr}, {inner_steps}, {mu}"
            )
        self.lam, self.inner_steps, self.personal_lr = lam, inner_steps, personal_lr
        self.mu = mu

    def begin(self, model: nn.Module, inputs: RoundInputs) -> None:
        self.w = trainable(model)  # the model's own parameters: the optimiser moves them
        self.theta = {n: p.detach().clone() for n, p in self.w.items()}
        self.store = inputs.store
        self.step = self._step

    def _step(
        self, model: nn.Module, optimiser: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        first = None
        for _ in range(self.inner_steps):
            theta = {n: t.requires_grad_(True) for n, t in self.theta.items()}
            loss = F.cross_entropy(functional_call(model, theta, (x,), strict=False), y)
            grads = torch.autograd.grad(loss, list(theta.values()))
            with torch.no_grad():
                self.theta = {
                    n: (
                        t - self.personal_lr * (g + self.lam * (t - self.w[n]) + self.mu * t)
                    ).detach()
                    for (n, t), g in zip(theta.items(), grads, strict=True)
                }
            first = loss.detach() if first is None else first
        optimiser.zero_grad(set_to_none=True)
        with torch.no_grad():
            for n, p in self.w.items():
                p.grad = self.lam * (p.detach() - self.theta[n])
        optimiser.step()
        return first

    def finish(self, model: nn.Module, steps: int) -> dict[str, dict[str, np.ndarray]]:
        personal = {k: self.theta.get(k, v) for k, v in model.state_dict().items()}
        self.store[self.KEY] = to_numpy(personal)
        return {}

    def personalise(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, store: Store) -> None:
        saved = store.get(self.KEY)
        if saved is None:
            return  # never trained here (or lost its state): the received global model
        target = model.state_dict()
        if set(saved) != set(target):
            log.warning("pFedMe personal model in the node's state does not match: global model")
            return
        with torch.no_grad():
            for k, v in target.items():
                v.copy_(torch.as_tensor(np.array(saved[k]), dtype=v.dtype))


def rule(settings: RunSettings) -> ClientRule:
    """The clients' rule of a pFedMe run."""
    return PFedMeRule(
        PFEDME_LAMBDA.of(settings),
        PFEDME_INNER_STEPS.of(settings),
        PFEDME_PERSONAL_LR.of(settings),
        PFEDME_MU.of(settings),
    )
