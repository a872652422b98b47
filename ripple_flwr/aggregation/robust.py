"""Bounds on what one client can do to a model: update norms, rescaling and sane steps.

Plain numpy, no Flower. A training reply is judged by its update (returned
minus what the server sent that client), measured in float64, on two scales:

- its norm, against the *low* median of the round's update norms and of the
  recent rounds' accepted ones (so one huge reply among two cannot set its
  own yardstick), with a floor of half the model's norm;
- its **radial step** rho = <update, model> / ||model||^2, the share by which
  it rescales the model it was sent. Honest SGD barely rescales a model (|rho|
  <= 0.01 a round measured, while its update is up to 0.13 of the model's
  norm); a scaling or shrinking attack is nothing but rescaling. rho is held
  to ``factor`` x the low median |rho| of the round and of the recent rounds'
  accepted replies (honest clients set it while they are the majority), with
  a floor of :data:`RESCALE_FLOOR`. So a coalition below half the replies
  grows the model by at most ``factor`` x the honest rate a round.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

State = Mapping[str, np.ndarray]


def update_norm(sent: State, returned: State) -> float:
    """L2 norm of ``returned - sent`` over the floating-point tensors (see :func:`update_stats`)."""
    return update_stats(sent, returned)[0]


def _row_dots(flat: np.ndarray) -> np.ndarray:
    """``<row, row>`` for each row of a (K, P) array, one BLAS dot per row, in its own dtype.

    Three times faster than ``einsum`` over a model-sized row; an overflow
    gives inf (the callers redo it in float64).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        return np.array([float(np.dot(row, row)) for row in flat], dtype=np.float64)


def _squares(a: np.ndarray) -> np.ndarray:
    """Squared norms of the rows of ``a`` (K, ...), overflow-safe as in :func:`update_norm`."""
    flat = a.reshape(len(a), -1)
    sq = _row_dots(flat)
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


def update_stats(sent: State, returned: State) -> tuple[float, float]:
    """``(||returned - sent||, <returned - sent, sent>)`` over the floating-point tensors.

    Each tensor's difference and its two dot products are taken in the model's
    own precision (one BLAS dot each, about 10x faster than converting to float64
    first); a sum that overflows (a hostile reply) is taken again in float64, so
    both stay exact in magnitude. Counters (``num_batches_tracked``) are not part
    of the update. The inner product over ``||sent||^2`` is the radial step.
    """
    total, radial = 0.0, 0.0
    for key, before in sent.items():
        before = np.asarray(before)
        if not np.issubdtype(before.dtype, np.inexact):
            continue
        after = np.asarray(returned[key])
        flat = before.ravel()
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is redone below
            diff = (after - before).ravel()
            sq, dot = float(np.dot(diff, diff)), float(np.dot(diff, flat))
        if not (math.isfinite(sq) and math.isfinite(dot)):
            wide = after.astype(np.float64).ravel() - flat.astype(np.float64)
            sq, dot = float(np.dot(wide, wide)), float(np.dot(wide, flat.astype(np.float64)))
        total += sq
        radial += dot
    return float(np.sqrt(total)), radial


def low_median(values: Sequence[float]) -> float | None:
    """The lower middle value (``None`` if empty): an outlier never sets it when n >= 2."""
    v = sorted(float(x) for x in values)
    return v[(len(v) - 1) // 2] if v else None


# An update below this share of its model's norm is never out of proportion by its norm:
# honest updates reach 0.13 of it (measured: FedAvg and the oracle, Dir(0.1) and
# one class per client), and under one-class data they spread over 100x the round's
# median, so the median alone would drop honest clients.
MODEL_FLOOR = 0.5
# A radial step below this is never out of proportion: honest ones reach 0.008 (same runs),
# and a round where every client barely moves must not drop the one that moves a little.
RESCALE_FLOOR = 0.01
# A shrinking step below this is never out of proportion either. Honest clients shrink a
# model much more than they grow it when it was last fitted to other data: a FeSEM centre
# trained by one member of another class in the round before is shrunk by up to 0.036 of
# its norm (the paper's protocol, rounds 1-36; 31 honest replies were dropped at the 0.01
# floor). Growth, which a scaling attack needs, keeps the 0.01 floor.
SHRINK_FLOOR = 0.1


def out_of_bound(
    norms: Sequence[float],
    history: Sequence[float] = (),
    factor: float = 10.0,
    max_norm: float = 0.0,
    model_norms: Sequence[float] | None = None,
) -> list[str | None]:
    """For each update norm, why it is out of proportion (``None`` if it is not).

    ``factor`` (> 0) times the low median of ``norms`` and ``history`` (the
    recent rounds' accepted norms) bounds every update; ``max_norm`` (> 0)
    is an absolute bound. Either is off at 0. A non-finite norm is always out.

    :data:`MODEL_FLOOR` times ``model_norms[i]``, the norm of the model reply
    i was sent, is a floor of the relative bound: under strong non-IID data
    honest updates differ by orders of magnitude (a client whose cluster model
    already fits it barely moves it; one that does not moves it by a tenth of
    its norm); a scaled or constant-weights attack moves a model by about its
    own norm or more. Rescaling below the floor is :func:`out_of_rescale`'s.
    """
    finite = [n for n in norms if np.isfinite(n)]
    reference = low_median(list(finite) + [h for h in history if np.isfinite(h)])
    floors = [0.0] * len(norms) if model_norms is None else [MODEL_FLOOR * m for m in model_norms]
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
            above = (
                f" and above {MODEL_FLOOR:g} x the norm {floor / MODEL_FLOOR:.4g} of the model "
                "it was sent"
                if floor
                else ""
            )
            reasons.append(
                f"update norm {n:.4g} is {n / reference:.3g} x the round's median "
                f"{reference:.4g}{above} (update-norm-factor={factor:g})"
            )
        else:
            reasons.append(None)
    return reasons


def out_of_rescale(
    radials: Sequence[float], history: Sequence[float] = (), factor: float = 10.0
) -> list[str | None]:
    """For each radial step rho (see :func:`update_stats`), why it rescales too much.

    ``|rho|`` is held to ``factor`` times the low median ``|rho|`` of the round
    and of ``history`` (the recent rounds' accepted ones), and never called out
    below :data:`RESCALE_FLOOR` (growing) or :data:`SHRINK_FLOOR` (shrinking).
    Off at ``factor = 0``; a non-finite rho is out.
    """
    sizes = [abs(r) for r in radials if np.isfinite(r)]
    scale = low_median(sizes + [abs(h) for h in history if np.isfinite(h)]) or 0.0
    reasons: list[str | None] = []
    for r in radials:
        floor = RESCALE_FLOOR if r > 0 else SHRINK_FLOOR
        bound = max(factor * scale, floor)
        if not np.isfinite(r):
            reasons.append("radial step is not finite")
        elif factor > 0 and abs(r) > bound:
            verb = "grows" if r > 0 else "shrinks"
            reasons.append(
                f"it {verb} the model it was sent by {abs(r):.3g} of its norm along itself, "
                f"above {bound:.3g} ({factor:g} x the median {scale:.3g}, at least "
                f"{floor:g}; update-norm-factor={factor:g})"
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

    A non-finite value shows in its row's squared norm, so one dot per row
    and tensor checks both; only a row whose square is not finite is looked at
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
        sq = _row_dots(flat)
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
