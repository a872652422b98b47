"""RippleMethod and the baselines against an in-process fake Grid (no Ray, no SuperLink)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from conftest import FakeGrid, tiny_run_config
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, MetricRecord, RecordDict

from ripple_flwr.aggregation.mixing import mix_models
from ripple_flwr.app.protocol.records import record_to_state, state_to_record
from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.app.server.engine import Engine, client_train_config
from ripple_flwr.app.server.roster.node_wait import (
    NotEnoughClientsError,
    wait_for_nodes,
)
from ripple_flwr.app.server.run import run_server
from ripple_flwr.app.server.setup import build_engine, initial_state
from ripple_flwr.methods.fedavg.server import FedAvgMethod
from ripple_flwr.methods.local.server import LocalOnlyMethod
from ripple_flwr.methods.ripple.server import RippleMethod
from ripple_flwr.router.checkpoint import load_checkpoint
from ripple_flwr.settings import RunSettings


# -- a hand-built client: exact arithmetic, no data ---------------------------------------------
def delta_of(pid: int) -> dict[str, np.ndarray]:
    """The update partition ``pid`` always makes (float tensor; the counter is left alone)."""
    return {"w": np.array([pid + 1.0, -2.0 * pid, 0.5], dtype=np.float32)}


class ToyClients:
    """A ClientApp stand-in: returns received + delta_of(pid), and accuracy = pid / 10."""

    def __init__(self) -> None:
        self.trained: list[int] = []

    def __call__(self, msg: Message, context) -> Message:
        pid = int(context.node_config["partition-id"])
        kind = msg.metadata.message_type
        if kind.startswith("query"):
            info = ConfigRecord(
                {"partition-id": pid, "num-partitions": 4, "num-examples": 10 + pid}
            )
            return Message(RecordDict({"info": info}), reply_to=msg)
        state = record_to_state(msg.content.array_records["arrays"])
        if kind == "train":
            self.trained.append(pid)
            new = {"w": state["w"] + delta_of(pid)["w"], "n": state["n"] + 1}
            metrics = MetricRecord({"num-examples": 10 + pid, "train_loss": 1.0})
            return Message(
                RecordDict({"arrays": state_to_record(new), "metrics": metrics}), reply_to=msg
            )
        metrics = MetricRecord({"loss": 1.0, "accuracy": pid / 10, "num-examples": 10})
        return Message(RecordDict({"metrics": metrics}), reply_to=msg)


TOY_STATE = {"w": np.array([1.0, 2.0, 3.0], dtype=np.float32), "n": np.array(0, dtype=np.int64)}
TOY_W = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0], [0.25, 0.75]])


def toy_run(faults=None, server_lr=0.5, clients=4, **over):
    cfg = {
        "method": "oracle",
        "sampling": "uniform",
        "num-partitions": 4,
        "clients-per-round": clients,
        "num-components": 2,
        "server-lr": server_lr,
        "num-server-rounds": 1,
        "round-timeout": 0.5,  # silent clients time out quickly
        **over,
    }
    settings = parse_run_config(cfg)
    toy = ToyClients()
    grid = FakeGrid(cfg, app=toy, faults=faults)
    strategy = Engine(
        settings, TOY_STATE, RippleMethod(settings, TOY_STATE, weights=TOY_W, truth=TOY_W)
    )
    return settings, strategy, grid, toy


def eq9(stacked, rows, server_lr, eps=1e-8):
    """Eq. 9 written out by hand for the toy clients."""
    w = TOY_W[rows]
    out = stacked["w"].astype(np.float64).copy()
    for c in range(2):
        num = sum(w[i, c] * delta_of(int(r))["w"] for i, r in enumerate(rows))
        out[c] += server_lr * num / (w[:, c].sum() + eps)
    return out


def test_aggregation_equals_eq9_on_a_hand_built_case():
    settings, strategy, grid, toy = toy_run()
    strategy.start(grid, state_to_record(TOY_STATE), num_rounds=1)
    assert sorted(toy.trained) == [0, 1, 2, 3]
    expected = eq9({"w": np.stack([TOY_STATE["w"]] * 2)}, [0, 1, 2, 3], 0.5)
    np.testing.assert_allclose(strategy.method.stacked["w"], expected, rtol=1e-6)
    np.testing.assert_array_equal(strategy.method.stacked["n"], [0, 0])  # counters never averaged
    # Per-round bytes equal FedAvg's: one model down and one up per sampled client.
    model_bytes = sum(v.nbytes for v in TOY_STATE.values())
    rnd = strategy.ledger.rounds[0]
    assert rnd.bytes_down == rnd.bytes_up == 4 * model_bytes
    # Evaluation: sample-weighted mean of the toy accuracies pid / 10.
    acc = strategy.ledger.evaluations[0].accuracy
    assert acc["weighted_mean"] == pytest.approx(0.15)


def test_training_messages_carry_the_w_mix(tiny_checkpoint, cache_dir):
    cfg = tiny_run_config(
        cache_dir, method="ripple", checkpoint=str(tiny_checkpoint), **{"num-server-rounds": 1}
    )
    settings = parse_run_config(cfg)
    from ripple_flwr.data.cache import cached_federation

    fed = cached_federation(settings)
    router = load_checkpoint(tiny_checkpoint).router("gmm-vae")
    state = initial_state(settings, fed.dataset.image_shape, fed.dataset.num_classes)
    strategy = build_engine(settings, state, fed, router)
    grid = FakeGrid(cfg)
    clients = strategy.prepare(grid)

    # The query round: one query.embed per node, embeddings of the right length, once.
    assert len(grid.sent_of_type("query.embed")) == 6
    assert clients.features.shape == (6, router.model.config.input_dim)
    assert clients.bytes_up == [router.model.config.input_dim * 4] * 6
    np.testing.assert_allclose(strategy.method.weights, router.route(clients.features))
    np.testing.assert_allclose(strategy.method.weights.sum(axis=1), 1.0, atol=1e-6)

    # Make the cluster models differ, so the mix is not trivially the initial model.
    rng = np.random.default_rng(0)
    strategy.method.stacked = {
        k: (v + rng.normal(size=v.shape).astype(v.dtype) if v.dtype.kind == "f" else v)
        for k, v in strategy.method.stacked.items()
    }
    cfg_record = client_train_config(settings)  # what start() hands Flower's loop
    messages = list(strategy.configure_train(1, ArrayRecord(), cfg_record, grid))
    assert len(messages) == 3
    for msg in messages:
        row = strategy.clients.node_ids.index(msg.metadata.dst_node_id)
        expected = mix_models(strategy.method.weights[row][None], strategy.method.stacked)[0]
        got = record_to_state(msg.content.array_records["arrays"])
        assert list(got) == list(expected)
        for key in expected:
            np.testing.assert_allclose(got[key], expected[key], rtol=1e-6, atol=1e-6)
        assert msg.content.config_records["config"]["lr"] == settings.training.lr
        assert msg.content.config_records["config"]["server-round"] == 1


def test_stratified_sampling_covers_every_cluster():
    k, n = 4, 12
    weights = np.full((n, k), 0.02)
    weights[np.arange(n), np.arange(n) % k] = 0.94
    settings = RunSettings.of(num_partitions=n, clients_per_round=k, num_components=k)
    strategy = Engine(settings, TOY_STATE, RippleMethod(settings, TOY_STATE, weights=weights))
    strategy.roster.clients = _fake_clients(n)
    strategy.method.setup(strategy.clients)
    for rnd in range(20):
        rows = strategy.sample_rows(rnd)
        assert len(set(rows)) == k
        assert set(weights[rows].argmax(axis=1)) == set(range(k))
    # Uniform sampling (same seed) is reproducible and differs from stratified in coverage.
    uniform = RunSettings.of(
        num_partitions=n, clients_per_round=k, num_components=k, sampling="uniform"
    )
    uni = Engine(uniform, TOY_STATE, RippleMethod(uniform, TOY_STATE, weights=weights))
    uni.roster.clients = _fake_clients(n)
    uni.method.setup(uni.clients)
    covered = [len(set(weights[uni.sample_rows(r)].argmax(1))) for r in range(20)]
    assert min(covered) < k


def _fake_clients(n):
    from ripple_flwr.app.server.roster.query import QueryResult

    return QueryResult(list(range(n)), list(range(n)), [10] * n, None)


# -- failures ---------------------------------------------------------------------------------
def _error_on(kind):
    def fault(msg, reply):
        if msg.metadata.message_type.startswith(kind):
            return Message(Error(code=0, reason=f"simulated crash in {kind}"), reply_to=msg)
        return reply

    return fault


def _silent_on(kind):
    def fault(msg, reply):
        return None if msg.metadata.message_type.startswith(kind) else reply

    return fault


def test_query_failures_leave_clients_out_and_the_run_goes_on(caplog):
    faults = {1: _error_on("query"), 2: _silent_on("query")}
    settings, strategy, grid, toy = toy_run(faults=faults, clients=2, **{"num-server-rounds": 3})
    with caplog.at_level("WARNING", logger="flwr.ripple"):
        strategy.start(grid, state_to_record(TOY_STATE), num_rounds=3)
    assert strategy.clients.partition_ids == [0, 3]
    assert set(toy.trained) == {0, 3}
    reasons = list(strategy.clients.rejected.values())
    assert any("simulated crash in query" in r for r in reasons)
    assert any("no reply to the query round" in r for r in reasons)
    assert "left out of training" in caplog.text


def test_fewer_usable_clients_than_clients_per_round_means_smaller_rounds(caplog):
    faults = {1: _error_on("query"), 2: _silent_on("query")}
    _, strategy, grid, toy = toy_run(faults=faults, clients=3, **{"num-server-rounds": 2})
    with caplog.at_level("WARNING", logger="flwr.ripple"):
        strategy.start(grid, state_to_record(TOY_STATE), num_rounds=2)
    assert "only 2 usable clients after the query round but clients-per-round=3" in caplog.text
    assert [sorted(r.sampled) for r in strategy.ledger.rounds] == [[0, 3], [0, 3]]
    assert sorted(toy.trained) == [0, 0, 3, 3]


def test_no_usable_client_is_a_clear_error():
    faults = {p: _error_on("query") for p in range(4)}
    _, strategy, grid, _ = toy_run(faults=faults, clients=3)
    with pytest.raises(NotEnoughClientsError, match=r"no usable training client.*at least 1"):
        strategy.start(grid, state_to_record(TOY_STATE), num_rounds=1)


def _summary_fault(kind):
    def fault(msg, reply):
        if not msg.metadata.message_type.startswith("query"):
            return reply
        phi = reply.content.array_records["summary"]["phi"].numpy().copy()
        if kind == "short":
            phi = phi[:-5]
        else:
            phi[3] = np.nan if kind == "nan" else np.inf
        content = RecordDict(
            {
                "info": reply.content.config_records["info"],
                "summary": ArrayRecord({"phi": Array(phi)}),
            }
        )
        return Message(content, reply_to=msg)

    return fault


class SpyRouter:
    """Records what reaches the encoder."""

    def __init__(self, router):
        self.router = router
        self.needs = router.needs
        self.name = router.name
        self.model = router.model
        self.input_dim = router.input_dim
        self.seen: list[np.ndarray] = []

    def route(self, features):
        self.seen.append(np.array(features))
        return self.router.route(features)


def test_bad_embeddings_are_rejected_before_the_encoder(tiny_checkpoint, cache_dir, caplog):
    cfg = tiny_run_config(cache_dir, method="ripple", checkpoint=str(tiny_checkpoint))
    settings = parse_run_config(cfg)
    spy = SpyRouter(load_checkpoint(tiny_checkpoint).router("gmm-vae"))
    strategy = Engine(settings, TOY_STATE, RippleMethod(settings, TOY_STATE, router=spy))
    faults = {0: _summary_fault("short"), 3: _summary_fault("nan"), 4: _summary_fault("inf")}
    grid = FakeGrid(cfg, faults=faults)
    with caplog.at_level("WARNING", logger="flwr.ripple"):
        strategy.prepare(grid)
    assert strategy.clients.partition_ids == [1, 2, 5]
    assert len(spy.seen) == 1 and spy.seen[0].shape == (3, spy.model.config.input_dim)
    assert np.all(np.isfinite(spy.seen[0]))
    assert "expected (1953,)" in caplog.text and "NaN or Inf" in caplog.text


def _train_fault(kind):
    def fault(msg, reply):
        if msg.metadata.message_type != "train":
            return reply
        if kind == "silent":
            return None
        state = record_to_state(reply.content.array_records["arrays"])
        metrics = reply.content.metric_records["metrics"]
        if kind == "missing":
            return Message(RecordDict({"metrics": metrics}), reply_to=msg)
        if kind == "shape":
            state["w"] = np.zeros(4, dtype=np.float32)
        if kind == "nan":
            state["w"][0] = np.nan
        if kind == "no-examples":
            metrics = MetricRecord({"train_loss": 1.0})
        return Message(
            RecordDict({"arrays": state_to_record(state), "metrics": metrics}), reply_to=msg
        )

    return fault


@pytest.mark.parametrize("kind", ["missing", "shape", "nan", "no-examples", "silent"])
def test_bad_training_replies_are_dropped(kind, caplog):
    # Partition 2 sends a bad reply; the others are fine. The cluster models must move
    # exactly as eq. 9 over the good replies says, as if partition 2 had not replied.
    _, strategy, grid, _ = toy_run(faults={2: _train_fault(kind)})
    with caplog.at_level("WARNING", logger="flwr.ripple"):
        strategy.start(grid, state_to_record(TOY_STATE), num_rounds=1)
    expected = eq9({"w": np.stack([TOY_STATE["w"]] * 2)}, [0, 1, 3], 0.5)
    np.testing.assert_allclose(strategy.method.stacked["w"], expected, rtol=1e-6)
    rnd = strategy.ledger.rounds[0]
    assert rnd.received == 3 and [d.partition for d in rnd.dropped] == [2]
    assert "partition 2" in caplog.text


def test_all_replies_bad_leaves_cluster_models_unchanged():
    faults = {p: _train_fault("nan") for p in range(4)}
    _, strategy, grid, _ = toy_run(faults=faults)
    strategy.start(grid, state_to_record(TOY_STATE), num_rounds=1)
    np.testing.assert_array_equal(strategy.method.stacked["w"], np.stack([TOY_STATE["w"]] * 2))
    assert math.isnan(strategy.ledger.rounds[0].train_loss)


def test_fewer_nodes_than_expected_is_a_clear_error_not_a_hang():
    cfg = {
        "method": "oracle",
        "num-partitions": 4,
        "clients-per-round": 2,
        "num-components": 2,
        "node-wait-timeout": 0.5,
    }
    grid = FakeGrid(cfg, num_nodes=4, app=ToyClients())
    grid.contexts = dict(list(grid.contexts.items())[:2])  # only 2 of 4 nodes connected
    settings = parse_run_config(cfg)
    strategy = Engine(settings, TOY_STATE, RippleMethod(settings, TOY_STATE, weights=TOY_W))
    t0 = time.monotonic()
    with pytest.raises(
        NotEnoughClientsError, match=r"only 2 of the expected 4 nodes.*num-supernodes=4"
    ):
        strategy.start(grid, state_to_record(TOY_STATE), num_rounds=1)
    assert time.monotonic() - t0 < 3
    assert wait_for_nodes(FakeGrid(cfg, app=ToyClients()), 4, 0.1) == sorted(grid.node_ids)


def test_node_with_other_num_partitions_is_left_out(cache_dir):
    cfg = tiny_run_config(cache_dir, **{"num-server-rounds": 1})
    nodes = [{"partition-id": i, "num-partitions": 6} for i in range(5)]
    nodes.append({"partition-id": 5, "num-partitions": 7})  # misconfigured SuperNode
    settings = parse_run_config(cfg)
    from ripple_flwr.data.cache import cached_federation

    fed = cached_federation(settings)
    state = initial_state(settings, fed.dataset.image_shape, fed.dataset.num_classes)
    strategy = build_engine(settings, state, fed)
    strategy.prepare(FakeGrid(cfg, node_configs=nodes))
    assert strategy.clients.partition_ids == [0, 1, 2, 3, 4]
    (reason,) = strategy.clients.rejected.values()
    assert "num-partitions=7" in reason


# -- baselines ---------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["fedavg", "local", "oracle"])
def test_baselines_share_sampling_bytes_and_evaluation(method, cache_dir, tmp_path):
    cfg = tiny_run_config(
        cache_dir,
        method=method,
        sampling="uniform",
        **{"num-server-rounds": 3, "results-path": str(tmp_path / f"{method}.json")},
    )
    grid = FakeGrid(cfg)
    import json

    results = json.loads(run_server(grid, cfg).read_text())
    # Same seeded uniform sampler for every method: the same clients train each round.
    sampled = [r["sampled"] for r in results["rounds"]]
    assert sampled == _uniform_reference(cfg)
    model_bytes = results["model_bytes"]
    for r in results["rounds"]:
        assert r["bytes_down"] == r["bytes_up"] == 3 * model_bytes
    assert [e["round"] for e in results["evaluations"]] == [1, 2, 3]
    assert all(len(e["clients"]) == 6 for e in results["evaluations"])
    assert len(grid.sent_of_type("evaluate")) == 3 * 6


def _uniform_reference(cfg):
    from ripple_flwr.aggregation.mixing import uniform_sample

    rng = np.random.default_rng(np.random.SeedSequence([cfg.get("seed", 0), 0x5A4D]))
    return [uniform_sample(6, 3, rng).tolist() for _ in range(cfg["num-server-rounds"])]


def test_local_only_trains_each_client_only_when_sampled():
    settings = parse_run_config(
        {"method": "local", "num-partitions": 4, "clients-per-round": 2, "num-components": 2}
    )
    toy = ToyClients()
    grid = FakeGrid({"num-partitions": 4}, app=toy)
    strategy = Engine(settings, TOY_STATE, LocalOnlyMethod(settings, TOY_STATE))
    strategy.start(grid, state_to_record(TOY_STATE), num_rounds=5)
    counts = np.bincount(toy.trained, minlength=4)
    for pid in range(4):
        expected = TOY_STATE["w"] + counts[pid] * delta_of(pid)["w"]
        np.testing.assert_allclose(strategy.method.states[pid]["w"], expected, rtol=1e-6)
        assert int(strategy.method.states[pid]["n"]) == counts[pid]


def test_fedavg_is_flowers_weighted_average():
    settings = parse_run_config(
        {"method": "fedavg", "num-partitions": 4, "clients-per-round": 4, "num-components": 2}
    )
    grid = FakeGrid({"num-partitions": 4}, app=ToyClients())
    strategy = Engine(settings, TOY_STATE, FedAvgMethod(settings, TOY_STATE))
    result = strategy.start(grid, state_to_record(TOY_STATE), num_rounds=1)
    n = np.array([10, 11, 12, 13], dtype=np.float64)
    mean_delta = sum(n[p] * delta_of(p)["w"] for p in range(4)) / n.sum()
    np.testing.assert_allclose(result.arrays["w"].numpy(), TOY_STATE["w"] + mean_delta, rtol=1e-6)
