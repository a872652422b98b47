"""SCAFFOLD's client rule: control variates kept in the node, Acar et al.'s gradient clip."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ripple_flwr.methods.scaffold.spec import SCAFFOLD_GRAD_CLIP
from ripple_flwr.settings import RunSettings
from ripple_flwr.training.rules import (
    ClientRule,
    RoundInputs,
    grad_clip_norm,
    load_state,
    to_numpy,
    trainable,
)


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
        self.grad_clip = grad_clip_norm(grad_clip, "scaffold-grad-clip")

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
        self.c_i = load_state(inputs.store, self.KEY, like, inputs, "SCAFFOLD control c_i")
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
        self.store[self.KEY] = to_numpy(new)
        return {"control": to_numpy(delta)}


def rule(settings: RunSettings) -> ClientRule:
    """The clients' rule of a SCAFFOLD run."""
    return ScaffoldRule(SCAFFOLD_GRAD_CLIP.of(settings))
