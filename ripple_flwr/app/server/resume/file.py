"""The server's whole state in one self-checking file, so a run that dies can continue.

The state is plain data: numpy arrays, dicts, lists and JSON scalars. It is
written as an ``.npz`` (read back with ``allow_pickle=False``: no object is
ever unpickled) holding the arrays and a JSON skeleton that says where each
array goes, sealed with a SHA-256 of the content (:mod:`ripple_flwr.io.integrity`).
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ripple_flwr.io.checks import FileCheck
from ripple_flwr.io.integrity import HASH_KEY, IntegrityError, content_sha256

FORMAT_VERSION = 1
# What a server's state holds (Engine.server_state); nothing else is read.
STATE_KEYS = ("round", "method", "settings", "rng", "ledger", "roster", "fields")
_FIX = "resume from an earlier copy or start the run again"


def encode(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    """A JSON skeleton of ``value``; its arrays move to ``arrays`` under fresh names."""
    if isinstance(value, np.ndarray):
        name = f"a{len(arrays)}"
        arrays[name] = value
        return {"__array__": name}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {"__items__": [[encode(k, arrays), encode(v, arrays)] for k, v in value.items()]}
    if isinstance(value, list | tuple):
        return [encode(v, arrays) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"cannot checkpoint a {type(value).__name__}")


def decode(skeleton: Any, arrays: dict[str, np.ndarray]) -> Any:
    """The inverse of :func:`encode`."""
    if isinstance(skeleton, dict):
        if "__array__" in skeleton:
            return arrays[skeleton["__array__"]]
        return {decode(k, arrays): decode(v, arrays) for k, v in skeleton["__items__"]}
    if isinstance(skeleton, list):
        return [decode(v, arrays) for v in skeleton]
    return skeleton


def save_server_state(path: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` atomically (a crash while writing keeps the previous file)."""
    path = Path(path)
    arrays: dict[str, np.ndarray] = {}
    skeleton = json.dumps({"version": FORMAT_VERSION, "state": encode(state, arrays)})
    payload = {"skeleton": skeleton, "arrays": arrays}
    digest = content_sha256(payload)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        np.savez(
            fh,
            __skeleton__=np.frombuffer(skeleton.encode(), dtype=np.uint8),
            __sha256__=np.frombuffer(digest.encode(), dtype=np.uint8),
            **arrays,
        )
    os.replace(tmp, path)
    return path


def load_server_state(path: str | Path) -> dict[str, Any]:
    """The state :func:`save_server_state` wrote, checked against its hash and for sense.

    Every array must be numeric and finite and the state must hold exactly the keys a
    server writes; anything else is an :class:`IntegrityError` (one line, naming the file).
    JSON numbers may be NaN (a round nobody answered has no training loss); the method's
    own fields are checked against a fresh strategy when they are restored.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no server checkpoint at {path}; a run writes one beside its results file "
            "(<results>.resume.npz) every checkpoint-every rounds"
        )
    check = FileCheck(f"server checkpoint {path}", _FIX, IntegrityError)
    if path.stat().st_size == 0:
        check.fail("the file is empty (0 bytes)")
    try:
        with np.load(path, allow_pickle=False) as npz:
            files = {k: npz[k] for k in npz.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:  # truncated, flipped
        raise IntegrityError(f"{path} is not a readable server checkpoint ({err}); {_FIX}") from err
    if "__skeleton__" not in files or "__sha256__" not in files:
        raise IntegrityError(f"{path} is not a ripple-flwr server checkpoint; {_FIX}")
    try:
        skeleton = files.pop("__skeleton__").tobytes().decode()
        stored = files.pop("__sha256__").tobytes().decode()
    except UnicodeDecodeError as err:
        raise IntegrityError(f"{path} is not a ripple-flwr server checkpoint; {_FIX}") from err
    actual = content_sha256({"skeleton": skeleton, "arrays": files})
    if actual != stored:
        raise IntegrityError(
            f"server checkpoint {path} is corrupted or was modified after it was written "
            f"(content sha256 {actual[:12]}..., recorded {stored[:12]}...); {_FIX}"
        )
    return _checked_state(skeleton, files, check, path)


def _checked_state(
    skeleton: str, arrays: dict[str, np.ndarray], check: FileCheck, path: Path
) -> dict[str, Any]:
    """The decoded state of a checkpoint whose hash matched, refused unless it makes sense."""
    for name, array in arrays.items():
        if array.dtype.kind not in "biuf":
            check.fail(f"array {name!r} is {array.dtype}, not a number type")
        check.finite(array, f"array {name!r}")
    try:
        body = json.loads(skeleton)
    except ValueError as err:  # json.JSONDecodeError
        check.fail(f"its skeleton is not valid JSON ({err})")
    check.kind(body, dict, "its skeleton")
    if body.get("version") != FORMAT_VERSION:
        raise IntegrityError(
            f"{path} has checkpoint format {body.get('version')!r}, "
            f"this version reads {FORMAT_VERSION}"
        )
    try:
        state = decode(body["state"], arrays)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        check.fail(f"its skeleton does not decode ({type(err).__name__}: {err})")
    check.kind(state, dict, "the state")
    check.keys(state, STATE_KEYS)
    round_done = check.kind(state["round"], int, "round")
    if round_done < 0:
        check.fail(f"round is {round_done}, expected >= 0")
    check.kind(state["method"], str, "method")
    for key in ("settings", "rng", "ledger", "roster", "fields"):
        check.kind(state[key], dict, key)
    return state


__all__ = ["HASH_KEY", "STATE_KEYS", "decode", "encode", "load_server_state", "save_server_state"]
