"""Loaded files checked for sense: the keys, kinds and finite values their writer produces.

A content hash (:mod:`ripple_flwr.io.integrity`) catches damage, but it is no
signature: a file edited and re-hashed, or written by other code, passes it.
So every loader also refuses what this project never writes (a key it does not
know, a value of another kind, a float tensor holding NaN or Inf) with one
line that names the file, the problem and the fix, before any value is used.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

import numpy as np
import torch

__all__ = ["FileCheck", "kind_name"]


def kind_name(value: Any) -> str:
    """What a value is, for a message: ``a str``, ``an int``, ``a torch.float32 tensor``."""
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor"
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _finite(value: torch.Tensor | np.ndarray) -> bool:
    if isinstance(value, torch.Tensor):
        return not value.is_floating_point() or bool(torch.isfinite(value).all())
    return not np.issubdtype(value.dtype, np.inexact) or bool(np.isfinite(value).all())


class FileCheck:
    """The checks of one loaded file: ``what`` names it, ``fix`` says how to get a good one.

    Each check raises ``error`` (a ValueError type) as ``"<what>: <problem>; <fix>"``.
    """

    def __init__(self, what: str, fix: str, error: type[ValueError] = ValueError) -> None:
        self.what, self.fix, self.error = what, fix, error

    def fail(self, problem: str) -> NoReturn:
        raise self.error(f"{self.what}: {problem}; {self.fix}")

    def keys(
        self, payload: Mapping[str, Any], required: Iterable[str], optional: Iterable[str] = ()
    ) -> None:
        """Every ``required`` key is there, and no key beyond ``required`` and ``optional``."""
        required = tuple(required)
        for key in required:
            if key not in payload:
                self.fail(f"it lacks {key!r}")
        known = {*required, *optional}
        extra = sorted(str(k) for k in payload if k not in known)
        if extra:
            self.fail(f"it holds {extra[0]!r}, which this format does not have")

    def kind(self, value: Any, kinds: type | tuple[type, ...], name: str) -> Any:
        """``value`` if it is one of ``kinds`` (a bool is no int here)."""
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            wanted = " or ".join(k.__name__ for k in kinds)
            self.fail(f"{name} is {kind_name(value)}, expected {wanted}")
        return value

    def finite(self, value: torch.Tensor | np.ndarray, name: str) -> None:
        """A float tensor or array holds no NaN or Inf (other dtypes pass)."""
        if not _finite(value):
            self.fail(f"{name} holds NaN or Inf")

    def tensor(self, value: Any, name: str, *, floating: bool = False) -> torch.Tensor:
        """A torch tensor (float if ``floating``) with finite values."""
        if not isinstance(value, torch.Tensor):
            self.fail(f"{name} is {kind_name(value)}, expected a tensor")
        if floating and not value.is_floating_point():
            self.fail(f"{name} is {kind_name(value)}, expected a float tensor")
        self.finite(value, name)
        return value

    def tensors(self, value: Any, name: str) -> dict[str, torch.Tensor]:
        """A non-empty dict of named tensors, float ones finite."""
        self.kind(value, dict, name)
        if not value:
            self.fail(f"{name} is empty")
        for key, item in value.items():
            self.kind(key, str, f"a key of {name}")
            self.tensor(item, f"{name}[{key!r}]")
        return value

    def int_list(self, value: Any, name: str, length: int | None = None) -> list[int]:
        """A list of ints (of ``length`` items when given)."""
        self.kind(value, (list, tuple), name)
        if length is not None and len(value) != length:
            self.fail(f"{name} has {len(value)} items, expected {length}")
        for i, item in enumerate(value):
            self.kind(item, int, f"{name}[{i}]")
        return list(value)
