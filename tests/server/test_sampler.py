"""Sampler: the run's seeded draw and the failures that leave a client out of it."""

from __future__ import annotations

import numpy as np

from ripple_flwr.app.server.rounds.accounting import ClientScore, Dropped
from ripple_flwr.app.server.rounds.sampler import Sampler
from ripple_flwr.settings import RunSettings


def settings(**over) -> RunSettings:
    return RunSettings.from_run_config({"clients-per-round": 3, "max-failures": 2, **over})


def test_the_draw_is_seeded_without_repeats_and_the_same_for_every_sampler_of_a_seed():
    a, b, c = Sampler(settings(seed=1)), Sampler(settings(seed=1)), Sampler(settings(seed=2))
    draws_a = [a.uniform(10) for _ in range(5)]
    draws_b = [b.uniform(10) for _ in range(5)]
    assert all(np.array_equal(x, y) for x, y in zip(draws_a, draws_b, strict=True))
    assert any(not np.array_equal(x, c.uniform(10)) for x in draws_a)
    for rows in draws_a:
        assert len(rows) == 3 and len(set(rows.tolist())) == 3 and rows.max() < 10


def test_a_client_that_failed_max_failures_rounds_is_left_out_until_it_answers():
    s = Sampler(settings())
    row_of = {0: 0, 1: 1, 2: 2}
    for r in (1, 2):  # partition 1 does not answer twice; partition 2 sends a bad reply
        s.count_failures(
            r, [0], [Dropped(1, "no reply within 30 s"), Dropped(2, "bad shape")], row_of
        )
    assert s.active_rows(3).tolist() == [0, 2]  # a bad reply is a live node: not counted
    assert s.failing_rows(3) == [1] and s.round_size(2) == 2
    s.readmit(3, [ClientScore(partition=1, accuracy=0.5, loss=1.0, num_examples=10)], row_of)
    assert s.active_rows(3).tolist() == [0, 1, 2]


def test_a_newcomer_taking_a_partition_over_starts_afresh_and_resume_keeps_the_draw():
    s = Sampler(settings())
    s.count_failures(1, [], [Dropped(0, "client error: boom")], {0: 0})
    s.forget([0])
    assert s.failures == {}
    s.uniform(10)
    saved, failures = s.rng_state(), {4: 1}
    resumed = Sampler(settings())
    resumed.restore_rng(saved)
    resumed.restore(failures)
    assert np.array_equal(resumed.uniform(10), s.uniform(10)) and resumed.failures == {4: 1}
