"""Per-FedAvg's client rule (first order), as the authors' code and PFLlib: the meta step is
plain SGD with beta = the client learning rate (PFLlib's ``self.beta = self.learning_rate``)."""

from __future__ import annotations

import logging

import torch
from torch import nn
from torch.nn import functional as F

from ripple_flwr.methods.perfedavg.spec import PERFEDAVG_ALPHA, PERFEDAVG_BETA
from ripple_flwr.settings import RunSettings
from ripple_flwr.training.rules import (
    ClientRule,
    RoundInputs,
    Store,
    trainable,
)

log = logging.getLogger("flwr.ripple")


class PerFedAvgRule(ClientRule):
    """Per-FedAvg, first order (Fallah et al., 2020).

    Each step takes a batch of 2 x batch-size examples, in the epoch's shuffled
    order, and splits it: on the first half D, temp = theta - alpha grad L_D(theta);
    on the second half D', theta <- theta - beta grad L_D'(temp), a plain SGD
    step as in every reference (PFLlib's ``PerAvgOptimizer``, the authors'),
    not the run's momentum optimiser. So a step costs two gradients and an
    epoch sees every example once, like FedAvg's. Personalisation: one plain
    step of size alpha on the client's whole train split (gradient in eval
    mode, so deterministic) from the received model, then the test split is
    scored.
    """

    batch_factor = 2

    def __init__(self, alpha: float, beta: float) -> None:
        if not alpha > 0 or not beta > 0:
            raise ValueError(f"perfedavg-alpha and -beta must be > 0, got {alpha}, {beta}")
        self.alpha, self.beta = alpha, beta

    def begin(self, model: nn.Module, inputs: RoundInputs) -> None:
        self.params = list(trainable(model).values())
        self.step = self._step

    def _step(
        self, model: nn.Module, optimiser: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        half = len(x) // 2
        (xa, ya), (xb, yb) = (
            ((x, y), (x, y)) if half == 0 else ((x[:half], y[:half]), (x[half:], y[half:]))
        )
        saved = [p.detach().clone() for p in self.params]
        loss = F.cross_entropy(model(xa), ya)
        grads = torch.autograd.grad(loss, self.params)
        with torch.no_grad():
            for p, g in zip(self.params, grads, strict=True):
                p.sub_(self.alpha * g)
        meta = torch.autograd.grad(F.cross_entropy(model(xb), yb), self.params)
        with torch.no_grad():
            for p, s, g in zip(self.params, saved, meta, strict=True):
                p.copy_(s).sub_(self.beta * g)
        return loss.detach()

    def personalise(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, store: Store) -> None:
        params = list(trainable(model).values())
        was_training = model.training
        model.eval()
        try:
            grads = torch.autograd.grad(F.cross_entropy(model(x), y), params)
        finally:
            model.train(was_training)
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p.sub_(self.alpha * g)


def rule(settings: RunSettings) -> ClientRule:
    """The clients' rule of a Per-FedAvg run."""
    return PerFedAvgRule(PERFEDAVG_ALPHA.of(settings), PERFEDAVG_BETA.of(settings))
