"""Model states <-> Flower ArrayRecords, with each tensor layout's ``.npy`` header built once.

Flower's ``Array`` carries a tensor as ``.npy`` bytes. ``np.save`` and
``np.load`` spend most of their time writing and parsing the header (the
latter through ``ast.literal_eval``), and that header is the same for every
copy of a given tensor: Ripple sends a different model to each sampled
client, so the server would pay it ``clients x tensors`` times per round.
Here the header is made once per (dtype, shape) by ``np.save`` itself and the
body is the array's raw bytes, so the result is byte-identical to
``Array(ndarray)``; decoding recognises a known header and reads the body
with ``np.frombuffer``, falling back to ``np.load`` for anything else.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from io import BytesIO
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord

if TYPE_CHECKING:  # the protocol imports nothing above ripple_flwr.io
    from ripple_flwr.privacy.release import PublicMechanism

_NPY_V1 = b"\x93NUMPY\x01\x00"
_MAX_LAYOUTS = 4096
_HEADERS: dict[tuple[str, tuple[int, ...]], bytes] = {}
_LAYOUTS: dict[bytes, tuple[np.dtype, tuple[int, ...]]] = {}


def npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The ``.npy`` header ``np.save`` writes for a C-ordered array of this layout."""
    key = (np.dtype(dtype).str, tuple(int(s) for s in shape))
    header = _HEADERS.get(key)
    if header is None:
        buf = BytesIO()
        empty = np.zeros(key[1], dtype=np.dtype(dtype))
        np.save(buf, empty, allow_pickle=False)
        header = buf.getvalue()[: buf.tell() - empty.nbytes]
        if len(_HEADERS) >= _MAX_LAYOUTS:
            _HEADERS.clear()
        _HEADERS[key] = header
    return header


def to_array(value: np.ndarray) -> Array:
    """A numpy array as a Flower ``Array`` (same bytes as ``Array(value)``)."""
    arr = np.array(value, order="C", copy=None)  # not ascontiguousarray: it makes 0-d 1-d
    if arr.dtype.hasobject:
        raise ValueError("object arrays cannot be sent (they would need pickling)")
    # One copy of the body: join reads the array's buffer directly.
    data = b"".join((npy_header(arr.dtype, arr.shape), arr.reshape(-1).view(np.uint8)))
    return Array(dtype=str(arr.dtype), shape=tuple(arr.shape), stype="numpy.ndarray", data=data)


def from_array(array: Array) -> np.ndarray:
    """A Flower ``Array`` as a writable numpy array; ``ValueError`` if its bytes are not one."""
    data = array.data
    if data[:8] == _NPY_V1 and len(data) >= 10:
        end = 10 + int.from_bytes(data[8:10], "little")
        layout = _LAYOUTS.get(data[:end])
        if layout is not None:
            dtype, shape = layout
            count = math.prod(shape)
            if len(data) == end + count * dtype.itemsize:
                body = np.frombuffer(data, dtype=dtype, count=count, offset=end)
                return body.reshape(shape).copy()
    try:
        out = array.numpy()
    except Exception as err:  # corrupt or hostile bytes: numpy raises several types
        raise ValueError(f"array bytes are not a valid .npy payload: {err}") from err
    if data[:8] == _NPY_V1 and out.flags.c_contiguous and not out.dtype.hasobject:
        end = 10 + int.from_bytes(data[8:10], "little")
        if data[:end] == npy_header(out.dtype, out.shape):  # a C-ordered header: learn it
            if len(_LAYOUTS) >= _MAX_LAYOUTS:
                _LAYOUTS.clear()
            _LAYOUTS[data[:end]] = (out.dtype, tuple(out.shape))
    return out


def state_to_record(state: dict[str, np.ndarray]) -> ArrayRecord:
    """A model state (numpy, in ``state_dict`` order) as an ArrayRecord (0-d tensors stay 0-d)."""
    return ArrayRecord({k: to_array(np.asarray(v)) for k, v in state.items()})


def states_to_records(states: Sequence[dict[str, np.ndarray]]) -> list[ArrayRecord]:
    """Several model states as ArrayRecords, in order."""
    return [state_to_record(s) for s in states]


def record_to_state(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The numpy arrays of an ArrayRecord, in its key order (writable copies)."""
    return {k: from_array(v) for k, v in record.items()}


# -- the public DP mechanism in the one-shot query ------------------------------------------------
DP_RECORD = "dp"  # ArrayRecord of the public mechanism in the query message
DP_CONFIG = "dp-config"  # ConfigRecord: epsilon, delta, clip, log-space


def mechanism_records(mech: PublicMechanism) -> dict[str, ArrayRecord | ConfigRecord]:
    """The records that carry ``mech`` to every client in the query message."""
    return {DP_RECORD: state_to_record(mech.arrays()), DP_CONFIG: ConfigRecord(mech.config())}


def mechanism_parts(
    arrays: ArrayRecord, config: ConfigRecord
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The inverse of :func:`mechanism_records`: the parts ``PublicMechanism.from_parts`` takes."""
    return record_to_state(arrays), dict(config)
