"""Evaluator: who is scored when, and each evaluation's record from the replies."""

from __future__ import annotations

import numpy as np
from collaborators import clients, eval_reply, give_ids

from ripple_flwr.app.protocol.records import state_to_record
from ripple_flwr.app.server.evaluation.rounds import Evaluator
from ripple_flwr.settings import RunSettings


def evaluator(**over) -> Evaluator:
    return Evaluator(RunSettings.from_run_config({"eval-every": 2, "seed": 3, **over}))


def test_every_eval_every_rounds_and_the_last():
    e = evaluator()
    assert [r for r in range(1, 6) if e.is_eval_round(r, 5)] == [2, 4, 5]


def test_an_eval_fraction_draws_a_new_seeded_sample_each_evaluation():
    e, same = evaluator(**{"eval-fraction": 0.5}), evaluator(**{"eval-fraction": 0.5})
    rows = [e.sample(10, r) for r in (2, 4, 6)]
    assert all(len(r) == 5 and np.all(np.diff(r) > 0) for r in rows)
    assert all(np.array_equal(a, same.sample(10, r)) for a, r in zip(rows, (2, 4, 6), strict=True))
    assert not all(np.array_equal(rows[0], r) for r in rows[1:])
    assert evaluator().sample(4, 2).tolist() == [0, 1, 2, 3]


def test_the_record_weights_scores_by_examples_and_names_a_bad_reply():
    from collaborators import STATE

    e, who = evaluator(), clients(3, tests=10)
    model = state_to_record(STATE)
    messages = give_ids(e.send(2, np.arange(3), who, [model] * 3))
    replies = [
        eval_reply(messages[0], 0, 0.5, examples=10),
        eval_reply(messages[1], 1, 1.0, examples=10),
        eval_reply(messages[2], 2, 1.5, examples=10),  # an accuracy above 1: not scored
    ]
    rec = e.score(2, replies, who, num_rounds=4)
    assert rec.expected == 3 and rec.scored == 2 and rec.coverage == 2 / 3
    assert abs(rec.accuracy["weighted_mean"] - 0.75) < 1e-9
    assert [f.partition for f in rec.failed] == [2]
    assert e.score(3, [], who, num_rounds=4) is None  # nothing sent since
