"""The fast ArrayRecord codec: byte-identical to Flower's own, and strict on bad bytes."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from ripple_flwr.app.protocol.records import from_array, record_to_state, state_to_record, to_array
from ripple_flwr.app.server.replies.validation import (
    state_reference,
    validate_train_reply,
)
from ripple_flwr.testing.inprocess import ensure_task_identity

CASES = [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.array(7, dtype=np.int64),  # 0-d (BatchNorm's counter)
    np.zeros((0, 5), dtype=np.float64),
    np.linspace(0, 1, 30, dtype=np.float16).reshape(2, 3, 5),
    np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
    np.arange(20, dtype=np.float32)[::2],  # not contiguous
]


@pytest.mark.parametrize("value", CASES, ids=lambda v: f"{v.dtype}{list(v.shape)}")
def test_same_bytes_as_flower_and_exact_round_trip(value):
    ours = to_array(value)
    theirs = Array(np.array(value, order="C"))
    assert ours.data == theirs.data
    assert (ours.dtype, tuple(ours.shape), ours.stype) == (
        theirs.dtype,
        tuple(theirs.shape),
        theirs.stype,
    )
    for _ in range(2):  # first decode learns the header, second takes the fast path
        back = from_array(ours)
        np.testing.assert_array_equal(back, value)
        assert back.dtype == value.dtype and back.shape == value.shape
        assert back.flags.writeable
    np.testing.assert_array_equal(theirs.numpy(), from_array(theirs))


def test_record_round_trip_keeps_key_order():
    state = {"b": np.ones(3, np.float32), "a": np.array(2, np.int64)}
    back = record_to_state(state_to_record(state))
    assert list(back) == ["b", "a"]
    np.testing.assert_array_equal(back["b"], state["b"])


def test_corrupt_or_truncated_bytes_are_a_value_error():
    good = to_array(np.ones((4, 4), np.float32))
    from_array(good)  # the layout is now known
    truncated = Array(dtype=good.dtype, shape=good.shape, stype=good.stype, data=good.data[:-8])
    with pytest.raises(ValueError, match="not a valid .npy payload"):
        from_array(truncated)
    with pytest.raises(ValueError, match="not a valid .npy payload"):
        from_array(Array(dtype="float32", shape=(4,), stype=good.stype, data=b"garbage"))
    with pytest.raises(ValueError, match="object arrays"):
        to_array(np.array([{"a": 1}], dtype=object))


def test_reply_whose_bytes_contradict_its_declared_shape_is_rejected():
    ensure_task_identity()
    reference = state_reference({"w": np.zeros((2, 3), np.float32)})
    lie = to_array(np.zeros((3, 2), np.float32))
    lie = Array(dtype=lie.dtype, shape=(2, 3), stype=lie.stype, data=lie.data)
    content = RecordDict(
        {
            "arrays": ArrayRecord({"w": lie}),
            "metrics": MetricRecord({"num-examples": 5}),
            "config": ConfigRecord(),
        }
    )
    msg = Message(content, dst_node_id=1, message_type="train")
    with pytest.raises(ValueError, match=r"decodes to float32\[3, 2\], expected float32\[2, 3\]"):
        validate_train_reply(msg, reference)
