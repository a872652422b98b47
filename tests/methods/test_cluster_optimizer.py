"""``cluster-optimizer``: Flower's server optimiser per cluster model (Ripple, and the clustered
baselines whose spec declares it: IFCA, FeSEM, PACFL, CFL).

Each cluster's step must be exactly the step Flower's own class takes from that cluster's
model on that cluster's mean update; a cluster without mass in a round is not stepped; the
option refuses unknown values in one line, and methods that do not declare it refuse it;
CFL's split gives both sides the parent's moments.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedYogi

from ripple_flwr.aggregation.clustering import cluster_means
from ripple_flwr.app.protocol.records import record_to_state, state_to_record
from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.app.server.bases.cluster_optimizer import (
    OPTIMIZERS,
    ClusterOptimizer,
    optimizer_kwargs,
)
from ripple_flwr.app.server.bases.clustered import ClusterModels
from ripple_flwr.app.server.bases.flower import flower_kwargs
from ripple_flwr.app.server.replies.validation import Accepted
from ripple_flwr.app.server.resume.plain import from_plain, to_plain
from ripple_flwr.app.server.roster.query import QueryResult
from ripple_flwr.app.server.setup import make_engine
from ripple_flwr.experiments.compose import applied
from ripple_flwr.methods.options import CLUSTER_OPTIMIZER
from ripple_flwr.methods.registry import METHODS, MethodInputs
from ripple_flwr.settings import ConfigError

# Every optimiser's keys; each run keeps those its optimiser reads (a run refuses the others).
CFG = {
    "num-partitions": 6,
    "clients-per-round": 3,
    "fedopt-eta": 0.05,
    "server-lr": 0.7,
    "fedavgm-momentum": 0.5,
}


class OneNode:
    """All Flower's ``configure_train`` asks of a grid here: which nodes there are."""

    def get_node_ids(self) -> list[int]:
        return [1]


def model(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "w": rng.normal(size=(3, 4)).astype(np.float32),
        "b": rng.normal(size=4).astype(np.float32),
    }


def reply(state: dict[str, np.ndarray], examples: int = 5) -> Message:
    content = RecordDict(
        {"arrays": state_to_record(state), "metrics": MetricRecord({"num-examples": examples})}
    )
    return Message(content, dst_node_id=1, message_type="train")


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_each_cluster_steps_as_flowers_class_on_its_mean_update(name):
    settings = parse_run_config(applied({**CFG, "cluster-optimizer": name}, CFG)[0])
    grid = OneNode()
    rng = np.random.default_rng(0)
    start = [model(rng), model(rng)]
    ours = ClusterOptimizer(name, 2, settings)
    flower_class, _ = OPTIMIZERS[name]
    kwargs = {**flower_kwargs(settings), **optimizer_kwargs(name, settings)}
    reference = flower_class(**kwargs)  # Flower's class on cluster 0 alone
    stacked = {k: np.stack([m[k] for m in start]) for k in start[0]}
    ref_arrays = state_to_record(start[0])
    for rnd in range(1, 4):
        # Three clients return models near cluster 0's; none weights cluster 1 this round.
        noise = {k: rng.normal(scale=0.1, size=(3, *v.shape[1:])) for k, v in stacked.items()}
        returned = [
            {k: (stacked[k][0] + noise[k][i]).astype(np.float32) for k in stacked} for i in range(3)
        ]
        target = {k: stacked[k].copy() for k in stacked}
        for k in stacked:
            target[k][0] = np.mean([r[k] for r in returned], axis=0)
        new = ours.step(rnd, stacked, target, np.array([3.0, 0.0]))

        list(reference.configure_train(rnd, ref_arrays, ConfigRecord(), grid))
        ref_arrays, _ = reference.aggregate_train(rnd, [reply(r) for r in returned])
        want = record_to_state(ref_arrays)
        ref_arrays = state_to_record({k: v.astype(np.float32) for k, v in want.items()})
        for k in stacked:
            assert new[k].dtype == np.float32
            np.testing.assert_allclose(new[k][0], want[k], rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(new[k][1], stacked[k][1])  # no mass: no step
        stacked = new
    assert not np.allclose(stacked["w"][0], start[0]["w"])  # it moved


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_its_saved_state_restores_the_same_next_step(name):
    settings = parse_run_config(applied({**CFG, "cluster-optimizer": name}, CFG)[0])
    rng = np.random.default_rng(1)
    start = {k: np.stack([v, v + 1]) for k, v in model(rng).items()}
    target = {k: v + 0.3 for k, v in start.items()}
    first = ClusterOptimizer(name, 2, settings)
    after_one = first.step(1, start, target, np.ones(2))
    again = ClusterOptimizer(name, 2, settings)
    again.restore(first.state())
    step_two = {k: v - 0.1 for k, v in after_one.items()}
    a = first.step(2, after_one, step_two, np.ones(2))
    b = again.step(2, after_one, step_two, np.ones(2))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    with pytest.raises(ValueError, match="same num-components"):
        ClusterOptimizer(name, 3, settings).restore(first.state())


def test_an_unknown_optimiser_is_refused_in_one_line():
    with pytest.raises(ConfigError) as err:
        parse_run_config({"cluster-optimizer": "adam"})
    text = str(err.value)
    assert "cluster-optimizer" in text and "fedyogi" in text and "\n" not in text
    assert parse_run_config({}).option("cluster-optimizer") == "none"  # the paper's rule


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_every_cluster_equals_its_own_flower_object_through_rounds_without_updates(name):
    """Vectorised over K = 3 clusters, each steps as its own Flower object would, also after
    a round in which it got no update (its moments wait), and from a state Flower's
    objects saved (an older checkpoint)."""
    settings = parse_run_config(applied({**CFG, "cluster-optimizer": name}, CFG)[0])
    grid = OneNode()
    rng = np.random.default_rng(3)
    start = [model(rng) for _ in range(3)]
    flower_class, fields = OPTIMIZERS[name]
    kwargs = {**flower_kwargs(settings), **optimizer_kwargs(name, settings)}
    refs = [flower_class(**kwargs) for _ in range(3)]
    ref_models = [dict(m) for m in start]
    ours = ClusterOptimizer(name, 3, settings)
    stacked = {k: np.stack([m[k] for m in start]) for k in start[0]}
    masses = ([2.0, 0.0, 1.0], [0.0, 3.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [2.0, 0.0, 2.0])
    for rnd, mass in enumerate(masses, start=1):
        target = {k: (v + rng.normal(scale=0.05, size=v.shape)).astype(np.float32)
                  for k, v in stacked.items()}  # fmt: skip
        if rnd == 3:  # from here on, a fresh optimiser continues from Flower's saved objects
            ours = ClusterOptimizer(name, 3, settings)
            ours.restore([{f: getattr(r, f) for f in fields} for r in refs])
        new = ours.step(rnd, stacked, target, np.array(mass))
        for c, ref in enumerate(refs):
            if mass[c] > 0:
                list(ref.configure_train(rnd, state_to_record(ref_models[c]), ConfigRecord(), grid))
                arrays, _ = ref.aggregate_train(rnd, [reply({k: target[k][c] for k in target})])
                ref_models[c] = {
                    k: v.astype(np.float32) for k, v in record_to_state(arrays).items()
                }
            for k in stacked:
                np.testing.assert_allclose(new[k][c], ref_models[c][k], rtol=1e-6, atol=1e-6)
        stacked = new


# -- the clustered baselines that take it (IFCA, FeSEM, PACFL, CFL) ---------------------------
def takes_it(name: str) -> bool:
    spec = METHODS[name]
    return CLUSTER_OPTIMIZER in spec.options and issubclass(spec.method_class, ClusterModels)


# Every method whose spec declares cluster-optimizer and keeps hard clusters (not Ripple's).
CLUSTERED = [name for name in METHODS if takes_it(name)]


def clustered_method(name: str, optimizer: str, k: int = 3, seed: int = 0) -> ClusterModels:
    """``name``'s method with K = ``k`` distinct cluster models (its own setup left out:
    :meth:`ClusterModels.average_into_clusters` is the step under test)."""
    cfg = {**CFG, "method": name, "num-components": k}
    if optimizer != "none":
        cfg["cluster-optimizer"] = optimizer
    settings = parse_run_config(applied(cfg, CFG)[0])
    start = [model(np.random.default_rng(seed + c)) for c in range(k)]
    inputs = MethodInputs(
        settings,
        start[0],
        fresh_state=lambda i: start[i % k],
        image_shape=(1, 2, 2),
        num_classes=2,
    )
    method = METHODS[name].make(inputs)
    method.set_models(start)
    method.run = SimpleNamespace(clients=SimpleNamespace(partition_ids=[]), num_rounds=5)
    width = method.vector_size() if method.keeps_latest else 0  # no clients: no points
    method.latest = np.zeros((0, width), dtype=np.float32)
    return method


def replies(rng, models, members: list[int]) -> tuple[list[Accepted], list[int]]:
    """``members[c]`` clients of cluster ``c``, each returning its model plus noise."""
    accepted, labels, row = [], [], 0
    for c, count in enumerate(members):
        for _ in range(count):
            state = {k: (v + rng.normal(scale=0.1, size=v.shape)).astype(v.dtype)
                     for k, v in models[c].items()}  # fmt: skip
            n = int(rng.integers(1, 20))
            accepted.append(Accepted(row, state, n, 1.0, None))
            labels.append(c)
            row += 1
    return accepted, labels


def test_the_clustered_methods_that_take_it_are_found_from_their_specs():
    assert {"ifca", "fesem", "pacfl", "cfl"} <= set(CLUSTERED)
    assert not {"flux", "fedgwc", "fedavg"} & set(CLUSTERED)


@pytest.mark.parametrize("name", METHODS)
def test_a_method_whose_spec_does_not_declare_it_refuses_it(name):
    cfg = {"method": name, "cluster-optimizer": "fedyogi"}
    if CLUSTER_OPTIMIZER in METHODS[name].options:
        assert parse_run_config(cfg).option("cluster-optimizer") == "fedyogi"
    else:
        with pytest.raises(ConfigError, match="cluster-optimizer='fedyogi' is read only by"):
            parse_run_config(cfg)


@pytest.mark.parametrize("name", CLUSTERED)
def test_each_cluster_model_steps_as_its_own_flower_fedyogi_on_its_members_replies(name):
    """K = 3 cluster models through five rounds, some without a member: each equals one
    Flower FedYogi object per cluster handed that cluster's replies (their example-weighted
    mean), and a cluster without members keeps its model and its moments."""
    method = clustered_method(name, "fedyogi")
    settings = method.settings
    grid = OneNode()
    rng = np.random.default_rng(5)
    kwargs = {**flower_kwargs(settings), **optimizer_kwargs("fedyogi", settings)}
    refs = [FedYogi(**kwargs) for _ in range(3)]
    ref_models = [dict(m) for m in method.models]
    for rnd, members in enumerate(([2, 0, 1], [0, 3, 0], [1, 2, 2], [0, 0, 1], [3, 0, 2]), 1):
        before = [dict(m) for m in method.models]
        accepted, labels = replies(rng, before, members)
        kept = method.average_into_clusters(rnd, accepted, labels)
        assert kept == [c for c, n in enumerate(members) if n]
        for c, ref in enumerate(refs):
            if members[c]:
                mine = [a for a, lab in zip(accepted, labels, strict=True) if lab == c]
                list(ref.configure_train(rnd, state_to_record(ref_models[c]), ConfigRecord(), grid))
                arrays, _ = ref.aggregate_train(rnd, [reply(a.state, a.num_examples) for a in mine])
                ref_models[c] = {
                    k: v.astype(np.float32) for k, v in record_to_state(arrays).items()
                }
            else:
                for k in before[c]:
                    np.testing.assert_array_equal(method.models[c][k], before[c][k])
            for k in ref_models[c]:
                assert method.models[c][k].dtype == np.float32
                np.testing.assert_allclose(
                    method.models[c][k], ref_models[c][k], rtol=1e-6, atol=1e-6
                )
    record = method.run_record({})["cluster_optimizer"]
    assert record["name"] == "fedyogi" and record["server_seconds"] > 0


@pytest.mark.parametrize("name", CLUSTERED)
def test_the_default_is_the_members_mean_bit_for_bit(name):
    method = clustered_method(name, "none")
    rng = np.random.default_rng(2)
    for rnd, members in enumerate(([2, 0, 1], [1, 3, 0]), 1):
        before = list(method.models)
        accepted, labels = replies(rng, before, members)
        want, _ = cluster_means(before, [a.state for a in accepted], labels,
                                [a.num_examples for a in accepted])  # fmt: skip
        method.average_into_clusters(rnd, accepted, labels)
        for c in range(3):
            for k in want[c]:
                np.testing.assert_array_equal(method.models[c][k], want[c][k])
    assert method.optimizer is None and "cluster_optimizer" not in method.run_record({})
    assert method.cluster_steps == {"name": "none", "clusters": []}


@pytest.mark.parametrize("name", CLUSTERED)
def test_its_state_resumes_with_the_method_and_refuses_another_setting(name):
    first = clustered_method(name, "fedyogi")
    rng = np.random.default_rng(9)
    for rnd, members in enumerate(([2, 0, 1], [1, 2, 0]), 1):
        first.average_into_clusters(rnd, *replies(rng, first.models, members))
    saved = from_plain(to_plain("state", first.state()))
    again = clustered_method(name, "fedyogi", seed=50)  # other models: the saved ones win
    again.restore(saved)
    accepted, labels = replies(rng, first.models, [1, 1, 1])
    first.average_into_clusters(3, accepted, labels)
    again.average_into_clusters(3, accepted, labels)
    for c in range(3):
        for k in first.models[c]:
            np.testing.assert_array_equal(again.models[c][k], first.models[c][k])
    for other in ("none", "fedadam"):
        with pytest.raises(ValueError, match=f"cluster-optimizer = fedyogi, this run with {other}"):
            clustered_method(name, other).restore(saved)
    fewer = {
        **saved,
        "cluster_steps": {
            **saved["cluster_steps"],
            "clusters": saved["cluster_steps"]["clusters"][:2],
        },
    }
    with pytest.raises(ValueError, match="state has 2 clusters, the saved models 3"):
        clustered_method(name, "fedyogi").restore(fewer)


def test_cfl_split_sides_both_keep_the_parents_moments():
    """CFL's rule: a split's two sides start from the parent's model and its FedYogi
    moments; each then steps as a copy of the parent's Flower object on its own members."""
    sent = model(np.random.default_rng(0))
    cfg = {
        "method": "cfl",
        "num-partitions": 6,
        "clients-per-round": 6,
        "num-server-rounds": 10,
        "cfl-warmup-fraction": 0.0,
        "cfl-eps1": 1.0,
        "cfl-eps2": 0.5,
        "update-norm-factor": 0.0,
        "cluster-optimizer": "fedyogi",
        "fedopt-eta": 0.05,
    }
    settings = parse_run_config(cfg)
    engine = make_engine(METHODS["cfl"], MethodInputs(settings, sent))
    engine.roster.clients = QueryResult(list(range(6)), list(range(6)), [10] * 6, None)
    method = engine.method
    method.setup(engine.clients)
    grid = OneNode()
    ref = FedYogi(**{**flower_kwargs(settings), **optimizer_kwargs("fedyogi", settings)})
    direction = {k: np.ones_like(v) for k, v in sent.items()}

    def play(rnd: int, signs: list[float]) -> list[Accepted]:
        rows = np.arange(6)
        method.train_payloads(rows, None)
        return [
            Accepted(int(r), {k: (method.models[method._sent_from[int(r)]][k]
                                  + signs[r] * direction[k]).astype(np.float32) for k in sent},
                     10, 1.0, None)
            for r in rows
        ]  # fmt: skip

    # Round 1: everyone agrees (the mean update is large): no split, one Flower step.
    accepted = play(1, [1.0] * 6)
    method.aggregate(1, accepted)
    assert method.num_models == 1
    list(ref.configure_train(1, state_to_record(sent), ConfigRecord(), grid))
    arrays, _ = ref.aggregate_train(1, [reply(a.state, 10) for a in accepted])
    parent = {k: v.astype(np.float32) for k, v in record_to_state(arrays).items()}
    # Round 2: rows 3-5 move the other way: CFL splits; each side steps from the parent.
    accepted = play(2, [1.0, 1.1, 0.9, -1.0, -1.2, -0.8])
    method.aggregate(2, accepted)
    assert method.num_models == 2 and method.assignment.tolist() == [0, 0, 0, 1, 1, 1]
    sides = [ref, copy.deepcopy(ref)]
    for c, rows in ((0, [0, 1, 2]), (1, [3, 4, 5])):
        list(sides[c].configure_train(2, state_to_record(parent), ConfigRecord(), grid))
        arrays, _ = sides[c].aggregate_train(2, [reply(accepted[r].state, 10) for r in rows])
        for k, v in record_to_state(arrays).items():
            np.testing.assert_allclose(
                method.models[c][k], v.astype(np.float32), rtol=1e-6, atol=1e-6
            )
    assert method.optimizer.k == 2 and method.optimizer.started.all()


@pytest.mark.parametrize("name", CLUSTERED)
def test_a_refused_mean_moves_neither_its_cluster_nor_its_moments(name):
    """A cluster whose members' mean grows more than 10x is refused before the optimiser:
    its model and its FedYogi moments stay as they were, the other clusters step."""
    method = clustered_method(name, "fedyogi")
    rng = np.random.default_rng(3)
    method.average_into_clusters(1, *replies(rng, method.models, [1, 1, 1]))
    moments = [dict(c) for c in method.optimizer.state()]
    before = [dict(m) for m in method.models]
    accepted, labels = replies(rng, before, [1, 1, 1])
    huge = {k: v * 1000 for k, v in accepted[1].state.items()}  # cluster 1's only member
    accepted[1] = Accepted(accepted[1].row, huge, accepted[1].num_examples, 1.0, None)
    assert method.average_into_clusters(2, accepted, labels) == [0, 2]
    assert method.events[-1]["refused"] == 1
    after = method.optimizer.state()
    for k in before[1]:
        np.testing.assert_array_equal(method.models[1][k], before[1][k])
        for field in ("m_t", "v_t"):
            np.testing.assert_array_equal(after[1][field][k], moments[1][field][k])
    assert any(not np.array_equal(method.models[0][k], before[0][k]) for k in before[0])
