"""Reading a torch file safely: ``torch.load(weights_only=True)`` with a one-line refusal.

torch's own errors for a damaged or foreign file are long and, for a file that holds
objects beyond tensors and plain values, advise re-running with ``weights_only=False``
("will likely succeed") and filing an issue: wrong advice for a file that may be hostile,
since that unpickles arbitrary code. :func:`load_weights_only` says instead, in one line,
which file, that it is not a valid file of its kind, and how to get a good one.
"""

from __future__ import annotations

import pickle
import re
import warnings
from pathlib import Path
from typing import Any

import torch

__all__ = ["UnreadableFileError", "load_weights_only"]


class UnreadableFileError(ValueError):
    """A file torch cannot read with ``weights_only=True``: damaged, truncated or foreign."""


_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]{1,100})")


def _problem(err: BaseException, kind: str) -> str:
    """What is wrong with the file, in words, without torch's advice."""
    found = _GLOBAL.search(str(err)) if isinstance(err, pickle.UnpicklingError) else None
    if found:
        return (
            f"it is not a valid {kind} file: it holds a Python object ({found.group(1)}) beyond "
            "tensors and plain values, which is not loaded (unpickling it could run code from "
            "the file)"
        )
    return f"it is corrupted, truncated or not a valid {kind} file"


def load_weights_only(path: str | Path, what: str, fix: str, kind: str | None = None) -> Any:
    """``torch.load(path, map_location="cpu", weights_only=True)``, or one line naming the file.

    Parameters
    ----------
    path
        The file (it should exist: a missing file is the caller's own message).
    what
        The file's role for the message: ``"GMM-VAE checkpoint"``, ``"saved run"``.
    fix
        How to get a good file, e.g. the command that makes it.
    kind
        The file's kind in "not a valid <kind> file" (default: ``what``).

    Raises
    ------
    UnreadableFileError
        ``cannot read <what> <path>: <problem>; <fix>``, one line, none of torch's advice.
    """
    path = Path(path)
    try:
        with warnings.catch_warnings():  # torch's "please file an issue" about pickle protocols
            warnings.filterwarnings("ignore", message=".*pickle protocol", category=UserWarning)
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch raises many types for bad files
        problem = _problem(err, kind or what)
        raise UnreadableFileError(f"cannot read {what} {path}: {problem}; {fix}") from None
