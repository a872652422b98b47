"""Restoring a method's fields from a resume file: only what it declares, as it keeps it.

A server state is sealed with a hash, but whoever can write the file can re-seal it.
So :func:`restored_fields` takes only the names the engine declares
(``declared_state()``), and compares each saved value with the engine's own value
of that attribute after this process's query round: the same kind (list, dict, array,
scalar, ArrayRecord), arrays of the same dtype and number of axes, every number
finite. Sizes: a model state (a dict over the model's keys, shaped like the model)
keeps every shape; other arrays keep the sizes after their first axis (the first
counts clients, clusters or models, which change over rounds: CFL splits, late
joiners). A field the method sets only later (``None`` now: Flower's FedOpt moments,
the loop's current model) must be plain finite numbers, and a model state by the
model's keys and shapes. :data:`FIELD_BOUNDS` adds a field's own bounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ripple_flwr.app.server.resume.plain import from_plain, to_plain

__all__ = ["FIELD_BOUNDS", "restored_fields"]

# Every problem below reads after "state field 'name'": it starts with where in the value it
# is ("", "['w']", "[0]") and says what is wrong there.
_FIX = "resume from a <results>.resume.npz this method wrote, or start the run again"


def _norms(value: Any, ceiling: float, where: str = "") -> str | None:
    """Norms: every number finite, >= 0 and, with a ceiling > 0, at most that."""
    if isinstance(value, list | tuple):
        found = (_norms(v, ceiling, f"{where}[{i}]") for i, v in enumerate(value))
        return next((p for p in found if p), None)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        return f"{where} is {value!r}, expected a norm (a finite number >= 0)"
    if ceiling > 0 and value > ceiling:
        return f"{where} is {value!r}, above max-update-norm={ceiling:g} (never accepted)"
    return None


def _accepted_norms(value: Any, engine: Any) -> str | None:
    # The update bound's history: out_of_bound accepts no norm above max-update-norm.
    return _norms(value, float(engine.settings.robustness.max_update_norm))


# A field's bounds beyond its kind, by field name: (saved value, engine) -> problem.
FIELD_BOUNDS = {"_accepted_norms": _accepted_norms}


def restored_fields(engine: Any, saved: Any) -> dict[str, Any]:
    """The saved ``fields`` of a server state, ready to set on ``engine``, or a ValueError.

    Nothing is set here: a refused state leaves the engine as it was.
    """
    if not isinstance(saved, dict):
        raise ValueError(f"the saved fields are {_kind(saved)}, expected a dict; {_FIX}")
    declared = engine.declared_state()
    current = engine.state_values()
    kinds = _Kinds(getattr(engine, "reference", {}))
    out: dict[str, Any] = {}
    for name, value in saved.items():
        if name not in declared:
            raise ValueError(
                f"state field {name!r} is not one {type(engine).__name__} saves "
                f"({', '.join(declared)}); {_FIX}"
            )
        problem = kinds.mismatch(to_plain(name, current[name]), value, "")
        if problem is None and name in FIELD_BOUNDS:
            problem = FIELD_BOUNDS[name](value, engine)
        if problem is None:
            try:
                out[name] = from_plain(value)
            except (KeyError, TypeError, ValueError, AttributeError) as err:
                problem = f" does not decode ({type(err).__name__}: {err})"
        if problem is not None:
            raise ValueError(f"state field {name!r}{problem}; {_FIX}")
    return out


def _kind(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array"
    return "None" if value is None else f"a {type(value).__name__}"


def _arrays(value: Any) -> bool:
    """A non-empty dict of arrays."""
    return (
        isinstance(value, dict)
        and bool(value)
        and all(isinstance(v, np.ndarray) for v in value.values())
    )


class _Kinds:
    """Compares saved values with the engine's own, knowing the model's keys and shapes."""

    def __init__(self, reference: Mapping[str, tuple[tuple[int, ...], Any]]) -> None:
        self.shapes = {k: tuple(shape) for k, (shape, _) in reference.items()}

    def mismatch(self, fresh: Any, saved: Any, where: str) -> str | None:
        """Why ``saved`` is not of ``fresh``'s kind (``None``: it is)."""
        if isinstance(fresh, np.generic):
            fresh = fresh.item()
        if fresh is None:
            return self.unset(saved, where)
        if isinstance(fresh, np.ndarray):
            return _array_mismatch(fresh, saved, where, exact=False)
        if isinstance(fresh, dict):
            return self.dict_mismatch(fresh, saved, where)
        if isinstance(fresh, list | tuple):
            if not isinstance(saved, list | tuple):
                return f"{where} is {_kind(saved)}, expected a list"
            for i, value in enumerate(saved):
                like = fresh[i] if len(fresh) == len(saved) else (fresh[0] if fresh else None)
                if problem := self.mismatch(like, value, f"{where}[{i}]"):
                    return problem
            return None
        number = isinstance(fresh, int | float) and not isinstance(fresh, bool)
        if number and not (isinstance(saved, int | float) and not isinstance(saved, bool)):
            return f"{where} is {_kind(saved)}, expected a number"
        if not number and type(saved) is not type(fresh):
            return f"{where} is {_kind(saved)}, expected {_kind(fresh)}"
        return _not_plain(saved, where)

    def is_model(self, value: dict) -> bool:
        """A model state: the model's keys, each shaped as in the model."""
        shapes = self.shapes
        return (
            bool(shapes)
            and set(value) == set(shapes)
            and all(np.shape(v) == shapes[k] for k, v in value.items())
        )

    def dict_mismatch(self, fresh: dict, saved: Any, where: str) -> str | None:
        """Dicts of arrays keep their keys (a model state its shapes too); others key by key."""
        if not isinstance(saved, dict):
            return f"{where} is {_kind(saved)}, expected a dict"
        if _arrays(fresh):
            if set(saved) != set(fresh):
                odd = sorted(map(str, set(saved) ^ set(fresh)))[0]
                return f"{where} does not have the method's keys (differs at {odd!r})"
            exact = self.is_model(fresh)
            found = (
                _array_mismatch(fresh[k], v, f"{where}[{k!r}]", exact=exact)
                for k, v in saved.items()
            )
            return next((p for p in found if p), None)
        for key, value in saved.items():
            at = f"{where}[{key!r}]"
            problem = _bad_key(key, where) or (
                self.mismatch(fresh[key], value, at) if key in fresh else self.unset(value, at)
            )
            if problem:
                return problem
        return None

    def unset(self, saved: Any, where: str) -> str | None:
        """A value the method has not set yet: plain finite data, a model by the model."""
        if isinstance(saved, dict) and len(saved) == 1:
            key, inner = next(iter(saved.items()))
            if self.model_like(inner):  # a tagged ArrayRecord
                return self.model_mismatch(inner, f"{where}[{key!r}]")
        if self.model_like(saved):
            return self.model_mismatch(saved, where)
        shapes = list(self.shapes.values())
        if isinstance(saved, list) and len(saved) == len(shapes) and shapes:
            for i, (value, shape) in enumerate(zip(saved, shapes, strict=True)):
                if isinstance(value, np.ndarray) and value.shape != shape:
                    return f"{where}[{i}] has shape {value.shape}, expected {shape}"
        return _not_plain(saved, where)

    def model_like(self, value: Any) -> bool:
        """A dict over some of the model's keys: meant as a model state."""
        return isinstance(value, dict) and bool(set(value) & set(self.shapes))

    def model_mismatch(self, saved: dict, where: str) -> str | None:
        if set(saved) != set(self.shapes):
            odd = sorted(map(str, set(saved) ^ set(self.shapes)))[0]
            return f"{where} does not have the model's keys (differs at {odd!r})"
        for key, value in saved.items():
            if not isinstance(value, np.ndarray):
                return f"{where}[{key!r}] is {_kind(value)}, expected an array"
            if value.shape != self.shapes[key]:
                return f"{where}[{key!r}] has shape {value.shape}, expected {self.shapes[key]}"
        return _not_plain(saved, where)


def _array_mismatch(fresh: np.ndarray, saved: Any, where: str, *, exact: bool) -> str | None:
    if not isinstance(saved, np.ndarray) or saved.dtype != fresh.dtype:
        return f"{where} is {_kind(saved)}, expected a {fresh.dtype} array"
    if exact and saved.shape != fresh.shape:
        return f"{where} has shape {saved.shape}, expected {fresh.shape}"
    if saved.ndim != fresh.ndim or saved.shape[1:] != fresh.shape[1:]:
        wanted = ", ".join(["any", *map(str, fresh.shape[1:])]) if fresh.ndim else ""
        return f"{where} has shape {saved.shape}, expected ({wanted})"
    return _not_plain(saved, where)


def _bad_key(key: Any, where: str) -> str | None:
    if isinstance(key, str) or (isinstance(key, int) and not isinstance(key, bool)):
        return None
    return f"{where} has the key {key!r}, expected str or int keys"


def _not_plain(value: Any, where: str) -> str | None:
    """Why ``value`` is not plain, finite data (``None``: it is)."""
    if value is None or isinstance(value, bool | int | str):
        return None
    if isinstance(value, float):
        return None if np.isfinite(value) else f"{where} is {value}, not a finite number"
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            return f"{where} is {_kind(value)}, not numbers"
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            return f"{where} holds NaN or Inf"
        return None
    if isinstance(value, list | tuple):
        found = (_not_plain(v, f"{where}[{i}]") for i, v in enumerate(value))
        return next((p for p in found if p), None)
    if isinstance(value, dict):
        for key, item in value.items():
            if problem := _bad_key(key, where) or _not_plain(item, f"{where}[{key!r}]"):
                return problem
        return None
    return f"{where} is {_kind(value)}, which a server state never holds"
