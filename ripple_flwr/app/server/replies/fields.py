"""Every scalar a client sends, converted and checked in one place.

A reply's fields arrive as whatever the client chose to put there: a list
where a count belongs, ``inf``, a string, ``True``, a number with 400 digits.
These converters turn one field into the type the server uses or raise
``ValueError`` naming the field, so the reply is dropped (its client named)
instead of crashing the server; :data:`REPLY_ERRORS` is every error that
reading a reply can raise, for the one ``except`` around it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# Most examples one client may report for one split: a bound, not a trust (the sizes of a
# round are also capped relative to the others', see ``size_cap``).
MAX_CLIENT_EXAMPLES = 100_000_000
# No client's reported size may weigh more than this many times the median client's.
SIZE_CAP_FACTOR = 4.0
# What reading one reply can raise (a hostile reply must never raise anything else).
REPLY_ERRORS = (KeyError, ValueError, TypeError, OverflowError, MemoryError, AttributeError)


def as_count(raw: Any, name: str, *, low: int = 1, high: int = MAX_CLIENT_EXAMPLES) -> int:
    """An integer in ``[low, high]``: an int, or a float with an integer value; nothing else."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | np.integer | np.floating):
        raise ValueError(f"{name} must be an integer, got {type(raw).__name__} {_short(raw)}")
    if isinstance(raw, float | np.floating):
        if not math.isfinite(raw) or not float(raw).is_integer():
            raise ValueError(f"{name} must be an integer, got {_short(raw)}")
    value = int(raw)
    if not low <= value <= high:
        raise ValueError(f"{name}={value} is outside [{low}, {high}]")
    return value


def as_number(
    raw: Any,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    missing_ok: bool = False,
) -> float:
    """A finite float in ``[low, high]`` (``missing_ok``: NaN stands for "not reported")."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | np.integer | np.floating):
        raise ValueError(f"{name} must be a number, got {type(raw).__name__} {_short(raw)}")
    value = float(raw)
    if math.isnan(value) and missing_ok:
        return value
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name}={value:g} is outside [{low}, {high}]")
    return value


def as_flag(raw: Any, name: str) -> bool:
    """A boolean (a bool, or the integers 0 and 1)."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int | np.integer) and int(raw) in (0, 1):
        return bool(raw)
    raise ValueError(f"{name} must be true or false, got {_short(raw)}")


def as_text(raw: Any, name: str, *, limit: int = 256) -> str:
    """A string of at most ``limit`` printable characters."""
    if not isinstance(raw, str):
        raise ValueError(f"{name} must be a string, got {type(raw).__name__}")
    if len(raw) > limit or not raw.isprintable():
        raise ValueError(f"{name} must be at most {limit} printable characters")
    return raw


def size_cap(sizes: list[int]) -> int:
    """The most examples a client of this round (or run) is weighted by: a multiple of the median.

    A client that claims a huge split gets no more than ``SIZE_CAP_FACTOR`` times
    the median client's weight in any aggregate or example-weighted score. The
    *low* median: one claim among two never sets its own cap.
    """
    known = sorted(n for n in sizes if n > 0)
    if not known:
        return MAX_CLIENT_EXAMPLES
    return max(1, int(SIZE_CAP_FACTOR * known[(len(known) - 1) // 2]))


def _short(raw: Any) -> str:
    text = repr(raw)
    return text if len(text) <= 40 else text[:37] + "..."
