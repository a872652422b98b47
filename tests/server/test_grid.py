"""The app's grid helper: messages the server stops waiting for expire soon after."""

from __future__ import annotations

import math

from conftest import FakeGrid
from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict

from ripple_flwr.app.server.rounds.grid import TTL_MARGIN, send_and_receive


def echo(msg: Message, context) -> Message:
    return Message(RecordDict({"metrics": MetricRecord({"ok": 1})}), reply_to=msg)


def messages(grid: FakeGrid, ttl: float | None = None) -> list[Message]:
    return [
        Message(RecordDict({"c": ConfigRecord({"x": 1})}), dst_node_id=n, message_type="train")
        if ttl is None
        else Message(RecordDict(), dst_node_id=n, message_type="train", ttl=ttl)
        for n in grid.node_ids
    ]


def test_ttl_is_cut_to_the_wait_plus_the_margin() -> None:
    grid = FakeGrid({"num-partitions": 3}, app=echo)
    sent = messages(grid)
    default = sent[0].metadata.ttl
    replies = send_and_receive(grid, sent, timeout=30.0)
    assert len(replies) == 3
    for m in grid.sent:
        assert 30.0 + TTL_MARGIN <= m.metadata.ttl < 31.0 + TTL_MARGIN < default


def test_ttl_is_never_lengthened_nor_cut_without_a_deadline() -> None:
    grid = FakeGrid({"num-partitions": 2}, app=echo)
    send_and_receive(grid, messages(grid, ttl=5.0), timeout=600.0)
    assert [m.metadata.ttl for m in grid.sent] == [5.0, 5.0]
    grid = FakeGrid({"num-partitions": 2}, app=echo)
    fresh = messages(grid)
    default = fresh[0].metadata.ttl
    send_and_receive(grid, fresh, timeout=math.inf)
    assert [m.metadata.ttl for m in grid.sent] == [default, default]
