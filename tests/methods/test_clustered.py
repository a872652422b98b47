"""IFCA, FeSEM and CFL: their mathematics by hand, and each method on the in-process grid."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import FakeGrid, tiny_run_config
from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict

from ripple_flwr.aggregation.clustering import (
    cfl_bipartition,
    cfl_should_split,
    cluster_means,
    flatten,
    kmeans_lloyd,
    nearest_centres,
)
from ripple_flwr.app.client.candidates import lowest_loss
from ripple_flwr.app.protocol.candidates import payload_records, split_candidates
from ripple_flwr.app.protocol.records import record_to_state, state_to_record
from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.app.server.evaluation.zero_shot import onboard_new_clients
from ripple_flwr.app.server.setup import make_engine
from ripple_flwr.methods.registry import MethodInputs, get_method
from ripple_flwr.runs.results import arrayrecord_nbytes
from ripple_flwr.settings import ConfigError
from ripple_flwr.training.loops import evaluate_model


def state(w0: float, n: int = 0) -> dict[str, np.ndarray]:
    return {"w": np.array([w0, 1.0, -1.0], dtype=np.float32), "n": np.array(n, dtype=np.int64)}


# -- the mathematics ---------------------------------------------------------------------------
def test_nearest_centres_by_hand():
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    models = np.array([[1.0, 1.0], [9.0, -1.0], [-1.0, 7.0], [5.0, 5.0]])
    # (5, 5) is sqrt(50) from all three: the tie goes to the lowest index.
    assert nearest_centres(models, centres).tolist() == [0, 1, 2, 0]
    with pytest.raises(ValueError, match="must be"):
        nearest_centres(models, centres[:, :1])


def test_cluster_means_by_hand():
    models = [state(0.0), state(100.0), state(200.0)]
    states = [state(2.0, 5), state(8.0, 7), state(50.0, 1)]
    new, changed = cluster_means(models, states, labels=[0, 0, 1], weights=[3, 1, 4])
    assert changed == [0, 1]
    # Cluster 0: (3 * 2 + 1 * 8) / 4 = 3.5; the int counter comes from the heaviest member.
    assert new[0]["w"][0] == pytest.approx(3.5)
    assert new[0]["n"] == 5 and new[0]["n"].dtype == np.int64
    assert new[1]["w"][0] == pytest.approx(50.0)
    assert new[2] is models[2]  # no member: unchanged
    with pytest.raises(ValueError, match="cluster indices"):
        cluster_means(models, states, labels=[0, 3, 1], weights=[1, 1, 1])


def test_cfl_criterion_by_hand():
    u = np.array([[3.0, 4.0], [-3.0, -4.0]])  # norms 5 and 5, mean 0
    split, mean_norm, max_norm = cfl_should_split(u, [1, 1], eps1=0.1, eps2=4.0)
    assert split and mean_norm == pytest.approx(0.0) and max_norm == pytest.approx(5.0)
    assert not cfl_should_split(u, [1, 1], eps1=0.1, eps2=6.0)[0]  # no update large enough
    same = np.array([[3.0, 4.0], [3.0, 4.0]])
    assert not cfl_should_split(same, [1, 1], eps1=0.1, eps2=4.0)[0]  # the mean is not small
    assert cfl_should_split(same, [1, 3], eps1=6.0, eps2=4.0)[1] == pytest.approx(5.0)


def test_cfl_bipartition_finds_two_opposed_groups():
    rng = np.random.default_rng(0)
    direction = rng.normal(size=50)
    group_a = direction + 0.3 * rng.normal(size=(4, 50))
    group_b = -direction + 0.3 * rng.normal(size=(3, 50))
    updates = np.concatenate([group_b[:1], group_a, group_b[1:]])  # b at rows 0, 5, 6
    a, b, cross = cfl_bipartition(updates)
    assert sorted(a.tolist()) == [1, 2, 3, 4] and sorted(b.tolist()) == [0, 5, 6]
    assert cross < 0  # the two sides point away from each other


# -- candidates ----------------------------------------------------------------------------------
def test_candidate_records_round_trip():
    recs = [state_to_record(state(float(i))) for i in range(3)]
    layout = payload_records(recs)
    assert list(layout) == ["arrays", "candidate-1", "candidate-2"]
    got, others = split_candidates({**layout, "control": recs[0]})
    assert [record_to_state(r)["w"][0] for r in got] == [0.0, 1.0, 2.0]
    assert list(others) == ["control"]
    with pytest.raises(ValueError, match="do not run"):
        split_candidates({"arrays": recs[0], "candidate-2": recs[1]})


def test_lowest_loss_is_the_argmin_of_the_losses_it_reports():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    x = np.random.default_rng(0).normal(size=(12, 1, 2, 2)).astype(np.float32)
    y = np.arange(12) % 3
    states = []
    for scale in (0.0, 5.0, -5.0):
        st = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        st["1.bias"] = np.array([scale, 0, -scale], dtype=np.float32)
        states.append(st)
    best, losses = lowest_loss(model, states, x, y)
    assert best == int(np.argmin(losses))
    assert model.state_dict()["1.bias"].tolist() == states[best]["1.bias"].tolist()
    for st, loss in zip(states, losses, strict=True):
        model.load_state_dict({k: torch.as_tensor(v) for k, v in st.items()})
        assert evaluate_model(model, x, y)["loss"] == pytest.approx(loss)


def test_cnn_candidates_scored_in_one_pass_choose_as_one_model_at_a_time():
    """IFCA's scoring (one data check, the CNN's eval forward, one model after another) picks
    the same candidate as evaluating each candidate alone through the layers' written order."""
    from ripple_flwr.training.loops import evaluate_states
    from ripple_flwr.training.models import build_model, get_state

    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    torch.manual_seed(1)
    model = build_model("cnn", (1, 28, 28), 10)
    states = [get_state(build_model("cnn", (1, 28, 28), 10)) for _ in range(6)]
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    model.eval()
    by_hand = []
    with torch.inference_mode():
        for st in states:
            model.load_state_dict({k: torch.as_tensor(v) for k, v in st.items()})
            logits = model.classifier(model.features(xt))
            by_hand.append(float(torch.nn.functional.cross_entropy(logits, yt)))
    best, losses = lowest_loss(model, states, x, y)
    assert best == int(np.argmin(by_hand))
    np.testing.assert_allclose(losses, by_hand, rtol=1e-5)
    accs = [r["accuracy"] for r in evaluate_states(model, [None, *states], x, y)]
    assert accs[0] == accs[1 + best]  # None scores the model as it is: the chosen state


def test_the_real_client_chooses_on_its_training_split(tmp_path):
    """handle_train: the chosen candidate is the argmin of the training-split losses."""
    from ripple_flwr.app.client.work import choose_candidate
    from ripple_flwr.data.cache import cached_federation
    from ripple_flwr.training.models import build_model, get_state, set_state

    cfg = tiny_run_config(tmp_path, method="ifca")
    settings = parse_run_config(cfg)
    fed = cached_federation(settings)
    models = []
    for seed in range(3):
        torch.manual_seed(seed)
        models.append(get_state(build_model("cnn", fed.dataset.image_shape, 10)))
    _, choice = choose_candidate(settings, 1, models)
    x, y, _, _ = fed.client_data(1)
    net = build_model("cnn", fed.dataset.image_shape, 10)
    losses = []
    for m in models:
        set_state(net, m)
        losses.append(evaluate_model(net, x, y)["loss"])
    assert choice["candidate-losses"] == pytest.approx(losses)
    assert choice["chosen"] == int(np.argmin(losses))


# -- the strategies on the in-process grid -------------------------------------------------------
TARGET = {0: 0.0, 1: 100.0, 2: 0.0, 3: 100.0}  # the weight each client's data "wants"


class Clients:
    """A ClientApp stand-in: train-split loss |w0 - TARGET[pid]|, training adds pid + 1."""

    def __init__(self) -> None:
        self.received: dict[tuple[str, int], list[int]] = {}

    def __call__(self, msg: Message, context) -> Message:
        pid = int(context.node_config["partition-id"])
        kind = msg.metadata.message_type.split(".")[0]
        if kind == "query":
            info = ConfigRecord(
                {
                    "partition-id": pid,
                    "num-partitions": int(context.node_config["num-partitions"]),
                    "num-examples": 10 * (pid + 1),
                }
            )
            return Message(RecordDict({"info": info}), reply_to=msg)
        candidates, _ = split_candidates(msg.content.array_records)
        states = [record_to_state(r) for r in candidates]
        self.received.setdefault((kind, pid), []).append(len(states))
        losses = [abs(float(s["w"][0]) - TARGET.get(pid, 0.0)) for s in states]
        chosen = int(np.argmin(losses))
        if kind == "train":
            got = states[chosen]
            new = {"w": got["w"] + np.float32(pid + 1), "n": got["n"] + 1}
            metrics = MetricRecord({"num-examples": 10 * (pid + 1), "train_loss": 1.0})
            if len(states) > 1:
                metrics["chosen"] = chosen
            return Message(
                RecordDict({"arrays": state_to_record(new), "metrics": metrics}), reply_to=msg
            )
        metrics = MetricRecord({"loss": losses[chosen], "accuracy": 0.5, "num-examples": 10})
        if len(states) > 1:
            metrics["chosen"] = chosen
        return Message(RecordDict({"metrics": metrics}), reply_to=msg)


def run_method(method: str, rounds: int = 1, app=None, models=None, **over):
    cfg = {
        "method": method,
        "num-partitions": 4,
        "clients-per-round": 4,
        "num-components": 2,
        "round-timeout": 2.0,
        "update-norm-factor": 0.0,
        **over,
    }
    settings = parse_run_config(cfg)
    models = models or [state(10.0), state(90.0)]
    inputs = MethodInputs(settings, models[0], fresh_state=lambda i: models[i])
    strategy = make_engine(get_method(method), inputs)
    app = app or Clients()
    grid = FakeGrid(cfg, num_nodes=4 + settings.data.new_clients, app=app)
    strategy.start(grid, state_to_record(models[0]), num_rounds=rounds)
    return strategy, grid, app


def test_ifca_choices_and_per_cluster_means_by_hand():
    strategy, _, clients = run_method("ifca")
    # Clients 0, 2 want 0 -> model 0 (w0 = 10); clients 1, 3 want 100 -> model 1 (w0 = 90).
    assert strategy.method.assignment.tolist() == [0, 1, 0, 1]
    # Model 0: clients 0 (10 examples, +1) and 2 (30 examples, +3): (10*11 + 30*13) / 40.
    assert strategy.method.models[0]["w"][0] == pytest.approx((10 * 11 + 30 * 13) / 40)
    assert strategy.method.models[1]["w"][0] == pytest.approx((20 * 92 + 40 * 94) / 60)
    assert strategy.method.models[0]["w"][1] == pytest.approx((10 * 2 + 30 * 4) / 40)
    # Every training and evaluation message carried both models; no re-draw by default.
    assert clients.received[("train", 0)] == [2] and clients.received[("evaluate", 3)] == [2]
    assert strategy.run_record()["assignment"]["init_draws"] == []


def test_ifca_download_is_k_models_per_client():
    strategy, _, _ = run_method("ifca")
    model_bytes = arrayrecord_nbytes(state_to_record(state(0.0)))
    rec = strategy.ledger.rounds[0]
    assert rec.bytes_down == 4 * 2 * model_bytes  # 4 clients x K = 2 models
    assert rec.bytes_up == 4 * model_bytes


def test_ifca_drops_a_reply_that_names_no_valid_model():
    class Liar(Clients):
        def __call__(self, msg, context):
            reply = super().__call__(msg, context)
            if (
                msg.metadata.message_type == "train"
                and int(context.node_config["partition-id"]) == 1
            ):
                reply.content.metric_records["metrics"]["chosen"] = 7
            return reply

    strategy, _, _ = run_method("ifca", app=Liar())
    (dropped,) = strategy.ledger.rounds[0].dropped
    assert dropped.partition == 1 and "chosen=7" in dropped.reason
    assert strategy.method.models[1]["w"][0] == pytest.approx(94.0)  # client 3 alone


def test_kmeans_lloyd_by_hand():
    points = np.array([[0.0, 0.0], [1.0, 0.0], [10.0, 0.0], [11.0, 0.0]])
    centroids, labels = kmeans_lloyd(points, np.array([[0.0, 0.0], [1.0, 0.0]]), iters=1)
    # One iteration: E-step {0} vs {1, 10, 11}, M-step (0, 0) and (22/3, 0), labels by those.
    np.testing.assert_allclose(centroids, [[0.0, 0.0], [22 / 3, 0.0]])
    assert labels.tolist() == [0, 0, 1, 1]
    # Zero iterations: nearest centroid, centroids unchanged.
    same, nearest = kmeans_lloyd(points, np.array([[0.0, 0.0], [10.0, 0.0]]), iters=0)
    assert nearest.tolist() == [0, 0, 1, 1] and same.tolist() == [[0.0, 0.0], [10.0, 0.0]]


def test_fesem_centres_start_from_one_initialisation():
    """The authors copy one initial model into every centre (distinct models are IFCA's)."""
    strategy, _, _ = run_method("fesem", rounds=0)
    assert len(strategy.method.models) == 2
    assert (
        strategy.method.models[0]["w"].tolist()
        == strategy.method.models[1]["w"].tolist()
        == [10.0, 1, -1]
    )
    # Cold start: a seeded random partition from K-means over uniform(-0.01, 0.01) points.
    assert np.abs(strategy.method.latest).max() <= 0.01 and not strategy.method.has_latest.any()
    again, _, _ = run_method("fesem", rounds=0)
    assert again.method.assignment.tolist() == strategy.method.assignment.tolist()


def test_fesem_kmeans_moves_clients_between_centres_when_their_models_separate():
    strategy, _, _ = run_method("fesem", rounds=0)
    strategy.method.assignment = np.array([0, 0, 1, 1])
    strategy.method.centroids = np.array([[0.0, 1.0, -1.0], [100.0, 1.0, -1.0]])
    # Clients 1 and 2 trained towards the other centroid's members.
    strategy.method.latest = flatten([state(5.0), state(95.0), state(3.0), state(97.0)], ["w"])
    strategy.method.reassign(10)
    assert strategy.method.assignment.tolist() == [0, 1, 0, 1]
    assert strategy.method.events[-1] == {"round": 10, "reassigned": 2, "sizes": [2, 2]}
    # The distance is to the members' mean (the centroid), not to the centre models.
    np.testing.assert_allclose(strategy.method.centroids[:, 0], [4.0, 96.0])


def test_fesem_kmeans_iters_zero_runs_the_reassignment_to_convergence():
    strategy, _, _ = run_method("fesem", rounds=0, **{"fesem-kmeans-iters": 0})
    strategy.method.centroids = np.array([[0.0, 1.0, -1.0], [1.0, 1.0, -1.0]])
    strategy.method.latest = flatten([state(w) for w in (0.0, 1.0, 10.0, 11.0)], ["w"])
    strategy.method.reassign(10)
    # Converged: centroids 0.5 and 10.5. One iteration (the authors') stops at 0 and 22/3.
    assert strategy.method.assignment.tolist() == [0, 0, 1, 1]
    np.testing.assert_allclose(strategy.method.centroids[:, 0], [0.5, 10.5])
    one, _, _ = run_method("fesem", rounds=0)
    one.method.centroids = np.array([[0.0, 1.0, -1.0], [1.0, 1.0, -1.0]])
    one.method.latest = strategy.method.latest.copy()
    one.method.reassign(10)
    np.testing.assert_allclose(one.method.centroids[:, 0], [0.0, 22 / 3])


def test_fesem_per_cluster_sampling_draws_inside_each_cluster_and_skips_singletons():
    """The authors train up to clients-per-round members of every cluster of 2+ clients."""
    strategy, _, _ = run_method(
        "fesem", rounds=0, **{"fesem-sampling": "per-cluster", "clients-per-round": 1}
    )
    strategy.method.assignment = np.array([0, 0, 1, 1])
    for r in range(1, 21):
        rows = strategy.sample_rows(r)
        assert len(rows) == 2 and rows[0] in (0, 1) and rows[1] in (2, 3)
    strategy.method.assignment = np.array([1, 1, 1, 0])  # client 3 alone: its cluster is skipped
    drawn = {int(r) for n in range(40) for r in strategy.sample_rows(n)}
    assert drawn == {0, 1, 2}
    three, _, _ = run_method(
        "fesem", rounds=0, **{"fesem-sampling": "per-cluster", "clients-per-round": 3}
    )
    three.assignment = np.array([0, 0, 1, 1])  # min(cpr, members): both of each, 4 > cpr
    assert three.sample_rows(1).tolist() == [0, 1, 2, 3]
    # The default draws clients-per-round from the whole federation, whatever the clusters.
    plain, _, _ = run_method("fesem", rounds=0, **{"clients-per-round": 1})
    plain.assignment = np.array([0, 0, 1, 1])
    assert all(len(plain.sample_rows(r)) == 1 for r in range(1, 11))


def test_fesem_per_cluster_rounds_train_every_clusters_draw():
    strategy, _, _ = run_method(
        "fesem", rounds=2, **{"fesem-sampling": "per-cluster", "clients-per-round": 1}
    )
    sizes = np.bincount(strategy.method.assignment, minlength=2)
    expect = sum(1 for s in sizes if s >= 2) or 1
    assert [len(r.sampled) for r in strategy.ledger.rounds] == [expect, expect]


class Towards(Clients):
    """Training moves w0 half-way to what the client's data wants (+40 or -40)."""

    WANTS = {0: 40.0, 1: -40.0, 2: 40.0, 3: -40.0}

    def __call__(self, msg: Message, context) -> Message:
        reply = super().__call__(msg, context)
        if msg.metadata.message_type.startswith("train"):
            pid = int(context.node_config["partition-id"])
            got = record_to_state(msg.content.array_records["arrays"])
            w = got["w"].copy()
            w[0] += np.float32(0.5 * (self.WANTS[pid] - w[0]))
            reply.content.array_records["arrays"] = state_to_record({"w": w, "n": got["n"] + 1})
        return reply


def test_fesem_leaves_its_cold_start_when_clients_pull_apart():
    """From one initialisation and a random partition, K-means finds {0, 2} and {1, 3}."""
    strategy, _, _ = run_method(
        "fesem", rounds=8, app=Towards(), **{"fesem-update-every": 1}, **{"num-server-rounds": 8}
    )
    labels = strategy.method.current_assignment().tolist()
    assert labels[0] == labels[2] != labels[1] == labels[3]
    assert any(e.get("reassigned") for e in strategy.method.events)
    # Each centre ends near what its members want.
    centres = sorted(float(m["w"][0]) for m in strategy.method.models)
    assert centres[0] < -20 and centres[1] > 20


def test_fesem_update_points_are_the_returned_model_minus_the_centre_sent():
    strategy, _, _ = run_method("fesem", rounds=1, **{"fesem-points": "update"})
    # Every client trained from a copy of the one initial model and added pid + 1 to each weight.
    np.testing.assert_allclose(
        strategy.method.latest, np.repeat([[1.0], [2.0], [3.0], [4.0]], 3, 1)
    )


def test_fesem_centre_is_the_mean_of_its_members_models():
    strategy, _, _ = run_method("fesem", rounds=1)
    sent = dict(strategy.method._sent_from)  # row -> the (cold-start) centre it trained from
    for c, model in enumerate(strategy.method.models):
        members = [r for r, k in sent.items() if k == c]
        if not members:
            continue
        n = [10 * (r + 1) for r in members]
        expect = sum(ni * (10.0 + r + 1) for ni, r in zip(n, members, strict=True)) / sum(n)
        assert model["w"][0] == pytest.approx(expect)
    # Each client's point is its returned model's clustered layer.
    np.testing.assert_allclose(strategy.method.latest[:, 0], [11.0, 12.0, 13.0, 14.0])


class Opposed(Clients):
    """Clients 0, 1 move +u, clients 2, 3 move -u (opposed), or all +u when ``agree``."""

    def __init__(self, agree: bool = False) -> None:
        super().__init__()
        self.agree = agree

    def __call__(self, msg, context):
        pid = int(context.node_config["partition-id"])
        if msg.metadata.message_type != "train":
            return super().__call__(msg, context)
        got = record_to_state(msg.content.array_records["arrays"])
        sign = 1.0 if (self.agree or pid < 2) else -1.0
        u = np.array([3.0, 4.0, 0.0], dtype=np.float32) * sign * (1 + 0.1 * pid)
        new = {"w": got["w"] + u, "n": got["n"] + 1}
        metrics = MetricRecord({"num-examples": 10 * (pid + 1), "train_loss": 1.0})
        return Message(
            RecordDict({"arrays": state_to_record(new), "metrics": metrics}), reply_to=msg
        )


def test_cfl_splits_two_opposed_groups_after_the_warmup():
    # Warm-up fraction 1 of a 2-round run: round 2 is the first that may split.
    keys = {"cfl-warmup-fraction": 1.0, "cfl-eps1": 3.0, "cfl-eps2": 4.0}
    strategy, _, _ = run_method("cfl", rounds=2, app=Opposed(), **keys)
    # The criterion held in round 1 already; only the warm-up kept the cluster whole.
    assert strategy.method.criterion[0][:2] == [1, 0]
    assert strategy.method.criterion[0][2] < 3.0 and strategy.method.criterion[0][3] > 4.0
    assert strategy.num_models == 2
    assert strategy.method.assignment.tolist() == [
        1,
        1,
        0,
        0,
    ] or strategy.method.assignment.tolist() == [
        0,
        0,
        1,
        1,
    ]
    (event,) = strategy.method.events
    assert event["round"] == 2 and event["max_norm"] > 4.0 and event["mean_norm"] < 3.0
    assert event["accepted"] and event["cross_similarity_max"] < 0.5
    rec = strategy.method.assignment_record()
    assert rec["sizes"] == [2, 2] and rec["num_models"] == 2


def test_cfl_does_not_split_when_the_criterion_does_not_hold():
    keys = {"cfl-warmup-fraction": 0.0, "cfl-eps1": 2.0, "cfl-eps2": 4.0}
    strategy, _, _ = run_method("cfl", rounds=3, app=Opposed(agree=True), **keys)
    assert strategy.num_models == 1 and not strategy.method.events
    # The criterion is recorded every round (one cluster, four replies): eps can be read off.
    assert [row[:2] for row in strategy.method.criterion] == [[1, 0], [2, 0], [3, 0]]
    assert all(row[2] > 2.0 for row in strategy.method.criterion)  # the mean did not stall
    # Opposed updates but no single one above eps2: no split either.
    strategy, _, _ = run_method("cfl", rounds=3, app=Opposed(), **{**keys, "cfl-eps2": 50.0})
    assert strategy.num_models == 1


def test_cfl_stops_at_max_clusters():
    keys = {"cfl-warmup-fraction": 0.0, "cfl-eps1": 3.0, "cfl-eps2": 4.0}
    # The same run splits when it may (the precondition holds) ...
    free, _, _ = run_method("cfl", rounds=2, app=Opposed(), **keys, **{"cfl-max-clusters": 2})
    assert free.num_models == 2 and free.method.events
    # ... and with the cap at one cluster it does not, though the criterion says split.
    capped, _, _ = run_method("cfl", rounds=2, app=Opposed(), **keys, **{"cfl-max-clusters": 1})
    assert capped.num_models == 1 and not capped.method.events
    assert any(row[2] < 3.0 and row[3] > 4.0 for row in capped.method.criterion)


def test_new_clients_choose_a_cluster_model_on_their_training_split():
    strategy, grid, clients = run_method("ifca", rounds=1, **{"new-clients": 1})
    rec = onboard_new_clients(strategy, grid)
    (got,) = rec["per_client"]
    assert got["chosen"] == 0  # pid 4 wants w0 = 0: model 0 is nearest
    assert clients.received[("evaluate", 4)] == [2]
    assert "best_by_loss" not in rec  # the choice itself is the train-split pick


@pytest.mark.parametrize(
    "key, value",
    [
        ("cfl-warmup-fraction", -0.1),
        ("cfl-warmup-fraction", 1.5),
        ("cfl-eps1", 0.0),
        ("cfl-eps2", -1.0),
        ("cfl-max-similarity", 1.5),
        ("cfl-max-clusters", 0),
        ("ifca-init-balance", 1.2),
        ("ifca-init-draws", 0),
    ],
)
def test_bad_cfl_and_ifca_settings_are_refused(key, value):
    method = key.split("-")[0]
    with pytest.raises(ConfigError, match=key):
        parse_run_config({"method": method, key: value}).validate()
