"""A method's state between rounds as plain data, Flower's own types included.

:mod:`ripple_flwr.app.server.resume.file` saves numpy arrays, dicts, lists and JSON
scalars. Flower's strategies keep ``ArrayRecord`` s too (FedOpt's and
FedAvgM's ``current_arrays``): here they become a tagged dict of arrays and
come back as the same record, byte for byte. Anything else that cannot be saved
is refused at the first checkpoint, naming the attribute.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import ArrayRecord

from ripple_flwr.app.protocol.records import record_to_state, state_to_record
from ripple_flwr.methods.api import declared_fields

_RECORD_TAG = "__arrayrecord__"
_GENERATOR_TAG = "__generator__"
_PLAIN = (bool, int, float, str, type(None), np.ndarray, np.generic)
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def to_plain(name: str, value: Any) -> Any:
    """``value`` with every ``ArrayRecord`` replaced by a tagged dict; a ``TypeError`` names
    ``name`` for anything :mod:`ripple_flwr.app.server.resume.file` cannot save."""
    if isinstance(value, ArrayRecord):
        return {_RECORD_TAG: record_to_state(value)}
    if isinstance(value, np.random.Generator):
        return {_GENERATOR_TAG: value.bit_generator.state}
    if isinstance(value, dict):
        return {k: to_plain(name, v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(to_plain(name, v) for v in value)
    if isinstance(value, _PLAIN):
        return value
    raise TypeError(
        f"state field {name!r} holds a {type(value).__name__}, which a checkpoint cannot "
        "save: keep numpy arrays, dicts, lists, scalars or ArrayRecords in state_fields"
    )


def from_plain(value: Any) -> Any:
    """The inverse of :func:`to_plain`."""
    if isinstance(value, dict):
        if set(value) == {_RECORD_TAG}:
            return state_to_record(value[_RECORD_TAG])
        if set(value) == {_GENERATOR_TAG}:
            state = value[_GENERATOR_TAG]
            if state["bit_generator"] not in _BIT_GENERATORS:  # never call another np.random name
                raise ValueError(f"{state['bit_generator']!r} is not a numpy bit generator")
            bit_generator = getattr(np.random, state["bit_generator"])()
            bit_generator.state = state
            return np.random.Generator(bit_generator)
        return {k: from_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_plain(v) for v in value]
    return value


def field_values(obj: Any) -> dict[str, Any]:
    """``obj``'s saved fields (its class's declared ``state_fields``) by name: what a
    method's ``state()`` returns."""
    return {name: getattr(obj, name) for name in declared_fields(type(obj))}


def set_fields(obj: Any, fields: dict[str, Any]) -> None:
    """Put checked saved fields back on ``obj`` (called by the method itself, in ``restore``)."""
    for name, value in fields.items():
        setattr(obj, name, value)
