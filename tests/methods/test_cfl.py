"""CFL in the reference code's order, its similarity test and its warm-up, on hand-built replies.

The strategy object is driven directly: each round names which rows replied with
which update (their returned model minus the model they were sent) and how many
examples; no training runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.app.server.replies.validation import Accepted
from ripple_flwr.app.server.roster.query import QueryResult
from ripple_flwr.app.server.setup import make_engine
from ripple_flwr.methods.cfl.server import first_split_round
from ripple_flwr.methods.registry import MethodInputs, get_method

SENT = {"w": np.array([1.0, 2.0, 3.0], dtype=np.float32), "n": np.array(0, dtype=np.int64)}


def cfl_strategy(n: int = 6, **over):
    """A CFL strategy over ``n`` clients whose split test holds whenever updates disagree."""
    cfg = {
        "method": "cfl",
        "num-partitions": n,
        "clients-per-round": n,
        "num-server-rounds": 10,
        "cfl-warmup-fraction": 0.0,
        "cfl-eps1": 3.0,
        "cfl-eps2": 4.0,
        "update-norm-factor": 0.0,
        **over,
    }
    strategy = make_engine(get_method("cfl"), MethodInputs(parse_run_config(cfg), SENT))
    strategy.roster.clients = QueryResult(list(range(n)), list(range(n)), [10] * n, None)
    strategy.method.setup(strategy.clients)
    return strategy


def play_round(strategy, server_round: int, updates: dict[int, tuple[list[float], int]]):
    """Rows ``updates`` train from their cluster's model and return it plus their update."""
    rows = np.array(sorted(updates), dtype=np.int64)
    strategy.method.train_payloads(rows, None)  # which cluster's model each row was sent
    sent = {int(r): strategy.method.models[strategy.method._sent_from[int(r)]] for r in rows}
    accepted = [
        Accepted(
            row=int(r),
            state={
                "w": sent[int(r)]["w"] + np.asarray(updates[int(r)][0], dtype=np.float32),
                "n": sent[int(r)]["n"] + int(r) + 1,
            },
            num_examples=updates[int(r)][1],
            train_loss=1.0,
            message=None,  # apply_updates reads only the row, state and examples
        )
        for r in rows
    ]
    strategy.method.aggregate(server_round, accepted)
    return sent


U = np.array([3.0, 4.0, 0.0])  # norm 5


def test_after_a_split_each_side_is_the_sent_model_plus_its_own_members_mean_update():
    strategy = cfl_strategy()
    # Rows 0-2 move +U, rows 3-5 move -U (scaled): the example-weighted mean update is
    # (10 + 24 + 24 - 11 - 9 - 40) / 130 U, norm 0.08 < eps1 = 3; the largest is 6 > eps2 = 4.
    updates = {
        0: (1.0 * U, 10),
        1: (1.2 * U, 20),
        2: (0.8 * U, 30),
        3: (-1.1 * U + [0, 0, 0.1], 10),
        4: (-0.9 * U, 10),
        5: (-1.0 * U - [0, 0, 0.1], 40),
    }
    play_round(strategy, 1, updates)
    assert strategy.num_models == 2
    assert strategy.method.assignment.tolist() == [0, 0, 0, 1, 1, 1]
    for c, rows in ((0, [0, 1, 2]), (1, [3, 4, 5])):
        n = np.array([updates[r][1] for r in rows], dtype=np.float64)
        mean = sum(ni * updates[r][0] for ni, r in zip(n, rows, strict=True)) / n.sum()
        np.testing.assert_allclose(strategy.method.models[c]["w"], SENT["w"] + mean, rtol=1e-6)
        # The step counter comes from the side's heaviest member (rows 2 and 5).
        assert int(strategy.method.models[c]["n"]) == (3 if c == 0 else 6)
    # Not the parent's full average, which both sides would get if it averaged first.
    everyone = sum(n * u for u, n in updates.values()) / 130
    assert np.linalg.norm(strategy.method.models[0]["w"] - (SENT["w"] + everyone)) > 4.0
    (event,) = strategy.method.events
    assert event["accepted"] and event["sizes"] == [3, 3] and event["into"] == [0, 1]
    assert event["round"] == 1 and event["cross_similarity_max"] < -0.9


def test_uniform_weighting_is_the_reference_codes_plain_mean_of_the_members_updates():
    updates = {0: (1.0 * U, 10), 1: (0.5 * U, 30), 2: (0.2 * U, 60)}
    no_split = {"cfl-eps2": 100.0}  # one cluster: its new model is the members' mean
    plain = cfl_strategy(3, **no_split, **{"cfl-weighting": "uniform"})
    weighted = cfl_strategy(3, **no_split)
    play_round(plain, 1, updates)
    play_round(weighted, 1, updates)
    np.testing.assert_allclose(plain.method.models[0]["w"], SENT["w"] + (1.7 / 3) * U, rtol=1e-6)
    weighted_model = weighted.method.models[0]["w"]
    np.testing.assert_allclose(weighted_model, SENT["w"] + (37 / 100) * U, rtol=1e-6)
    # The split test's mean update is the same plain mean: its norm is logged per round.
    assert plain.method.criterion[0][2] == pytest.approx(5 * 1.7 / 3, rel=1e-6)
    assert weighted.method.criterion[0][2] == pytest.approx(5 * 0.37, rel=1e-6)
    with pytest.raises(ValueError, match="cfl-weighting"):
        cfl_strategy(3, **{"cfl-weighting": "median"})
    # Equal example counts (Table 1: 160 training images each): the same models, bit for bit.
    equal = {r: (u, 160) for r, (u, _) in updates.items()}
    plain = cfl_strategy(3, **no_split, **{"cfl-weighting": "uniform"})
    weighted = cfl_strategy(3, **no_split)
    play_round(plain, 1, equal)
    play_round(weighted, 1, equal)
    np.testing.assert_array_equal(plain.method.models[0]["w"], weighted.method.models[0]["w"])


def test_a_side_without_replies_this_round_keeps_the_sent_model_and_stale_updates_do_not_count():
    strategy = cfl_strategy(**{"cfl-eps1": 1.0})
    # Round 1: everyone moves +U, except rows 4, 5 that move -U; mean norm 5/3 > eps1 = 1.
    play_round(strategy, 1, {r: ((1.0 if r < 4 else -1.0) * U, 10) for r in range(6)})
    assert strategy.num_models == 1
    sent = play_round(strategy, 2, {0: (1.2 * U, 10), 4: (-1.2 * U, 10)})[0]  # mean 0
    # Split on the latest updates of all six: rows 0-3 against rows 4, 5.
    assert strategy.method.assignment.tolist() == [0, 0, 0, 0, 1, 1]
    np.testing.assert_allclose(strategy.method.models[0]["w"], sent["w"] + 1.2 * U, rtol=1e-6)
    np.testing.assert_allclose(strategy.method.models[1]["w"], sent["w"] - 1.2 * U, rtol=1e-6)
    # Round 3: only row 1 (cluster 0) replies; cluster 1, with no reply, keeps its model.
    play_round(strategy, 3, {1: (U, 10)})
    np.testing.assert_allclose(strategy.method.models[1]["w"], sent["w"] - 1.2 * U, rtol=1e-6)


def _two_fans(gap_degrees: float) -> dict[int, tuple[np.ndarray, int]]:
    """Rows 0-2 at 0, 5, 10 degrees, rows 3-5 at 10 + gap, 15 + gap, 20 + gap (unit norm x 5).

    The largest cross similarity of the two fans is cos(gap) (rows 2 and 3).
    """
    angles = [0, 5, 10] + [10 + gap_degrees + a for a in (0, 5, 10)]
    rad = np.deg2rad(angles)
    return {r: (5.0 * np.array([np.cos(a), np.sin(a), 0.0]), 10) for r, a in enumerate(rad)}


@pytest.mark.parametrize(
    ("cross", "limit", "splits"),
    [(0.3, 0.5, True), (0.7, 0.5, False), (0.7, 0.8, True)],
)
def test_a_split_is_kept_only_when_the_sides_cross_similarity_is_below_the_threshold(
    cross, limit, splits
):
    # eps1 large, eps2 small: the stationarity test always holds, the similarity decides.
    strategy = cfl_strategy(**{"cfl-eps1": 100.0, "cfl-eps2": 1.0, "cfl-max-similarity": limit})
    play_round(strategy, 1, _two_fans(np.rad2deg(np.arccos(cross))))
    (event,) = strategy.method.events
    assert event["cross_similarity_max"] == pytest.approx(cross, abs=1e-6)
    assert event["accepted"] is splits and event["sizes"] == [3, 3]
    assert strategy.num_models == (2 if splits else 1)
    assert strategy.method.assignment.tolist() == ([0, 0, 0, 1, 1, 1] if splits else [0] * 6)
    if not splits:  # the cluster stays whole and averages everyone's models
        mean = np.mean([u for u, _ in _two_fans(np.rad2deg(np.arccos(cross))).values()], axis=0)
        np.testing.assert_allclose(strategy.method.models[0]["w"], SENT["w"] + mean, rtol=1e-5)
        assert event["into"] == [0]


@pytest.mark.parametrize(
    ("fraction", "rounds", "first"),
    [(0.2, 1000, 200), (0.2, 300, 60), (0.1, 30, 3), (0.25, 10, 3), (0.0, 10, 1), (1.0, 7, 7)],
)
def test_the_warmup_fraction_maps_to_the_first_round_a_split_may_happen(fraction, rounds, first):
    assert first_split_round(fraction, rounds) == first


def test_no_split_before_the_first_split_round():
    # 10 rounds, fraction 0.25: round 3 is the first that may split.
    strategy = cfl_strategy(**{"cfl-warmup-fraction": 0.25})
    opposed = {r: ((1.0 if r < 3 else -1.0) * U, 10) for r in range(6)}  # mean 0, max 5
    for rnd in (1, 2):
        play_round(strategy, rnd, opposed)
        assert strategy.num_models == 1 and not strategy.method.events
    play_round(strategy, 3, opposed)
    assert strategy.num_models == 2 and strategy.method.events[0]["round"] == 3
    assert strategy.run_record()["assignment"]["first_split_round"] == 3
