"""One run-config key, typed and ranged: :class:`Option`, and :class:`ConfigError`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ripple_flwr.settings.run import RunSettings


class ConfigError(ValueError):
    """A run config that cannot work; raised before any data is loaded or model trained."""


@dataclass(frozen=True)
class Option:
    """One run-config key: its type, default, range and one-line doc.

    ``low``/``high`` bound the value (inclusive unless ``low_open``/``high_open``);
    ``choices`` lists the allowed strings; floats must be finite unless ``finite`` is off.
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
    """A :class:`RunSettings` field with its doc and range (made an :class:`Option` on demand)."""
    meta = {"doc": doc, "low": low, "high": high, "low_open": low_open, "high_open": high_open}
    return field(default=default, metadata={**meta, "finite": finite})
