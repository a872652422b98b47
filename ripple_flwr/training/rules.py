"""Client-side training rules: the hooks of a method's local training (plain torch).

Two layers. A *penalty rule* (a :data:`Rule`, such as :func:`sgd_rule`) reads the
training message's config and returns a term added to each batch's loss. A
:class:`ClientRule` (what the ClientApp uses; a penalty rule is wrapped as one by
:class:`PenaltyRule`) adds the hooks that methods with state between rounds need:
before training it sees the model, the message's config, the extra arrays received
(SCAFFOLD's c) and the node's persistent store (Flower's ``context.state``); during
training it may correct each gradient (SCAFFOLD), add a penalty (FedDyn, FedProx) or
replace the whole step (Per-FedAvg's two batches, pFedMe's inner solve); after training
it updates the store and returns extra reply arrays (SCAFFOLD's control delta); before
evaluation it may change the model a client scores (Per-FedAvg's one step, pFedMe's
personal model). This module holds the hooks, the loop around them and the helpers the
rules share; each method's own rule lives in its folder, ``ripple_flwr/methods/<name>/client.py``
(plain SGD for a method without one).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    pass

log = logging.getLogger("flwr.ripple")

Penalty = Callable[[], torch.Tensor]
Rule = Callable[[nn.Module, Mapping[str, Any]], Penalty | None]


def proximal_penalty(model: nn.Module, mu: float) -> Penalty:
    """FedProx's mu/2 * ||w - w_global||^2 against a detached copy of the received weights.

    Call it right after loading the received (global) weights: the anchor is
    taken then, and only trainable parameters (not buffers) are pulled back.
    """
    if not mu >= 0:
        raise ValueError(f"proximal-mu must be >= 0, got {mu}")
    params = [p for p in model.parameters() if p.requires_grad]
    anchor = [p.detach().clone() for p in params]

    def penalty() -> torch.Tensor:
        total = sum(((p - a) ** 2).sum() for p, a in zip(params, anchor, strict=True))
        return 0.5 * mu * total

    return penalty


def sgd_rule(model: nn.Module, config: Mapping[str, Any]) -> Penalty | None:
    """Plain local SGD: nothing added to the loss."""
    return None


# -- rules with hooks (methods with state between rounds) ------------------------------------
Store = MutableMapping[str, dict[str, np.ndarray]]
Step = Callable[[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class RoundInputs:
    """What a client's rule sees before training.

    ``extras``: the training message's ArrayRecords besides the model, decoded
    (SCAFFOLD's ``control``). ``store``: the node's persistent state
    (``context.state`` through :class:`ripple_flwr.app.client.node_state.NodeStore`; a
    plain dict in tests). ``returning``: the server has sent this client a
    training message before, so a rule whose state is missing knows the node
    lost it (a restarted SuperNode) rather than never having had it.
    """

    config: Mapping[str, Any] = field(default_factory=dict)
    extras: Mapping[str, dict[str, np.ndarray]] = field(default_factory=dict)
    store: Store = field(default_factory=dict)
    returning: bool = False
    lr: float = 0.01
    momentum: float = 0.0


def trainable(model: nn.Module) -> dict[str, nn.Parameter]:
    """The parameters a rule acts on, by state-dict name (buffers are left alone)."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def load_state(
    store: Store, key: str, like: dict[str, torch.Tensor], inputs: RoundInputs, what: str
) -> dict[str, torch.Tensor]:
    """The stored tensors of ``key``, or zeros (first round of this client, or a lost state)."""
    saved = store.get(key)
    if saved is not None and set(saved) == set(like):
        return {
            n: torch.as_tensor(np.array(saved[n]), dtype=t.dtype, device=t.device)
            for n, t in like.items()
        }
    if saved is not None:
        log.warning("%s in the node's state does not match the model: starting from zero", what)
    elif inputs.returning:
        log.warning(
            "this node trained before but its state has no %s (a restarted SuperNode?): "
            "starting again from zero",
            what,
        )
    return {n: torch.zeros_like(t) for n, t in like.items()}


def to_numpy(tensors: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Tensors as numpy arrays on the CPU (copies), for the node's state or a reply."""
    return {n: t.detach().to("cpu", copy=True).numpy() for n, t in tensors.items()}


def grad_clip_norm(value: float, key: str) -> float:
    """A gradient-clip norm read from ``key``: finite and >= 0 (0: no clipping)."""
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{key} must be a finite norm >= 0 (0: no clipping), got {value}")
    return float(value)


class ClientRule:
    """Hooks of one method's local training; the defaults are plain local SGD.

    One instance per training (or evaluation) call. :meth:`begin` runs after
    the received model is loaded; ``train_local`` calls :meth:`penalty` (once,
    for a term added to every batch's loss), :meth:`correct` after each
    backward pass, or :attr:`step` instead of its own step; :meth:`finish`
    runs after training and returns the extra reply arrays by record name.
    """

    batch_factor: int = 1  # examples per step, in batch-size units (Per-FedAvg: 2)
    step: Step | None = None
    # Clip each step's gradient (after :meth:`correct`) to this L2 norm; 0 = no clipping.
    grad_clip: float = 0.0
    stateful: bool = False  # keeps state in the node between rounds (SCAFFOLD, FedDyn, pFedMe)

    def begin(self, model: nn.Module, inputs: RoundInputs) -> None:
        """Read the received model, config, extra arrays and the node's state."""
        return None

    def optimiser_lr(self, lr: float) -> float:
        """Learning rate of ``train_local``'s optimiser (Per-FedAvg: its beta)."""
        return lr

    def penalty(self) -> Penalty | None:
        """A term added to every batch's loss, or ``None``."""
        return None

    def correct(self) -> None:
        """Change the gradients after each backward pass (nothing by default)."""
        return None

    def has_correction(self) -> bool:
        return type(self).correct is not ClientRule.correct

    def observe(self, stats: Mapping[str, Any]) -> None:
        """What local training measured (``train_local``'s statistics; FedGWC keeps each
        step's loss), before :meth:`finish`."""
        return None

    def finish(self, model: nn.Module, steps: int) -> dict[str, dict[str, np.ndarray]]:
        """Update the node's state; the extra arrays of the reply (none by default)."""
        return {}

    def personalise(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, store: Store) -> None:
        """Turn the received model into the one this client is scored with (itself by default)."""
        return None


class PenaltyRule(ClientRule):
    """A penalty rule (:data:`Rule`: plain SGD, FedProx's term) as a :class:`ClientRule`."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self._penalty: Penalty | None = None

    def begin(self, model: nn.Module, inputs: RoundInputs) -> None:
        self._penalty = self.rule(model, inputs.config)

    def penalty(self) -> Penalty | None:
        return self._penalty


def train_with_rule(
    rule: ClientRule,
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    inputs: RoundInputs,
    *,
    epochs: int,
    batch_size: int,
    seed: int,
    device: str = "cpu",
) -> tuple[dict[str, float | int], dict[str, dict[str, np.ndarray]]]:
    """Local training of ``model`` (the received weights loaded) under ``rule``.

    What the ClientApp runs for every method: the rule's hooks around
    :func:`ripple_flwr.training.loops.train_local` with the round's ``inputs.lr`` and
    ``inputs.momentum``. Returns train_local's statistics and the rule's
    extra reply arrays.
    """
    from ripple_flwr.training.loops import train_local

    # On the training device before the rule copies anything from it (anchors, c, theta).
    model.to(torch.device(device))
    rule.begin(model, inputs)
    stats = train_local(
        model,
        x,
        y,
        epochs=epochs,
        lr=rule.optimiser_lr(inputs.lr),
        momentum=inputs.momentum,
        batch_size=batch_size * rule.batch_factor,
        device=device,
        seed=seed,
        penalty=rule.penalty(),
        correct=rule.correct if rule.has_correction() else None,
        step=rule.step,
        max_grad_norm=rule.grad_clip,
    )
    rule.observe(stats)
    return stats, rule.finish(model, int(stats["steps"]))
