"""RoundBook: a training round opened, charged and closed into the run's ledger."""

from __future__ import annotations

import math

from ripple_flwr.app.server.rounds.accounting import Dropped, RoundBook


def test_a_round_is_charged_what_went_over_the_wire_and_closes_into_the_ledger():
    book = RoundBook()
    book.open(1)
    book.sampled([4, 7])
    book.sent(1000, messages=2)
    book.received(900)
    book.add_bytes(down=50, up=20)  # a side round of the method
    book.drop([Dropped(7, "bad shape")])
    rec = book.close([(2.0, 30), (math.nan, 10), (1.0, 10)], server_seconds=0.5, num_rounds=3)
    assert rec.sampled == [4, 7] and rec.bytes_down == 1050 and rec.bytes_up == 920
    assert rec.received == 3 and rec.num_examples == 50
    assert math.isclose(rec.train_loss, (2.0 * 30 + 1.0 * 10) / 40)  # the finite ones
    assert rec.dropped == [Dropped(7, "bad shape")] and rec.refused is None
    assert book.ledger.rounds == [rec]


def test_a_refused_round_says_why_and_the_ledger_survives_a_resume():
    book = RoundBook()
    book.open(1)
    book.sampled([0])
    book.sent(10, messages=1)
    book.refuse("the mean update is not finite")
    book.close([], server_seconds=0.0, num_rounds=1)
    assert book.ledger.rounds[0].refused == "the mean update is not finite"
    assert math.isnan(book.ledger.rounds[0].train_loss)
    again = RoundBook()
    again.restore(book.ledger.to_dict())
    assert again.ledger.to_dict() == book.ledger.to_dict()
