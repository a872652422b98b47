"""Client-side training rules: how a method's clients train and personalise (plain torch).

Two layers. A *penalty rule* (:data:`TRAINING_RULES`: plain SGD, FedProx)
reads the training message's config and returns a term added to each
batch's loss. A :class:`ClientRule` (:data:`CLIENT_RULES`, what the
ClientApp uses; every penalty rule is wrapped as one) adds the hooks that
methods with state between rounds need: before training it sees the model,
the message's config, the extra arrays received (SCAFFOLD's c) and the
node's persistent store (Flower's ``context.state``); during training it may
correct each gradient (SCAFFOLD), add a penalty (FedDyn, FedProx) or replace
the whole step (Per-FedAvg's two batches, pFedMe's inner solve); after
training it updates the store and returns extra reply arrays (SCAFFOLD's
control delta); before evaluation it may change the model a client scores
(Per-FedAvg's one step, pFedMe's personal model). Which rule a method
needs is part of its registry entry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from ripple_flwr.settings import Option

if TYPE_CHECKING:
    from ripple_flwr.settings import RunSettings

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


def fedprox_rule(model: nn.Module, config: Mapping[str, Any]) -> Penalty | None:
    """FedProx: the proximal term, with the ``proximal-mu`` the server's FedProx sent."""
    if "proximal-mu" not in config:
        raise ValueError(
            "FedProx training message carries no 'proximal-mu': the server's strategy did not "
            "run Flower's FedProx.configure_train"
        )
    return proximal_penalty(model, float(config["proximal-mu"]))


TRAINING_RULES: dict[str, Rule] = {"sgd": sgd_rule, "fedprox": fedprox_rule}


# -- rules with hooks (methods with state between rounds) ------------------------------------
Store = MutableMapping[str, dict[str, np.ndarray]]
Step = Callable[[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class RoundInputs:
    """What a client's rule sees before training.

    ``extras``: the training message's ArrayRecords besides the model, decoded
    (SCAFFOLD's ``control``). ``store``: the node's persistent state
    (``context.state`` through :class:`ripple_flwr.app.node_state.NodeStore`; a
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


def _load_state(
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


def _to_numpy(tensors: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {n: t.detach().to("cpu", copy=True).numpy() for n, t in tensors.items()}


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

    def finish(self, model: nn.Module, steps: int) -> dict[str, dict[str, np.ndarray]]:
        """Update the node's state; the extra arrays of the reply (none by default)."""
        return {}

    def personalise(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, store: Store) -> None:
        """Turn the received model into the one this client is scored with (itself by default)."""
        return None


class PenaltyRule(ClientRule):
    """A penalty rule of :data:`TRAINING_RULES` (plain SGD, FedProx) as a :class:`ClientRule`."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self._penalty: Penalty | None = None

    def begin(self, model: nn.Module, inputs: RoundInputs) -> None:
        self._penalty = self.rule(model, inputs.config)

    def penalty(self) -> Penalty | None:
        return self._penalty


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
    """

    KEY = "scaffold.c_i"
    stateful = True

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
    - alpha (theta_k - theta_prev)).
    """

    KEY = "feddyn.g"
    stateful = True

    def __init__(self, alpha: float) -> None:
        if not alpha > 0:
            raise ValueError(f"feddyn-alpha must be > 0, got {alpha}")
        self.alpha = alpha

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


class PerFedAvgRule(ClientRule):
    """Per-FedAvg, first order (Fallah et al., 2020).

    Each step takes a batch of 2 x batch-size examples, in the epoch's shuffled
    order, and splits it: on the first half D, temp = theta - alpha grad L_D(theta);
    on the second half D', the gradient of L_D' at temp is applied to theta
    by the app's optimiser with learning rate beta (the run's momentum). So a
    step costs two gradients and an epoch sees every example once, like
    FedAvg's. Personalisation: one plain step of size alpha on the client's
    whole train split (gradient in eval mode, so deterministic) from the
    received model, then the test split is scored.
    """

    batch_factor = 2

    def __init__(self, alpha: float, beta: float) -> None:
        if not alpha > 0 or not beta > 0:
            raise ValueError(f"perfedavg-alpha and -beta must be > 0, got {alpha}, {beta}")
        self.alpha, self.beta = alpha, beta

    def optimiser_lr(self, lr: float) -> float:
        return self.beta

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
        optimiser.zero_grad(set_to_none=True)
        F.cross_entropy(model(xb), yb).backward()
        with torch.no_grad():
            for p, s in zip(self.params, saved, strict=True):
                p.copy_(s)
        optimiser.step()
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
    on f(theta_tilde; batch) + lambda/2 ||theta_tilde - w||^2; then the local
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

    def __init__(self, lam: float, inner_steps: int, personal_lr: float) -> None:
        if not lam > 0 or inner_steps < 1 or not personal_lr > 0:
            raise ValueError(
                f"pfedme-lambda and -personal-lr must be > 0 and -inner-steps >= 1, got "
                f"{lam}, {personal_lr}, {inner_steps}"
            )
        self.lam, self.inner_steps, self.personal_lr = lam, inner_steps, personal_lr

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
                    n: (t - self.personal_lr * (g + self.lam * (t - self.w[n]))).detach()
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
    )
    return stats, rule.finish(model, int(stats["steps"]))


# The options the client rules read (the methods' strategy files list them too).
FEDDYN_ALPHA = Option(
    "feddyn-alpha",
    float,
    0.01,
    "FedDyn: alpha of the linear + proximal terms (paper)",
    low=0,
    low_open=True,
)
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
    1e-3,
    "Per-FedAvg: meta step beta (common reference code)",
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

RuleFactory = Callable[["RunSettings"], ClientRule]

CLIENT_RULES: dict[str, RuleFactory] = {
    "sgd": lambda s: PenaltyRule(sgd_rule),
    "fedprox": lambda s: PenaltyRule(fedprox_rule),
    "scaffold": lambda s: ScaffoldRule(),
    "feddyn": lambda s: FedDynRule(FEDDYN_ALPHA.of(s)),
    "perfedavg": lambda s: PerFedAvgRule(PERFEDAVG_ALPHA.of(s), PERFEDAVG_BETA.of(s)),
    "pfedme": lambda s: PFedMeRule(
        PFEDME_LAMBDA.of(s), PFEDME_INNER_STEPS.of(s), PFEDME_PERSONAL_LR.of(s)
    ),
}
"""Every client rule a method may name in its registry entry (``client_rule``)."""
