"""Payload bytes of Flower arrays, records and messages, read without importing Flower.

Bytes are the arrays' ``nbytes`` (shape x item size, without serialisation headers), so
per-round traffic of different methods compares directly. Both the wire protocol and the
run's results count with these.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def array_nbytes(array: Any) -> int:
    """Payload bytes of one flwr ``Array`` (or numpy array): prod(shape) x item size."""
    shape = tuple(array.shape)
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(array.dtype).itemsize


def arrayrecord_nbytes(record: Any) -> int:
    """Payload bytes of an ArrayRecord."""
    return sum(array_nbytes(a) for a in record.values())


def message_nbytes(message: Any) -> int:
    """Payload bytes of all ArrayRecords of a message (0 for an error reply)."""
    if not message.has_content():
        return 0
    return sum(arrayrecord_nbytes(r) for r in message.content.array_records.values())
