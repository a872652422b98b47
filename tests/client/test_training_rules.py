"""Client-side training rules, checked by hand on a tiny model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from ripple_flwr.methods.fedprox.client import fedprox_rule
from ripple_flwr.training.loops import train_local
from ripple_flwr.training.rules import proximal_penalty, sgd_rule


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(3, 2)


def test_proximal_term_is_half_mu_times_the_squared_distance():
    model = tiny_model()
    start = [p.detach().clone() for p in model.parameters()]
    penalty = proximal_penalty(model, mu=0.4)
    assert float(penalty()) == 0.0  # at the anchor
    with torch.no_grad():
        model.weight += torch.tensor([[1.0, 0.0, -2.0], [0.5, 0.0, 0.0]])
        model.bias -= torch.tensor([3.0, 0.0])
    # ||d||^2 = 1 + 4 + 0.25 + 9 = 14.25; mu/2 * 14.25 = 2.85 (squared norm, not the norm)
    value = penalty()
    assert float(value) == pytest.approx(2.85, rel=1e-6)
    value.backward()
    # d/dw (mu/2 ||w - w0||^2) = mu (w - w0)
    for p, p0 in zip(model.parameters(), start, strict=True):
        torch.testing.assert_close(p.grad, 0.4 * (p.detach() - p0))


def test_anchor_is_a_detached_copy():
    model = tiny_model()
    penalty = proximal_penalty(model, mu=1.0)
    with torch.no_grad():
        model.weight.add_(1.0)
    assert float(penalty()) == pytest.approx(0.5 * 6.0)


def test_fedprox_rule_needs_the_servers_mu():
    model = tiny_model()
    with pytest.raises(ValueError, match="no 'proximal-mu'.*FedProx.configure_train"):
        fedprox_rule(model, {"lr": 0.01})
    with pytest.raises(ValueError, match="proximal-mu must be >= 0"):
        fedprox_rule(model, {"proximal-mu": -1.0})
    assert sgd_rule(model, {"proximal-mu": 1.0}) is None


def test_train_local_adds_the_penalty_to_each_step():
    # Two plain SGD steps on one example, by hand, with and without the proximal term.
    x = np.array([[[[1.0, 2.0, -1.0]]]], dtype=np.float32)  # (1, 1, 1, 3)
    y = np.array([1])

    class Flat(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = tiny_model()

        def forward(self, inp):
            return self.fc(inp.flatten(1))

    def run(mu):
        model = Flat()
        penalty = proximal_penalty(model, mu) if mu else None
        train_local(model, x, y, epochs=2, lr=0.5, momentum=0.0, batch_size=1, penalty=penalty)
        return model.fc.weight.detach().clone(), model.fc.bias.detach().clone()

    def by_hand(mu):
        ref = Flat()
        w0 = [p.detach().clone() for p in ref.parameters()]
        for _ in range(2):
            loss = nn.functional.cross_entropy(ref(torch.as_tensor(x)), torch.as_tensor(y))
            params = list(ref.parameters())
            prox = sum(((p - a) ** 2).sum() for p, a in zip(params, w0, strict=True))
            loss = loss + 0.5 * mu * prox
            grads = torch.autograd.grad(loss, list(ref.parameters()))
            with torch.no_grad():
                for p, g in zip(ref.parameters(), grads, strict=True):
                    p -= 0.5 * g
        return ref.fc.weight.detach(), ref.fc.bias.detach()

    for mu in (0.0, 2.0):
        got, want = run(mu), by_hand(mu)
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[1], want[1])
    # The proximal pull keeps the model closer to where it started.
    start = Flat().fc.weight.detach()
    assert (run(2.0)[0] - start).norm() < (run(0.0)[0] - start).norm()
