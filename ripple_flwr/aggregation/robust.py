"""Bounds on what one client can do to a model: update norms and sane aggregate steps.

Plain numpy, no Flower. A training reply is judged by its update (returned
minus what the server sent that client), measured in float64. The scale an
update is compared with is the *low* median of the round's update norms
(with the previous round's accepted norms), so one huge reply among two
cannot set its own yardstick.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

State = Mapping[str, np.ndarray]


def update_norm(sent: State, returned: State) -> float:
    """L2 norm of ``returned - sent`` over the floating-point tensors.

    Each tensor's difference and its squared norm are taken in the model's own
    precision (one BLAS dot, about 10x faster than converting to float64
    first); a square that overflows (a hostile reply) is taken again in
    float64, so the norm stays exact in magnitude.
    """
    total = 0.0
    for key, before in sent.items():
        before = np.asarray(before)
        if not np.issubdtype(before.dtype, np.inexact):
            continue  # counters (num_batches_tracked) are not part of the update
        after = np.asarray(returned[key])
        diff = (after - before).ravel()
        sq = float(np.dot(diff, diff))
        if not math.isfinite(sq):
            wide = after.astype(np.float64).ravel() - before.astype(np.float64).ravel()
            sq = float(np.dot(wide, wide))
        total += sq
    return float(np.sqrt(total))


def _squares(a: np.ndarray) -> np.ndarray:
    """Squared norms of the rows of ``a`` (K, ...), overflow-safe as in :func:`update_norm`."""
    flat = a.reshape(len(a), -1)
    sq = np.einsum("ij,ij->i", flat, flat).astype(np.float64)
    if not np.all(np.isfinite(sq)):
        wide = flat.astype(np.float64)
        sq = np.einsum("ij,ij->i", wide, wide)
    return sq


def state_norm(state: State) -> float:
    """L2 norm of a model over its floating-point tensors."""
    floats = [
        np.asarray(v) for v in state.values() if np.issubdtype(np.asarray(v).dtype, np.inexact)
    ]
    return float(np.sqrt(sum(float(_squares(v.reshape(1, -1))[0]) for v in floats)))


def low_median(values: Sequence[float]) -> float | None:
    """The lower middle value (``None`` if empty): an outlier never sets it when n >= 2."""
    v = sorted(float(x) for x in values)
    return v[(len(v) - 1) // 2] if v else None


def out_of_bound(
    norms: Sequence[float],
    history: Sequence[float] = (),
    factor: float = 10.0,
    max_norm: float = 0.0,
    model_norms: Sequence[float] | None = None,
) -> list[str | None]:
    """For each update norm, why it is out of proportion (``None`` if it is not).

    ``factor`` (> 0) times the low median of ``norms`` and ``history`` (the
    previous round's accepted norms) bounds every update; ``max_norm`` (> 0)
    is an absolute bound. Either is off at 0. A non-finite norm is always out.

    ``model_norms[i]``, the norm of the model reply i was sent, is a floor of
    the relative bound: an update smaller than the model it started from is
    never called out of proportion. Under strong non-IID data honest updates
    differ by orders of magnitude (a client whose cluster model already fits
    it barely moves it; one that does not moves it by a tenth of its norm),
    so the round's median alone would drop honest clients; a scaled or
    constant-weights attack moves a model far more than its own norm.
    """
    finite = [n for n in norms if np.isfinite(n)]
    reference = low_median(list(finite) + [h for h in history if np.isfinite(h)])
    floors = [0.0] * len(norms) if model_norms is None else list(model_norms)
    if len(floors) != len(norms):
        raise ValueError(f"{len(norms)} update norms but {len(floors)} model norms")
    reasons: list[str | None] = []
    for n, floor in zip(norms, floors, strict=True):
        if not np.isfinite(n):
            reasons.append("update norm is not finite")
        elif max_norm > 0 and n > max_norm:
            reasons.append(f"update norm {n:.4g} above max-update-norm={max_norm:g}")
        elif (
            factor > 0
            and reference is not None
            and reference > 0
            and n > factor * reference
            and n > floor
        ):
            above = f" and above the norm {floor:.4g} of the model it was sent" if floor else ""
            reasons.append(
                f"update norm {n:.4g} is {n / reference:.3g} x the round's median "
                f"{reference:.4g}{above} (update-norm-factor={factor:g})"
            )
        else:
            reasons.append(None)
    return reasons


def unsafe_step(before: State, after: State, max_growth: float = 10.0) -> str | None:
    """Why a model must not move from ``before`` to ``after`` (``None``: it may).

    Refused: any non-finite value, or a norm above ``max_growth`` times the
    old norm (or above ``max_growth`` for a model at zero).
    """
    for key, value in after.items():
        v = np.asarray(value)
        if np.issubdtype(v.dtype, np.inexact) and not np.all(np.isfinite(v)):
            return f"tensor {key!r} would not be finite"
    old, new = state_norm(before), state_norm(after)
    if new > max_growth * max(old, 1.0):
        return f"model norm would grow from {old:.4g} to {new:.4g} (more than {max_growth:g} x)"
    return None


def unsafe_stacked_steps(before: State, after: State, max_growth: float = 10.0) -> list[str | None]:
    """:func:`unsafe_step` for K models stacked on a leading axis, vectorised over K.

    A non-finite value shows in its row's squared norm, so one einsum per
    tensor checks both; only a row whose square is not finite is looked at
    again (in float64, to tell an overflow from a NaN or Inf).
    """
    k = len(next(iter(before.values())))
    old, new = np.zeros(k), np.zeros(k)
    bad: list[str | None] = [None] * k
    for key, value in after.items():
        a = np.asarray(value)
        if not np.issubdtype(a.dtype, np.inexact):
            continue
        flat = a.reshape(k, -1)
        sq = np.einsum("ij,ij->i", flat, flat).astype(np.float64)
        for c in np.flatnonzero(~np.isfinite(sq)):
            wide = flat[c].astype(np.float64)
            sq[c] = float(np.dot(wide, wide))
            if not np.isfinite(sq[c]):
                bad[c] = bad[c] or f"tensor {key!r} would not be finite"
                sq[c] = 0.0
        new += sq
        old += _squares(np.asarray(before[key]))
    old, new = np.sqrt(old), np.sqrt(new)
    for c in range(k):
        if bad[c] is None and new[c] > max_growth * max(old[c], 1.0):
            bad[c] = (
                f"model norm would grow from {old[c]:.4g} to {new[c]:.4g} "
                f"(more than {max_growth:g} x)"
            )
    return bad
