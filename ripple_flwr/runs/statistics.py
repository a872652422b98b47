"""The statistics every table, map, sweep and page generator uses: one place, one rule.

- A cell over seeds is :func:`seed_stats`: every seed's value, the mean, the
  sample standard deviation (ddof = 1) and n. Shown as ``mean ± 2 sigma`` it is
  the **seed spread**, named so; it is not a test.
- A comparison of two rows is :func:`paired`: the per-seed difference (the same
  seed, so the same federation and the same training randomness on both sides),
  its mean, and the Student-t 95% interval of that mean (n - 1 degrees of
  freedom; ``t = 4.30`` at n = 3, ``2.78`` at n = 5).
- :func:`verdict` says "leads" only when that interval excludes 0, "trails"
  when it excludes 0 on the other side, and "no clear winner" otherwise. Fewer than
  :data:`MIN_SEEDS` shared seeds give no verdict ("too few seeds"); differences equal at
  every seed (sd = 0) are an "exact tie" (all 0) or an "exact gap", never "leads": a
  t interval of width 0 says nothing about what other seeds would give.
- Seeds on only one side are never dropped without a word: :func:`paired` lists them
  (``unpaired``) and :func:`fmt_paired` prints them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "CHANCE_P",
    "MIN_SEEDS",
    "PAIRED",
    "SPREAD",
    "above_chance",
    "fmt_paired",
    "paired",
    "seed_stats",
    "t_critical",
    "verdict",
]

SPREAD = (
    "mean ± 2 sigma over seeds (the seed spread; sigma the sample standard deviation, "
    "ddof = 1); one seed: its value alone"
)
PAIRED = (
    "paired per-seed difference, mean ± the half-width of its Student-t 95% interval "
    "(n - 1 degrees of freedom); 'leads' only when that interval excludes 0"
)


MIN_SEEDS = 3  # fewer shared seeds than this: no verdict


def _number(v: Any) -> float | None:
    """``v`` as a float; ``None`` for a missing value (None or NaN)."""
    if v is None:
        return None
    v = float(v)
    return None if math.isnan(v) else v


def seed_stats(per_seed: Mapping[Any, float | None]) -> dict[str, Any]:
    """Per-seed values, their mean and sample std (ddof = 1) and how many there were.

    A ``None`` (or NaN) value is kept in ``per_seed`` but left out of the mean:
    the seed ran and has no number (never reached the target, no ARI). ``sigma``
    is ``None`` below two values.
    """
    kept = {str(seed): _number(v) for seed, v in per_seed.items()}
    vals = [v for v in kept.values() if v is not None]
    return {
        "per_seed": kept,
        "mean": float(np.mean(vals)) if vals else None,
        "sigma": float(np.std(vals, ddof=1)) if len(vals) > 1 else None,
        "n": len(vals),
    }


def t_critical(df: int, level: float = 0.95) -> float:
    """Student's t quantile for a two-sided ``level`` interval with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"a t interval needs df >= 1, got {df}")
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2, df))


def paired(a: Mapping[Any, float | None], b: Mapping[Any, float | None]) -> dict[str, Any]:
    """``a - b`` seed by seed (seeds both have), with the t 95% interval of the mean.

    Returns ``per_seed`` (the differences), ``mean``, ``sigma``, ``n``, ``half``
    (the interval's half-width; ``None`` below two seeds), ``low``/``high``,
    ``wins`` (seeds where a > b) and ``verdict``.
    """
    a = {str(s): _number(v) for s, v in a.items()}
    b = {str(s): _number(v) for s, v in b.items()}
    diff = {s: a[s] - b[s] for s in a if a[s] is not None and b.get(s) is not None}
    out = seed_stats(diff)
    n = out["n"]
    exact = n >= 2 and out["sigma"] <= 1e-12 * max(1.0, abs(out["mean"]))
    half = None if n < 2 or exact else t_critical(n - 1) * out["sigma"] / math.sqrt(n)
    mean = out["mean"]
    with_value = {s for s, v in a.items() if v is not None} | {
        s for s, v in b.items() if v is not None
    }
    out.update(
        half=half,
        low=None if half is None else mean - half,
        high=None if half is None else mean + half,
        wins=sum(1 for d in diff.values() if d > 0),
        exact=exact,
        # Seeds with a number on one side only: left out of the difference, and said so.
        unpaired=sorted(with_value - set(diff), key=_seed_order),
    )
    out["verdict"] = verdict(out)
    return out


def _seed_order(seed: str) -> tuple:
    return (0, int(seed)) if seed.lstrip("-").isdigit() else (1, seed)


def verdict(p: Mapping[str, Any] | None) -> str:
    """ "leads" / "trails" when the t interval excludes 0, else "no clear winner"; "too few
    seeds" below :data:`MIN_SEEDS` shared seeds; "exact tie" / "exact gap" when the
    difference is the same at every seed."""
    if p and p.get("n", 0) < MIN_SEEDS:  # none shared at all included
        return "too few seeds"
    if not p or p.get("mean") is None:
        return "no clear winner"
    if p.get("exact"):
        return "exact tie" if p["mean"] == 0 else "exact gap"
    if p.get("half") is None:
        return "no clear winner"
    if p["low"] > 0:
        return "leads"
    if p["high"] < 0:
        return "trails"
    return "no clear winner"


def fmt_paired(p: Mapping[str, Any] | None, scale: float = 100.0, spec: str = "+.1f") -> str:
    """``+1.2 ± 0.8 (3/3)``: the mean difference, the t half-width, seeds ahead / n."""
    if not p or p.get("mean") is None:
        return "n/a"
    text = format(p["mean"] * scale, spec)
    if p.get("half") is not None:
        text += f" ± {abs(p['half']) * scale:.1f}"
    elif p.get("exact"):
        text += " at every seed"
    text = f"{text} ({p['wins']}/{p['n']})"
    if p.get("unpaired"):
        text += f" [seeds on one side only: {', '.join(map(str, p['unpaired']))}]"
    return text


CHANCE_P = 0.01  # a clustering is "above chance" at a seed when its permutation p < this


def above_chance(p_values: list[float]) -> str:
    """Where the seeds' permutation tests put a clustering, by the one rule (p < CHANCE_P)."""
    ps = [float(p) for p in p_values]
    if not ps:
        return "not tested"
    above = sum(p < CHANCE_P for p in ps)
    rng = f"{min(ps):.3f}" if min(ps) == max(ps) else f"{min(ps):.3f}-{max(ps):.3f}"
    if above == len(ps):
        return f"above chance at every seed (p {rng})"
    if not above:
        return f"at chance at every seed (p {rng}, none below {CHANCE_P})"
    return f"above chance at {above} of {len(ps)} seeds (p {rng})"
