"""Self-checking files: a SHA-256 of a payload's content, stored in the payload itself.

Why: ``torch.load`` does not notice flipped bytes inside tensor data (its
zip reader skips the CRC), so a damaged saved run or GMM-VAE checkpoint
loads "fine" with wrong weights. Every file this project writes with
``torch.save`` carries ``content_sha256``, a hash over a canonical
encoding of everything else in the payload (tensors by dtype, shape and
raw bytes; plain values by type and value; dict keys sorted), checked on
load. Because the hash covers the loaded values, not the file bytes, it is
independent of how ``torch.save`` lays out its zip archive.

What it protects against: accidental corruption (disk, transfer,
truncation, a partial overwrite) and edits that do not re-compute the hash.
It is not a signature: whoever can rewrite the file can rewrite the hash.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["HASH_KEY", "IntegrityError", "content_sha256", "seal", "verify"]

HASH_KEY = "content_sha256"


class IntegrityError(ValueError):
    """A file's content does not match the hash stored in it."""


def _update(digest: Any, value: Any) -> None:
    """Feed one value's canonical, length-prefixed encoding into ``digest``."""

    def put(tag: bytes, data: bytes) -> None:
        digest.update(tag + len(data).to_bytes(8, "little") + data)

    if value is None:
        put(b"n", b"")
    elif isinstance(value, bool):
        put(b"b", b"1" if value else b"0")
    elif isinstance(value, int):
        put(b"i", str(value).encode())
    elif isinstance(value, float):
        put(b"f", value.hex().encode() if math.isfinite(value) else repr(value).encode())
    elif isinstance(value, str):
        put(b"s", value.encode("utf-8"))
    elif isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        put(b"t", f"{t.dtype}{tuple(t.shape)}".encode())
        put(b"r", t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, np.ndarray):
        a = np.ascontiguousarray(value)
        put(b"a", f"{a.dtype.str}{a.shape}".encode())
        put(b"r", a.tobytes())
    elif isinstance(value, Mapping):
        keys = sorted(value, key=str)
        put(b"d", str(len(keys)).encode())
        for key in keys:
            _update(digest, str(key))
            _update(digest, value[key])
    elif isinstance(value, (list, tuple)):
        put(b"l", str(len(value)).encode())
        for item in value:
            _update(digest, item)
    else:
        raise TypeError(f"cannot hash a {type(value).__name__} in a payload")


def content_sha256(payload: Mapping[str, Any]) -> str:
    """Hex SHA-256 of the payload's canonical encoding, without its ``content_sha256``."""
    digest = hashlib.sha256(b"ripple-flwr content v1\0")
    _update(digest, {k: v for k, v in payload.items() if k != HASH_KEY})
    return digest.hexdigest()


def seal(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload with its ``content_sha256`` set (a new dict)."""
    body = {k: v for k, v in payload.items() if k != HASH_KEY}
    return {**body, HASH_KEY: content_sha256(body)}


def verify(payload: Mapping[str, Any], what: str, how_to_fix: str) -> bool:
    """Check the stored hash; False if the payload has none, IntegrityError on a mismatch.

    ``what`` names the file in the message ("saved run /x/run.pt"), ``how_to_fix``
    says how to get a good one.
    """
    stored = payload.get(HASH_KEY)
    if stored is None:
        return False
    try:
        actual = content_sha256(payload)
    except TypeError as err:  # a value no writer here produces (bytes, a dtype, a set ...)
        raise IntegrityError(f"{what} was not written by ripple-flwr: {err}; {how_to_fix}") from err
    if not isinstance(stored, str) or stored != actual:
        shown = stored[:12] if isinstance(stored, str) else repr(stored)
        raise IntegrityError(
            f"{what} is corrupted or was modified after it was written: its content hashes to "
            f"sha256 {actual[:12]}... but the file records {shown}...; {how_to_fix}"
        )
    return True
