"""Zero-shot onboarding, late joiners and Ripple-HDB inside the strategy (in-process grid)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import FakeGrid, tiny_run_config
from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict

from ripple_flwr.aggregation.hdb import collapse_weights
from ripple_flwr.aggregation.mixing import mix_models
from ripple_flwr.app.protocol.candidates import split_candidates
from ripple_flwr.app.protocol.records import record_to_state, state_to_record
from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.app.server.engine import Engine
from ripple_flwr.app.server.evaluation.zero_shot import onboard_new_clients
from ripple_flwr.methods.fedavg.server import FedAvgMethod
from ripple_flwr.methods.ripple.server import RippleMethod
from ripple_flwr.settings import ConfigError

STATE = {"w": np.array([1.0, 2.0, 3.0], dtype=np.float32), "n": np.array(0, dtype=np.int64)}


class Clients:
    """A ClientApp stand-in over ``total`` partitions: update = pid + 1, accuracy = pid / 10."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.log: list[tuple[str, int]] = []
        self.received: dict[tuple[str, int], list[dict]] = {}

    def __call__(self, msg: Message, context) -> Message:
        pid = int(context.node_config["partition-id"])
        kind = msg.metadata.message_type.split(".")[0]
        self.log.append((kind, pid))
        if kind == "query":
            info = ConfigRecord({"partition-id": pid, "num-partitions": self.total})
            return Message(RecordDict({"info": info}), reply_to=msg)
        candidates, _ = split_candidates(msg.content.array_records)
        states = [record_to_state(r) for r in candidates]
        state = states[0]
        self.received.setdefault((kind, pid), []).append(state)
        if kind == "train":
            new = {"w": state["w"] + (pid + 1.0), "n": state["n"] + 1}
            metrics = MetricRecord({"num-examples": 10, "train_loss": 1.0})
            return Message(
                RecordDict({"arrays": state_to_record(new), "metrics": metrics}), reply_to=msg
            )
        # The training-split loss favours the model whose first weight is closest to 10 * pid;
        # the test-split loss is the opposite, so a choice made on it would differ.
        train_losses = [float(abs(s["w"][0] - 10 * pid)) for s in states]
        chosen = int(np.argmin(train_losses))
        loss = -train_losses[chosen]
        metrics = MetricRecord({"loss": loss, "accuracy": pid / 10, "num-examples": 10})
        if len(states) > 1:
            metrics["chosen"] = chosen
        return Message(RecordDict({"metrics": metrics}), reply_to=msg)

    def count(self, kind: str, pid: int) -> int:
        return self.log.count((kind, pid))


# pids 0-3 train (pid 3 connects late), pid 4 is a held-out new client.
W = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [0.2, 0.8], [0.7, 0.3]])


def toy(best_by_loss: bool = True, rounds: int = 3):
    cfg = {
        "method": "oracle",
        "sampling": "uniform",
        "num-partitions": 4,
        "new-clients": 1,
        "clients-per-round": 2,
        "num-components": 2,
        "num-server-rounds": rounds,
        "eval-every": 1,
        "round-timeout": 0.5,
        "best-by-loss": best_by_loss,
    }
    settings = parse_run_config(cfg)
    clients = Clients(total=5)
    grid = FakeGrid(cfg, app=clients, join_after={3: 1})
    strategy = Engine(settings, STATE, RippleMethod(settings, STATE, weights=W, truth=W))
    return strategy, grid, clients


def test_late_joiner_is_assigned_at_the_next_round_without_disturbing_others():
    strategy, grid, clients = toy(rounds=3)
    strategy.start(grid, state_to_record(STATE), num_rounds=3)
    # Training started with the 3 training nodes present (plus the new client).
    first = strategy.ledger.rounds[0].sampled
    assert 3 not in first
    # pid 3 was queried once, right before round 2, and is a training client from then on.
    assert clients.count("query", 3) == 1
    assert strategy.roster.joined[0]["round"] == 2 and strategy.roster.joined[0]["partitions"] == [
        3
    ]
    assert strategy.clients.partition_ids == [0, 1, 2, 3]
    np.testing.assert_array_equal(strategy.method.weights[3], W[3])
    # Everyone else got exactly one query message in the whole run: the join cost them nothing.
    assert all(clients.count("query", p) == 1 for p in range(5))
    # It is evaluated with its own mix from round 2 on (3 clients before, 4 after).
    assert [len(e.clients) for e in strategy.ledger.evaluations] == [3, 4, 4]
    assert clients.count("train", 3) == sum(3 in r.sampled for r in strategy.ledger.rounds)


def test_new_client_never_trains_and_gets_its_w_mix_once():
    strategy, grid, clients = toy(best_by_loss=False)
    strategy.start(grid, state_to_record(STATE), num_rounds=3)
    assert clients.count("evaluate", 4) == 0  # onboarding comes after training, not in start()
    rec = onboard_new_clients(strategy, grid)
    assert strategy.new_clients.partition_ids == [4]
    assert clients.count("train", 4) == 0
    # Evaluated exactly once, after training, with theta_new = sum_c w_new,c theta_c.
    (got,) = clients.received[("evaluate", 4)]
    expected = mix_models(W[4:5], strategy.method.stacked)[0]
    np.testing.assert_allclose(got["w"], expected["w"], rtol=1e-6)
    assert rec["clients"] == 1 and rec["accuracy"]["weighted_mean"] == pytest.approx(0.4)
    assert "best_by_loss" not in rec
    # No embedding time in the toy: onboarding one client is the routing and mixing alone.
    assert rec["onboard_ms_per_client"] == pytest.approx(1000 * rec["server_seconds"])


def test_best_by_loss_sends_every_cluster_model_and_keeps_the_train_split_choice():
    strategy, grid, clients = toy(best_by_loss=True)
    strategy.start(grid, state_to_record(STATE), num_rounds=3)
    best = onboard_new_clients(strategy, grid)["best_by_loss"]
    # One zero-shot message, then one message carrying both cluster models as candidates.
    assert clients.count("evaluate", 4) == 2
    losses = [abs(strategy.method.stacked["w"][m][0] - 40) for m in range(2)]
    assert best["per_client"][0]["model"] == int(np.argmin(losses))
    assert best["chosen_on"] == "training split"


def test_fedavg_onboards_new_clients_with_its_global_model():
    cfg = {
        "method": "fedavg",
        "num-partitions": 4,
        "new-clients": 1,
        "clients-per-round": 2,
        "num-components": 2,
        "round-timeout": 0.5,
    }
    settings = parse_run_config(cfg)
    clients = Clients(total=5)
    strategy = Engine(settings, STATE, FedAvgMethod(settings, STATE))
    grid = FakeGrid(cfg, app=clients)
    result = strategy.start(grid, state_to_record(STATE), num_rounds=2)
    onboard_new_clients(strategy, grid)
    (got,) = clients.received[("evaluate", 4)]
    np.testing.assert_array_equal(got["w"], result.arrays["w"].numpy())
    assert clients.count("train", 4) == 0


def test_hdb_trains_k_hat_models_on_collapsed_weights():
    # Two obvious groups over K=4 components: {0, 1} and {2, 3}.
    rng = np.random.default_rng(0)
    n, k = 12, 4
    w = np.zeros((n, k))
    for i in range(n):
        comps = [0, 1] if i < n // 2 else [2, 3]
        share = rng.uniform(0.3, 0.7)
        w[i, comps] = [share, 1 - share]
    w = 0.98 * w + 0.005
    settings = parse_run_config(
        {
            "method": "oracle",
            "refine": "hdb",
            "num-partitions": n,
            "clients-per-round": 4,
            "num-components": k,
            "num-server-rounds": 1,
            "round-timeout": 0.5,
        }
    )
    clients = Clients(total=n)
    strategy = Engine(settings, STATE, RippleMethod(settings, STATE, weights=w, truth=w))
    strategy.start(FakeGrid({"num-partitions": n}, app=clients), state_to_record(STATE), 1)
    assert strategy.num_models == 2
    cmap = strategy.method.component_map
    assert cmap[0] == cmap[1] != cmap[2] == cmap[3]
    np.testing.assert_allclose(strategy.method.weights, collapse_weights(w, cmap, 2))
    np.testing.assert_allclose(strategy.method.weights.sum(axis=1), 1.0)
    assert strategy.method.stacked["w"].shape == (2, 3)
    # The training messages carried the mix of the 2 models with the collapsed weights.
    for (kind, pid), states in clients.received.items():
        if kind == "train":
            expected = mix_models(
                strategy.method.weights[pid : pid + 1], {"w": np.stack([STATE["w"]] * 2)}
            )
            np.testing.assert_allclose(states[0]["w"], expected[0]["w"], rtol=1e-6)
    rec = strategy.run_record()
    assert rec["hdb"]["num_meta"] == 2


def test_hdb_needs_routing_weights():
    with pytest.raises(ConfigError, match="refine='hdb'.*method='fedavg'"):
        parse_run_config({"method": "fedavg", "refine": "hdb"})


def test_new_clients_must_fit_the_dataset():
    with pytest.raises(ConfigError, match="new-clients=10"):
        parse_run_config({"num-partitions": 20, "new-clients": 10})


def test_ripple_run_with_hdb_and_new_clients_end_to_end(tiny_checkpoint, cache_dir, tmp_path):
    """The real client handlers: zero-shot scores in the results, a saved run onboard.py reads."""
    from ripple_flwr.app.server.run import run_server
    from ripple_flwr.data.cache import cached_federation
    from ripple_flwr.runs.onboarding import Onboarder

    cfg = tiny_run_config(
        cache_dir,
        method="ripple",
        refine="hdb",
        checkpoint=str(tiny_checkpoint),
        **{
            "new-clients": 2,
            "alpha-new": 1.0,
            "num-server-rounds": 2,
            "results-path": str(tmp_path / "run.json"),
        },
    )
    grid = FakeGrid(cfg)
    results = json.loads(run_server(grid, cfg).read_text())
    zs = results["zero_shot"]
    assert zs["partition_ids"] == [6, 7] and len(zs["per_client"]) == 2
    scores = [c["accuracy"] for c in zs["per_client"]]
    sizes = [c["num_examples"] for c in zs["per_client"]]
    assert results["zero_shot_accuracy"] == pytest.approx(np.average(scores, weights=sizes))
    truth = np.array(results["federation"]["true_mixtures"])[[6, 7]]
    l1 = np.abs(np.array(zs["weights"]) - truth).sum(axis=1).mean()
    assert zs["routing"]["l1"] == pytest.approx(l1)
    # New clients never trained.
    trained = {
        int(grid.contexts[m.metadata.dst_node_id].node_config["partition-id"])
        for m in grid.sent_of_type("train")
    }
    assert trained <= set(range(6))
    assert results["num_models"] == results["hdb"]["num_models"] >= 1
    # Onboarding outside the run gives the very model the server sent the new client.
    onboarder = Onboarder.from_path(results["saved_run"])
    settings = parse_run_config(cfg)
    fed = cached_federation(settings)
    got = onboarder.onboard(fed.client_images(6))
    sent = [
        m
        for m in grid.sent_of_type("evaluate")
        if grid.contexts[m.metadata.dst_node_id].node_config["partition-id"] == 6
    ]
    first = record_to_state(sent[0].content.array_records["arrays"])
    for key, value in first.items():
        np.testing.assert_allclose(got.state[key], value, rtol=1e-5, atol=1e-6)


def test_rotated_domains_are_found_before_round_one(tmp_path):
    """Rotation as the GMM-VAE's label: argmax w recovers the 4 rotations (ARI = 1)."""
    from ripple_flwr.app.server.setup import resolve_checkpoint
    from ripple_flwr.data.cache import cached_federation
    from ripple_flwr.runs.results import routing_metrics
    from ripple_flwr.wst.embedder import PrototypeSettings, SpectralEmbedder

    settings = parse_run_config(
        {
            "dataset": "rotated-mnist-5k",
            "label-kind": "domain",
            "num-components": 4,
            "num-partitions": 30,
            "partition-size": 100,
            "pretrain-bank-size": 400,
            "pretrain-steps": 200,
            "cache-dir": str(tmp_path),
        }
    )
    fed = cached_federation(settings)
    ckpt, _ = resolve_checkpoint(settings, fed.dataset.image_shape)
    embedder = SpectralEmbedder(
        fed.dataset.image_shape,
        J=3,
        L=8,
        prototype=PrototypeSettings(settings.embedding.svd_rank, None),
    )
    phis = embedder.embed_many([fed.client_images(p) for p in range(30)])
    w = ckpt.router("gmm-vae").route(phis)
    metrics = routing_metrics(w, fed.mixtures)
    assert metrics["ari_clients"] >= 8  # enough single-rotation clients to mean something
    assert metrics["ari"] == pytest.approx(1.0)
    # The four rotations are all present among those clients.
    hard = fed.mixtures.max(axis=1) >= 0.9
    assert len(set(fed.mixtures[hard].argmax(1))) == 4


class FarRouter:
    """A router that does not recognise partition 4's summary: it routes it 1/K, and says why."""

    name, needs, num_components, input_dim = "far", "none", 2, None

    def route_with_reasons(self, features):
        return np.full((1, 2), 0.5), ["embedding outside the router's domain: routed uniformly"]


def test_the_zero_shot_record_names_new_clients_routed_uniformly():
    strategy, grid, _ = toy(best_by_loss=False)
    strategy.start(grid, state_to_record(STATE), num_rounds=3)
    plain = onboard_new_clients(strategy, grid)
    assert "routed_uniformly" not in plain  # in-domain clients: the record is as before
    strategy, grid, _ = toy(best_by_loss=False)
    strategy.start(grid, state_to_record(STATE), num_rounds=3)
    strategy.method.fixed_weights, strategy.method.router = None, FarRouter()  # routed from here on
    rec = onboard_new_clients(strategy, grid)
    reason = "embedding outside the router's domain: routed uniformly"
    assert rec["routed_uniformly"] == [{"partition": 4, "reason": reason}]
    assert set(plain) | {"routed_uniformly"} == set(rec)
    np.testing.assert_array_equal(strategy.method.new_weights, [[0.5, 0.5]])
