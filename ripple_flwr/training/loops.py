"""Client-side training and evaluation loops, plain torch (no Flower).

Data arrive as whole numpy arrays (a client holds a few hundred images), so
they are turned into tensors once and batched by indexing: no DataLoader and
no worker processes, which would cost more than the training itself in a
simulation with many clients per core.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ripple_flwr.training.models import set_state

__all__ = ["evaluate_model", "evaluate_states", "train_local"]


def _as_inputs(
    model: nn.Module, x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validated float32 images and int64 labels on ``device``."""
    if not isinstance(x, torch.Tensor):
        x = np.asarray(x, dtype=np.float32)
        if not x.flags.writeable:
            x = x.copy()  # torch.as_tensor warns on read-only arrays
    if not isinstance(y, torch.Tensor):
        y = np.asarray(y)
        if not y.flags.writeable:
            y = y.copy()
    xt = torch.as_tensor(x)
    yt = torch.as_tensor(y)
    if xt.ndim != 4:
        raise ValueError(f"x must be (n, C, H, W), got shape {tuple(xt.shape)}")
    if yt.ndim != 1:
        raise ValueError(f"y must be a 1-D label vector, got shape {tuple(yt.shape)}")
    if len(xt) == 0:
        raise ValueError("no data: x is empty")
    if len(xt) != len(yt):
        raise ValueError(f"{len(xt)} images but {len(yt)} labels")
    expected = getattr(model, "input_shape", None)
    if expected is not None and tuple(xt.shape[1:]) != tuple(expected):
        raise ValueError(
            f"model expects images of shape {tuple(expected)}, got {tuple(xt.shape[1:])}"
        )
    if yt.dtype.is_floating_point or yt.dtype == torch.bool or yt.is_complex():
        raise ValueError(f"labels must be integers, got {yt.dtype}")
    num_classes = getattr(model, "num_classes", None)
    lo, hi = int(yt.min()), int(yt.max())
    if lo < 0 or (num_classes is not None and hi >= num_classes):
        bound = f"[0, {num_classes})" if num_classes is not None else "non-negative"
        raise ValueError(f"labels must be {bound}, got values in [{lo}, {hi}]")
    return xt.to(device=device, dtype=torch.float32), yt.to(device=device, dtype=torch.int64)


def _batches(n: int, batch_size: int, order: torch.Tensor) -> list[torch.Tensor]:
    """Split ``order`` into batches; a lone trailing example joins the previous batch.

    A batch of one breaks BatchNorm in training mode (ResNet-18), and one
    example alone would give a very noisy step; folding it keeps every
    example used each epoch.
    """
    bounds = list(range(0, n, batch_size)) + [n]
    if batch_size > 1 and len(bounds) > 2 and bounds[-1] - bounds[-2] == 1:
        del bounds[-2]
    return [order[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def train_local(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int,
    lr: float = 0.01,
    momentum: float = 0.9,
    batch_size: int = 32,
    device: str = "cpu",
    seed: int = 0,
    weight_decay: float = 0.0,
    penalty: Callable[[], torch.Tensor] | None = None,
    correct: Callable[[], None] | None = None,
    step: Callable[[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor], torch.Tensor]
    | None = None,
    max_grad_norm: float = 0.0,
) -> dict[str, float | int | tuple[float, ...]]:
    """Train ``model`` in place for ``epochs`` epochs of SGD with momentum on (x, y).

    A method's training rule (:mod:`ripple_flwr.training.rules`) hooks in:
    ``penalty`` (e.g. FedProx's proximal term) is added to every batch's loss;
    ``correct`` changes the gradients after each backward pass (SCAFFOLD);
    ``step(model, optimiser, xb, yb)`` replaces the whole step on a batch and
    returns its data loss (Per-FedAvg, pFedMe). ``max_grad_norm`` > 0 clips
    each step's gradient (after ``correct``) to that L2 norm over all
    parameters (SCAFFOLD's and FedDyn's reference code: 10). The reported
    loss is the data loss alone.

    A fresh optimiser each call (no momentum carried between rounds, as in
    FedAvg). Shuffling and dropout draw from RNGs seeded with ``seed`` inside
    a forked RNG state, so a call is reproducible on CPU and leaves the global
    torch RNG untouched. The model stays on ``device`` in its previous
    train/eval mode. Returns the mean batch loss over all steps, the number of
    examples, the number of optimiser steps and each step's batch loss.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    dev = torch.device(device)
    model.to(dev)
    xt, yt = _as_inputs(model, x, y, device)
    n = len(xt)
    optimiser = torch.optim.SGD(
        model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay
    )
    shuffle = torch.Generator().manual_seed(seed)
    fork_devices = []
    if dev.type == "cuda":
        fork_devices = [dev.index if dev.index is not None else torch.cuda.current_device()]
    was_training = model.training
    model.train()
    total = torch.zeros((), device=dev)
    losses: list[torch.Tensor] = []  # each step's data loss, on the device until the end
    try:
        with torch.random.fork_rng(devices=fork_devices):
            # Dropout draws from the global RNG of the device; seed only the forked ones.
            torch.default_generator.manual_seed(seed)
            if fork_devices:
                with torch.cuda.device(fork_devices[0]):
                    torch.cuda.manual_seed(seed)
            for _ in range(epochs):
                order = torch.randperm(n, generator=shuffle).to(dev)
                for idx in _batches(n, batch_size, order):
                    if step is not None:
                        losses.append(step(model, optimiser, xt[idx], yt[idx]).detach())
                        total += losses[-1]
                        continue
                    optimiser.zero_grad(set_to_none=True)
                    loss = F.cross_entropy(model(xt[idx]), yt[idx])
                    objective = loss if penalty is None else loss + penalty()
                    objective.backward()
                    if correct is not None:
                        correct()
                    if max_grad_norm > 0:
                        nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
                    optimiser.step()
                    losses.append(loss.detach())
                    total += losses[-1]
    finally:
        model.train(was_training)
    return {
        "mean_loss": float(total) / len(losses),
        "num_examples": n,
        "steps": len(losses),
        "step_losses": tuple(torch.stack(losses).double().cpu().tolist()),  # FedGWC reads them
    }


def evaluate_model(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    batch_size: int = 256,
    device: str = "cpu",
) -> dict[str, float | int]:
    """Mean cross-entropy and accuracy of ``model`` on (x, y), in eval mode without gradients.

    The model is restored to its previous train/eval mode afterwards.
    """
    return evaluate_states(model, [None], x, y, batch_size=batch_size, device=device)[0]


def evaluate_states(
    model: nn.Module,
    states: Sequence[Mapping[str, np.ndarray] | None],
    x: np.ndarray,
    y: np.ndarray,
    *,
    batch_size: int = 256,
    device: str = "cpu",
) -> list[dict[str, float | int]]:
    """:func:`evaluate_model` of ``model`` loaded with each state in turn (``None``: as it is).

    The data are checked and moved to ``device`` once for all states (IFCA's
    candidates, the clustered baselines' best-by-loss choice). ``model`` is
    left holding the last state. One model after another is the fastest on
    CPU: a vmapped ``functional_call`` over stacked weights and a grouped
    convolution over all K were both slower (``benchmarks/ifca_eval.py``).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    dev = torch.device(device)
    model.to(dev)
    xt, yt = _as_inputs(model, x, y, device)
    was_training = model.training
    model.eval()
    try:
        out = []
        for state in states:
            if state is not None:
                set_state(model, state)
            out.append(_evaluate_tensors(model, xt, yt, batch_size))
    finally:
        model.train(was_training)
    return out


def _evaluate_tensors(
    model: nn.Module, xt: torch.Tensor, yt: torch.Tensor, batch_size: int
) -> dict[str, float | int]:
    """Loss and accuracy of ``model`` (in eval mode) on checked tensors."""
    n = len(xt)
    loss_sum = torch.zeros((), device=xt.device, dtype=torch.float64)
    correct = torch.zeros((), device=xt.device, dtype=torch.int64)
    with torch.inference_mode():
        for start in range(0, n, batch_size):
            logits = model(xt[start : start + batch_size])
            target = yt[start : start + batch_size]
            loss_sum += F.cross_entropy(logits, target, reduction="sum").double()
            correct += (logits.argmax(dim=1) == target).sum()
    return {"loss": float(loss_sum) / n, "accuracy": int(correct) / n, "num_examples": n}
