"""Replies: a round's training replies matched to what was sent, validated, then defended."""

from __future__ import annotations

import numpy as np
from collaborators import STATE, clients, sent, train_reply

from ripple_flwr.app.server.replies.acceptance import Replies
from ripple_flwr.app.server.replies.validation import state_reference
from ripple_flwr.app.server.replies.validator import ReplyValidator
from ripple_flwr.methods.api import Method
from ripple_flwr.settings import RunSettings


class Roster:
    def __init__(self, n: int) -> None:
        self.clients = clients(n)


class DropsRowOne(Method):
    """A method whose own check drops row 1's reply."""

    def check_reply(self, a):
        return "the method's own check" if a.row == 1 else None


def test_replies_are_matched_to_rows_checked_and_the_methods_check_runs_last():
    settings = RunSettings.from_run_config({"update-norm-factor": 0})
    replies = Replies(
        settings, ReplyValidator(state_reference(STATE), 30.0), Roster(3), DropsRowOne()
    )
    replies.begin()
    rows = np.array([2, 0, 1])
    messages = replies.record_sent(rows, [sent(100 + int(r)) for r in rows])
    assert [int(m.metadata.dst_node_id) for m in messages] == [100, 101, 102]  # row order
    assert replies.sent_partitions() == {0: 0, 1: 1, 2: 2}
    accepted, dropped = replies.accept(1, [train_reply(m) for m in messages])
    assert [a.row for a in accepted] == [0, 2]
    assert [(d.partition, d.reason) for d in dropped] == [(1, "the method's own check")]
    origins = replies.update_origins(accepted)  # what was sent, decoded once
    assert all(np.array_equal(o["w"], STATE["w"]) for o in origins)
