"""Client rules with state between rounds: SCAFFOLD's control variates, FedDyn's g_k.

Both keep their state in the node (Flower's ``context.state``, through the
rule's ``store``) and follow Acar et al.'s code (``alpemreacar/FedDyn``) in
clipping every step's gradient, at norm 10 by default (``scaffold-grad-clip``,
``feddyn-grad-clip``; 0 turns it off).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ripple_flwr.settings import Option
from ripple_flwr.training.rules import (
    ClientRule,
    Penalty,
    RoundInputs,
    _load_state,
    _to_numpy,
    trainable,
)

# Acar et al.'s max_norm for every method of their code.
REFERENCE_GRAD_CLIP = 10.0


def _clip(value: float, key: str) -> float:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{key} must be a finite norm >= 0 (0: no clipping), got {value}")
    return float(value)


class ScaffoldRule(ClientRule):
    """SCAFFOLD (Karimireddy et al., 2020): every step's gradient is corrected by (c - c_i).

    c arrives in the training message (``control``), c_i lives in the node's
    state. After K local steps c_i is updated with option II of the paper,
    c_i+ = c_i - c + (x - y) / (K * lr), and the reply carries the control
    delta c_i+ - c_i. With heavy-ball momentum m (the app's optimiser) a
    gradient taken at step s moves the weights by lr * sum_{t>=s} m^(t-s),
    so K is replaced by K_eff = sum_{j=1..K} (1 - m^j) / (1 - m), the same
    average-gradient estimate (K_eff = K for m = 0, the paper's plain SGD).
    Buffers (BatchNorm statistics) get no correction and a zero delta.
    ``grad_clip`` clips each corrected gradient to that L2 norm, as Acar et
    al.'s SCAFFOLD code does (``scaffold-grad-clip``).
    """

    KEY = "scaffold.c_i"
    stateful = True

    def __init__(self, grad_clip: float = 0.0) -> None:
        self.grad_clip = _clip(grad_clip, "scaffold-grad-clip")

    def begin(self, model: nn.Module, inputs: RoundInputs) -> None:
        control = inputs.extras.get("control")
        if control is None:
            raise ValueError("SCAFFOLD training message carries no 'control' record (c)")
        state = model.state_dict()
        self.keys = [k for k, v in state.items() if v.is_floating_point()]
        if set(control) != set(self.keys):
            raise ValueError("SCAFFOLD 'control' record does not match the model's keys")
        self.params = trainable(model)
        like = {k: state[k].detach() for k in self.keys}
        self.c = {
            k: torch.as_tensor(np.array(control[k]), dtype=like[k].dtype, device=like[k].device)
            for k in self.keys
        }
        self.c_i = _load_state(inputs.store, self.KEY, like, inputs, "SCAFFOLD control c_i")
        self.store = inputs.store
        self.lr, self.momentum = inputs.lr, inputs.momentum
        self.x = {k: like[k].clone() for k in self.keys}
        self.correction = {n: self.c[n] - self.c_i[n] for n in self.params}

    def correct(self) -> None:
        for name, p in self.params.items():
            if p.grad is None:
                p.grad = self.correction[name].clone()
            else:
                p.grad.add_(self.correction[name])

    def effective_steps(self, steps: int) -> float:
        """K_eff: how many plain-SGD steps K momentum steps amount to for a constant gradient."""
        m = self.momentum
        if m == 0:
            return float(steps)
        return float(sum((1 - m**j) / (1 - m) for j in range(1, steps + 1)))

    def finish(self, model: nn.Module, steps: int) -> dict[str, dict[str, np.ndarray]]:
        state = model.state_dict()
        scale = 1.0 / (self.effective_steps(steps) * self.lr)
        new = {}
        for k in self.keys:
            if k in self.params:
                new[k] = self.c_i[k] - self.c[k] + (self.x[k] - state[k].detach()) * scale
            else:
                new[k] = self.c_i[k].clone()
        delta = {k: new[k] - self.c_i[k] for k in self.keys}
        self.store[self.KEY] = _to_numpy(new)
        return {"control": _to_numpy(delta)}


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
        self.grad_clip = _clip(grad_clip, "feddyn-grad-clip")

    def begin(self, model: nn.Module, inputs: RoundInputs) -> None:
        self.params = trainable(model)
        self.anchor = {n: p.detach().clone() for n, p in self.params.items()}
        self.g = _load_state(inputs.store, self.KEY, self.anchor, inputs, "FedDyn g_k")
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
        self.store[self.KEY] = _to_numpy(new)
        return {}


FEDDYN_ALPHA = Option(
    "feddyn-alpha",
    float,
    0.01,
    "FedDyn: alpha of the linear + proximal terms (paper)",
    low=0,
    low_open=True,
)
SCAFFOLD_GRAD_CLIP = Option(
    "scaffold-grad-clip",
    float,
    REFERENCE_GRAD_CLIP,
    "SCAFFOLD: clip each corrected gradient to this L2 norm, 0 = off (Acar et al.'s code: 10)",
    low=0,
)
FEDDYN_GRAD_CLIP = Option(
    "feddyn-grad-clip",
    float,
    REFERENCE_GRAD_CLIP,
    "FedDyn: clip each step's gradient to this L2 norm, 0 = off (Acar et al.'s code: 10)",
    low=0,
)
