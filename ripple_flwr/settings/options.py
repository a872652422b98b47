"""One run-config key, typed and ranged: :class:`Option`, and :class:`ConfigError`."""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Sequence
from dataclasses import Field, dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin, get_type_hints

if TYPE_CHECKING:
    from ripple_flwr.settings.run import RunSettings


class ConfigError(ValueError):
    """A run config that cannot work; raised before any data is loaded or model trained."""


@dataclass(frozen=True)
class Option:
    """One run-config key: its type, default, range and one-line doc.

    Parameters
    ----------
    key
        The dashed run-config key (``proximal-mu``).
    type
        ``int``, ``float``, ``bool`` or ``str``; ints are accepted for floats.
    default
        The value when the run does not set the key (checked like any value).
    doc
        One line for docs/configuration.md.
    low, high, low_open, high_open
        Bounds of a number, inclusive unless open.
    choices
        The allowed strings.
    finite
        Refuse ``inf`` and ``nan`` for a float (on by default).
    """

    key: str
    type: type
    default: Any
    doc: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] = ()
    finite: bool = True

    def __post_init__(self) -> None:
        self.check(self.default)

    @property
    def name(self) -> str:
        """The key as a Python identifier (``proximal-mu`` -> ``proximal_mu``)."""
        return self.key.replace("-", "_")

    def coerce(self, raw: Any) -> Any:
        """``raw`` (a TOML scalar) as this option's type: ints for floats, never the reverse."""
        typ = self.type
        if typ is float and isinstance(raw, int | float) and not isinstance(raw, bool):
            return float(raw)
        if typ is int and isinstance(raw, float) and raw.is_integer():
            return int(raw)
        if typ is not bool and isinstance(raw, bool) or not isinstance(raw, typ):
            raise ConfigError(
                f"{self.key} must be {typ.__name__}, got {raw!r} ({type(raw).__name__})"
            )
        return raw

    def range_text(self) -> str:
        """The allowed values in words: ``>= 0``, ``in [0, 1)``, ``one of a, b``."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        lo, hi = self.low, self.high
        if lo is not None and hi is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"in {left}{_num(lo)}, {_num(hi)}{right}"
        if lo is not None:
            return f"{'>' if self.low_open else '>='} {_num(lo)}"
        if hi is not None:
            return f"{'<' if self.high_open else '<='} {_num(hi)}"
        return ""

    def check(self, value: Any) -> None:
        """Raise :class:`ConfigError` naming the key, the range and the value."""
        if self.choices and value not in self.choices:
            raise ConfigError(f"{self.key}={value!r} is not one of {', '.join(self.choices)}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            return
        ok = not (self.finite and self.type is float and not math.isfinite(value))
        if self.low is not None:
            ok = ok and (value > self.low if self.low_open else value >= self.low)
        if self.high is not None:
            ok = ok and (value < self.high if self.high_open else value <= self.high)
        if not ok:
            finite = "a finite number " if self.finite and self.type is float else ""
            raise ConfigError(f"{self.key} must be {finite}{self.range_text()}, got {value}")

    def parse(self, raw: Any) -> Any:
        """Coerce and check one raw value."""
        value = self.coerce(raw)
        self.check(value)
        return value

    def of(self, settings: RunSettings) -> Any:
        """This option's value in ``settings`` (its default where the run did not set it)."""
        return settings.options.get(self.key, self.default)


REFERENCE_PAGE = "docs/configuration.md"


def unknown_keys_message(unknown: Iterable[str], known: Sequence[str]) -> str:
    """One line for run-config keys nobody declares: each with its nearest known key.

    ``unknown run-config key 'alpah': did you mean 'alpha'? (every key, with its range:
    docs/configuration.md)``; the known keys are not listed (there are over a hundred).
    """
    names = sorted(dict.fromkeys(str(k) for k in unknown))
    near: dict[str, str] = {}
    for name in names:
        dashed = name.replace("_", "-")
        close = [dashed] if dashed in known else difflib.get_close_matches(name, known, n=1)
        if close:
            near[name] = close[0]
    where = f"every key, with its range: {REFERENCE_PAGE}"
    if len(names) == 1:
        (name,) = names
        if name in near:
            return f"unknown run-config key {name!r}: did you mean {near[name]!r}? ({where})"
        return f"unknown run-config key {name!r} ({where})"
    parts = [f"{n!r}" + (f" (did you mean {near[n]!r}?)" if n in near else "") for n in names]
    return f"unknown run-config keys {', '.join(parts)}; {where}"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(v)


def option(
    default: Any,
    doc: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = True,
) -> Any:
    """A settings group's field with its doc and range (made an :class:`Option` on demand).

    Parameters
    ----------
    default
        The value when the run config does not set the key.
    doc
        One line for ``docs/configuration.md`` and the CLIs' ``--help``.
    low, high
        Bounds of a number (inclusive unless ``low_open`` / ``high_open``).
    finite
        Refuse ``inf`` and ``nan`` for a float (on by default).
    """
    meta = {"doc": doc, "low": low, "high": high, "low_open": low_open, "high_open": high_open}
    return field(default=default, metadata={**meta, "finite": finite})


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def field_option(cls: type, f: Field) -> Option:
    """The :class:`Option` of field ``f`` of the settings group ``cls`` (a Literal: choices)."""
    return _field_option(cls, f.name)


@cache
def _field_option(cls: type, name: str) -> Option:
    f = cls.__dataclass_fields__[name]
    hint = _hints(cls)[name]
    choices: tuple[str, ...] = ()
    if get_origin(hint) is Literal:
        choices = get_args(hint)
        hint = type(choices[0])
    m = f.metadata
    return Option(
        name.replace("_", "-"),
        hint,
        f.default,
        m["doc"],
        low=m["low"],
        high=m["high"],
        low_open=m["low_open"],
        high_open=m["high_open"],
        choices=choices,
        finite=m["finite"],
    )
