"""eval-fraction: each evaluation scores a seeded sample of the clients (1 = every client)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FakeGrid
from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict

from ripple_flwr.app.protocol.records import record_to_state, state_to_record
from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.app.server.engine import Engine
from ripple_flwr.app.server.evaluation.rounds import eval_sample
from ripple_flwr.methods.local.server import LocalOnlyMethod
from ripple_flwr.methods.ripple.server import RippleMethod
from ripple_flwr.settings import ConfigError

N = 20
STATE = {"w": np.array([1.0, 2.0, 3.0], dtype=np.float32), "n": np.array(0, dtype=np.int64)}


def toy_app(msg: Message, context) -> Message:
    """Answers the query, trains (adds 1), and scores partition p with accuracy p / N."""
    pid = int(context.node_config["partition-id"])
    kind = msg.metadata.message_type
    if kind.startswith("query"):
        info = {"partition-id": pid, "num-partitions": N, "num-examples": 10}
        return Message(RecordDict({"info": ConfigRecord(info)}), reply_to=msg)
    if kind == "train":
        state = record_to_state(msg.content.array_records["arrays"])
        new = {"w": state["w"] + 1.0, "n": state["n"] + 1}
        metrics = MetricRecord({"num-examples": 10, "train_loss": 1.0})
        return Message(
            RecordDict({"arrays": state_to_record(new), "metrics": metrics}), reply_to=msg
        )
    metrics = MetricRecord({"loss": 1.0, "accuracy": pid / N, "num-examples": 2})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)


def run(method: str = "oracle", rounds: int = 4, **over):
    cfg = {
        "method": method,
        "sampling": "uniform",
        "num-partitions": N,
        "clients-per-round": 4,
        "num-components": 2,
        "num-server-rounds": rounds,
        "eval-every": 2,
        "round-timeout": 5.0,
        **over,
    }
    settings = parse_run_config(cfg)
    grid = FakeGrid(cfg, app=toy_app)
    if method == "local":
        strategy = Engine(settings, STATE, LocalOnlyMethod(settings, STATE))
    else:
        w = np.random.default_rng(0).dirichlet([1.0, 1.0], size=N)
        strategy = Engine(settings, STATE, RippleMethod(settings, STATE, weights=w, truth=w))
    strategy.start(grid, state_to_record(STATE), num_rounds=rounds)
    return strategy, grid


def evaluated_partitions(strategy, grid) -> list[list[int]]:
    """The partitions each evaluation sent a model to, from the grid's own traffic."""
    pid_of = dict(zip(strategy.clients.node_ids, strategy.clients.partition_ids, strict=True))
    by_round: dict[int, list[int]] = {}
    for m in grid.sent_of_type("evaluate"):
        rnd = int(m.content.config_records["config"]["server-round"])
        by_round.setdefault(rnd, []).append(pid_of[int(m.metadata.dst_node_id)])
    return [sorted(by_round[r]) for r in sorted(by_round)]


def test_eval_sample_is_a_seeded_subset_of_the_right_size() -> None:
    rows = eval_sample(1000, 0.1, seed=3, server_round=5)
    assert len(rows) == 100 and rows.dtype == np.int64
    assert np.all(np.diff(rows) > 0) and rows[0] >= 0 and rows[-1] < 1000  # sorted, no repeats
    assert np.array_equal(rows, eval_sample(1000, 0.1, seed=3, server_round=5))
    assert not np.array_equal(rows, eval_sample(1000, 0.1, seed=3, server_round=10))
    assert not np.array_equal(rows, eval_sample(1000, 0.1, seed=4, server_round=5))
    assert len(eval_sample(7, 0.5, 0, 1)) == 4  # round(3.5) = 4
    assert len(eval_sample(7, 0.01, 0, 1)) == 1  # at least one client
    assert np.array_equal(eval_sample(7, 1.0, 0, 1), np.arange(7))
    with pytest.raises(ValueError, match="in \\(0, 1\\]"):
        eval_sample(7, 0.0, 0, 1)


def test_eval_fraction_is_a_checked_run_config_key() -> None:
    assert parse_run_config({"method": "fedavg"}).evaluation.eval_fraction == 1.0
    assert (
        parse_run_config({"method": "fedavg", "eval-fraction": 0.25}).evaluation.eval_fraction
        == 0.25
    )
    for bad in (0, 0.0, 1.5, -0.1):
        with pytest.raises(ConfigError, match="eval-fraction must be"):
            parse_run_config({"method": "fedavg", "eval-fraction": bad})


@pytest.mark.parametrize("method", ["oracle", "local"])
def test_each_evaluation_scores_its_seeded_sample(method: str) -> None:
    strategy, grid = run(method, **{"eval-fraction": 0.3})
    sent = evaluated_partitions(strategy, grid)
    evals = strategy.ledger.evaluations
    assert [e.round for e in evals] == [2, 4] and len(sent) == 2
    for e, pids in zip(evals, sent, strict=True):
        expected = eval_sample(N, 0.3, 0, e.round).tolist()  # rows = partitions here
        assert pids == expected and len(pids) == 6
        assert (e.expected, e.population, e.scored, e.coverage) == (6, N, 6, 1.0)
        assert [c.partition for c in e.clients] == expected
        assert [c.accuracy for c in e.clients] == [p / N for p in expected]
    assert sent[0] != sent[1]  # a new sample each evaluation
    again, grid2 = run(method, **{"eval-fraction": 0.3})
    assert evaluated_partitions(again, grid2) == sent  # the same seed, the same samples
    other, grid3 = run(method, **{"eval-fraction": 0.3, "seed": 1})
    assert evaluated_partitions(other, grid3) != sent


def test_fraction_one_evaluates_everyone_and_training_is_unchanged() -> None:
    full, grid = run()
    assert evaluated_partitions(full, grid) == [list(range(N))] * 2
    assert all(e.expected == e.population == N for e in full.ledger.evaluations)
    sampled, _ = run(**{"eval-fraction": 0.3})
    # The evaluation draws from its own generator: training samples the same clients.
    assert [r.sampled for r in sampled.ledger.rounds] == [r.sampled for r in full.ledger.rounds]
