"""FedDyn's client rule: the linear and proximal terms, g_k kept in the node."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ripple_flwr.methods.feddyn.spec import FEDDYN_ALPHA, FEDDYN_GRAD_CLIP
from ripple_flwr.settings import RunSettings
from ripple_flwr.training.rules import (
    ClientRule,
    Penalty,
    RoundInputs,
    grad_clip_norm,
    load_state,
    to_numpy,
    trainable,
)


class FedDynRule(ClientRule):
    """FedDyn (Acar et al., 2021): a client's loss with a linear and a proximal term.

    The client minimises L_k(theta) - <g_k, theta> + alpha/2 ||theta - theta_prev||^2;
    theta_prev is the received model, g_k (zero at first) lives in the node's
    state; after training g_k <- g_k - alpha (theta_k - theta_prev), which is
    the first-order condition of the local problem (grad L_k(theta_k) = g_k
    - alpha (theta_k - theta_prev)). ``grad_clip`` clips each step's gradient
    (data loss and both terms) to that L2 norm, as Acar et al.'s code does
    (``feddyn-grad-clip``).
    """

    KEY = "feddyn.g"
    stateful = True

    def __init__(self, alpha: float, grad_clip: float = 0.0) -> None:
        if not alpha > 0:
            raise ValueError(f"feddyn-alpha must be > 0, got {alpha}")
        self.alpha = alpha
        self.grad_clip = grad_clip_norm(grad_clip, "feddyn-grad-clip")

    def begin(self, model: nn.Module, inputs: RoundInputs) -> None:
        self.params = trainable(model)
        self.anchor = {n: p.detach().clone() for n, p in self.params.items()}
        self.g = load_state(inputs.store, self.KEY, self.anchor, inputs, "FedDyn g_k")
        self.store = inputs.store

    def penalty(self) -> Penalty:
        params, anchor, g, alpha = self.params, self.anchor, self.g, self.alpha

        def term() -> torch.Tensor:
            linear = sum((g[n] * p).sum() for n, p in params.items())
            prox = sum(((p - anchor[n]) ** 2).sum() for n, p in params.items())
            return 0.5 * alpha * prox - linear

        return term

    def finish(self, model: nn.Module, steps: int) -> dict[str, dict[str, np.ndarray]]:
        new = {
            n: self.g[n] - self.alpha * (p.detach() - self.anchor[n])
            for n, p in self.params.items()
        }
        self.store[self.KEY] = to_numpy(new)
        return {}


def rule(settings: RunSettings) -> ClientRule:
    """The clients' rule of a FedDyn run."""
    return FedDynRule(FEDDYN_ALPHA.of(settings), FEDDYN_GRAD_CLIP.of(settings))
