"""A node's persistent state for the training rules: Flower's ``context.state`` as numpy arrays.

Flower keeps one ``Context`` per run on every SuperNode (and the in-process
grid one per node), and its ``state`` RecordDict survives from message to
message, also when each message starts a fresh ClientApp process. The rules
of :mod:`ripple_flwr.training.rules` (SCAFFOLD's c_i, FedDyn's g_k, pFedMe's
personal model) read and write it through this mapping, one ArrayRecord per
key, without importing Flower.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping

import numpy as np
from flwr.app import RecordDict

from ripple_flwr.app.protocol.records import record_to_state, state_to_record


class NodeStore(MutableMapping[str, dict[str, np.ndarray]]):
    """``context.state``'s ArrayRecords as ``{key: {tensor name: array}}``."""

    def __init__(self, state: RecordDict) -> None:
        self.state = state

    def __getitem__(self, key: str) -> dict[str, np.ndarray]:
        record = self.state.array_records.get(key)
        if record is None:
            raise KeyError(key)
        return record_to_state(record)

    def __setitem__(self, key: str, value: dict[str, np.ndarray]) -> None:
        self.state[key] = state_to_record(value)

    def __delitem__(self, key: str) -> None:
        del self.state[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.state.array_records)

    def __len__(self) -> int:
        return len(self.state.array_records)
