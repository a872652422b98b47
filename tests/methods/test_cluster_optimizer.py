"""Ripple's ``cluster-optimizer``: Flower's server optimiser per cluster model.

Each cluster's step must be exactly the step Flower's own class takes from that cluster's
model on that cluster's mean update; a cluster without mass in a round is not stepped; the
option refuses unknown values in one line.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict

from ripple_flwr.app.protocol.records import record_to_state, state_to_record
from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.app.server.bases.cluster_optimizer import (
    OPTIMIZERS,
    ClusterOptimizer,
    optimizer_kwargs,
)
from ripple_flwr.app.server.bases.flower import flower_kwargs
from ripple_flwr.experiments.compose import applied
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


def reply(state: dict[str, np.ndarray]) -> Message:
    content = RecordDict(
        {"arrays": state_to_record(state), "metrics": MetricRecord({"num-examples": 5})}
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
