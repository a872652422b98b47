"""ReplyValidator: a round's training replies matched, converted and checked in one place."""

from __future__ import annotations

import numpy as np
from collaborators import STATE, clients, sent, train_reply

from ripple_flwr.app.server.replies.validation import state_reference
from ripple_flwr.app.server.replies.validator import ReplyValidator


def test_valid_replies_pass_in_row_order_and_every_other_one_is_dropped_with_its_reason():
    validator = ReplyValidator(state_reference(STATE), round_timeout=30.0)
    who = clients(4)
    messages = [sent(n) for n in who.node_ids]
    pending = {str(m.metadata.message_id): row for row, m in enumerate(messages)}
    bad_shape = {**STATE, "w": np.zeros((4, 4), np.float32)}
    replies = [
        train_reply(messages[2]),
        train_reply(messages[0], examples=10_000),  # claims more than its split holds
        train_reply(messages[1], state=bad_shape),
        train_reply(messages[0]),  # a second reply to one message: ignored
    ]  # messages[3] gets no reply
    accepted, dropped = validator.check(1, replies, pending, who)
    assert [a.row for a in accepted] == [0, 2]
    assert accepted[0].num_examples == 40  # held to the training split from the query
    reasons = {d.partition: d.reason for d in dropped}
    assert set(reasons) == {1, 3}
    assert "shape" in reasons[1] and "no reply" in reasons[3]
