"""Client rules that personalise: Per-FedAvg's MAML step and pFedMe's Moreau envelope.

Both follow the authors' code (``CharlieDinh/pFedMe``) and PFLlib: Per-FedAvg's
meta step is plain SGD with beta = the client learning rate (PFLlib's
``self.beta = self.learning_rate``); pFedMe's inner solver carries the
references' L2 term mu = 1e-3.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from ripple_flwr.settings import Option
from ripple_flwr.training.rules import (
    ClientRule,
    RoundInputs,
    Store,
    _to_numpy,
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
        self.store[self.KEY] = _to_numpy(personal)
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


PERFEDAVG_ALPHA = Option(
    "perfedavg-alpha",
    float,
    0.01,
    "Per-FedAvg: inner (personalisation) step alpha (paper)",
    low=0,
    low_open=True,
)
PERFEDAVG_BETA = Option(
    "perfedavg-beta",
    float,
    0.01,
    "Per-FedAvg: plain-SGD meta step beta (PFLlib: beta = the client lr, 0.01 here)",
    low=0,
    low_open=True,
)
PFEDME_LAMBDA = Option(
    "pfedme-lambda", float, 15.0, "pFedMe: Moreau-envelope lambda (paper)", low=0, low_open=True
)
PFEDME_INNER_STEPS = Option(
    "pfedme-inner-steps",
    int,
    5,
    "pFedMe: K inner steps for the personal model (paper)",
    low=1,
    high=1000,
)
PFEDME_PERSONAL_LR = Option(
    "pfedme-personal-lr",
    float,
    0.09,
    "pFedMe: inner solver's step (pFedMe paper, MNIST)",
    low=0,
    low_open=True,
)
PFEDME_MU = Option(
    "pfedme-mu",
    float,
    1e-3,
    "pFedMe: L2 term mu of the inner solve (the authors' and PFLlib's optimiser: 1e-3)",
    low=0,
)
