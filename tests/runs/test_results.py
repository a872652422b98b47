"""Results: byte accounting, routing metrics, and the results file a run writes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import FakeGrid, tiny_run_config
from flwr.app import Array, ArrayRecord

from ripple_flwr.app.server.run import run_server
from ripple_flwr.runs.results import (
    ari_permutation_test,
    arrayrecord_nbytes,
    client_stats,
    routing_metrics,
    tail_mean,
    write_results,
)


def test_byte_accounting_counts_array_payloads():
    rec = ArrayRecord(
        {"a": Array(np.zeros((3, 4), np.float32)), "b": Array(np.array(7, dtype=np.int64))}
    )
    assert arrayrecord_nbytes(rec) == 3 * 4 * 4 + 8


def test_routing_metrics_and_client_stats():
    truth = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [0.5, 0.5, 0]])
    w = np.array([[0, 1.0, 0], [1.0, 0, 0], [0, 0, 1.0], [0.5, 0.5, 0]])
    m = routing_metrics(w, truth)
    assert m["l1"] == pytest.approx((2 + 2 + 0 + 0) / 4)
    assert m["ari"] == pytest.approx(1.0) and m["ari_clients"] == 3  # label permutation
    assert routing_metrics(w[3:], truth[3:])["ari"] is None  # no hard client
    s = client_stats([1.0, 0.0], [3, 1])
    assert s["weighted_mean"] == 0.75 and s["mean"] == 0.5 and s["std"] == 0.5
    assert tail_mean([0.1, 0.5, 0.6, 0.7]) == pytest.approx(0.6)
    # Evaluations that scored nobody are missing, and the mean never reaches past them to
    # older ones (pFedMe once reported 0.583 for a run whose last evaluations scored nobody).
    nan = float("nan")
    assert tail_mean([0.5, 0.6, None, nan, nan]) != tail_mean([0.5, 0.6, None, nan, nan])
    assert tail_mean([0.5, 0.6, 0.7, nan, 0.9]) == pytest.approx(0.8)


def test_ari_permutation_test_is_sklearns_ari_and_calibrated_under_chance():
    from sklearn.metrics import adjusted_rand_score

    rng = np.random.default_rng(0)
    truth = np.repeat(np.arange(5), 12)  # 60 clients of 5 dominant classes
    # Clusters that mostly follow the classes (renamed): p at its floor, above the null.
    follow = np.where(rng.random(60) < 0.8, truth, rng.integers(0, 5, 60)) + 3
    test = ari_permutation_test(truth, follow, permutations=199, seed=1)
    assert test["ari"] == pytest.approx(adjusted_rand_score(truth, follow))
    assert test["p_value"] == pytest.approx(1 / 200) and test["ari"] > test["null_q99"]
    assert test == ari_permutation_test(truth, follow, permutations=199, seed=1)  # seeded
    # Clusters drawn without looking at the classes: p about uniform.
    chance = [
        ari_permutation_test(truth, rng.integers(0, 4, 60), permutations=199, seed=s)["p_value"]
        for s in range(200)
    ]
    assert 0.01 <= np.mean(np.array(chance) < 0.05) <= 0.10
    assert 0.35 <= np.median(chance) <= 0.65
    # A half-real signal (half the clients follow their class, ARI about 0.2) is found.
    half = np.where(rng.random(60) < 0.5, truth, rng.integers(0, 5, 60))
    assert ari_permutation_test(truth, half, seed=2)["p_value"] < 0.01
    # No test where the ARI is undefined: everyone apart in both labelings, or one client.
    assert ari_permutation_test(np.arange(5), np.arange(5)) is None
    assert ari_permutation_test(np.array([1]), np.array([0])) is None


def test_write_results_is_strict_json_with_a_plot(tmp_path):
    path = write_results(
        tmp_path / "r.json",
        {
            "settings": {"method": "ripple"},
            "evaluations": [{"round": 1, "accuracy": {"weighted_mean": 0.5, "std": 0.1}}],
            "x": np.float32(np.nan),
            "w": np.eye(2),
        },
    )
    data = json.loads(path.read_text())  # NaN written as null, arrays as lists
    assert data["x"] is None and data["w"] == [[1.0, 0.0], [0.0, 1.0]]
    assert path.with_suffix(".png").stat().st_size > 1000


def test_assignment_picture_only_for_methods_that_cluster(tmp_path):
    from ripple_flwr.runs.plots import contingency

    truth = [[0.9, 0.1], [0.2, 0.8], [1.0, 0.0]]
    base = {"settings": {"method": "x"}, "evaluations": [], "federation": {"true_mixtures": truth}}
    routed = {
        **base,
        "routing": {"weights": [[0.7, 0.3], [0.1, 0.9], [0.6, 0.4]], "l1": 0.2},
        "clients": {"partition_ids": [0, 1, 2]},
    }
    clustered = {
        **base,
        "assignment": {"labels": [1, 0, 1], "partition_ids": [0, 1, 2], "num_models": 2},
    }
    for name, res in (("routed", routed), ("clustered", clustered), ("global", base)):
        write_results(tmp_path / f"{name}.json", res)
    assert (tmp_path / "routed.assignment.png").stat().st_size > 1000
    assert (tmp_path / "clustered.assignment.png").stat().st_size > 1000
    assert not (tmp_path / "global.assignment.png").exists()
    # Clients per (cluster, dominant class): cluster 1 holds the two class-0 clients.
    assert contingency(np.array([1, 0, 1]), np.array([0, 1, 0]), 2, 2).tolist() == [[0, 1], [2, 0]]


def test_results_file_of_a_ripple_run(tiny_checkpoint, cache_dir, tmp_path):
    cfg = tiny_run_config(
        cache_dir,
        method="ripple",
        checkpoint=str(tiny_checkpoint),
        **{"num-server-rounds": 3, "eval-every": 2, "results-path": str(tmp_path / "run.json")},
    )
    path = run_server(FakeGrid(cfg), cfg)
    r = json.loads(path.read_text())
    assert r["settings"]["method"] == "ripple" and r["settings"]["num-partitions"] == 6
    assert sorted(r["accuracy_per_round"]) == ["2", "3"]  # every eval-every rounds and the last
    for ev in r["evaluations"]:
        acc = r["accuracy_per_round"][str(ev["round"])]
        scores = np.array([c["accuracy"] for c in ev["clients"]])
        n = np.array([c["num_examples"] for c in ev["clients"]])
        assert len(scores) == 6 and ev["failed"] == []
        assert acc["weighted_mean"] == pytest.approx(np.average(scores, weights=n))
        assert acc["std"] == pytest.approx(scores.std())
    assert sorted(r["train_loss_per_round"]) == ["1", "2", "3"]
    model_bytes = r["model_bytes"]
    assert all(b["down"] == b["up"] == 3 * model_bytes for b in r["bytes_per_round"].values())
    assert r["embedding_bytes_per_client"] == 1953 * 4
    routing = r["routing"]
    truth = np.array(r["federation"]["true_mixtures"])
    w = np.array(routing["weights"])
    assert w.shape == truth.shape == (6, 4)
    assert routing["l1"] == pytest.approx(np.abs(w - truth).sum(1).mean())
    assert set(r["timings"]) >= {"pretrain_or_load", "query", "rounds", "evaluation", "total"}
    assert r["checkpoint"]["source"] == "config"
    assert np.isfinite(r["final_accuracy"])
    assert path.with_suffix(".png").is_file()


def test_to_jsonable_arrays_in_one_pass_and_nan_as_none():
    from ripple_flwr.io.jsonable import to_jsonable

    w = np.random.default_rng(0).dirichlet(np.ones(4), 50)
    assert to_jsonable(w) == w.tolist() and json.dumps(to_jsonable(w)) == json.dumps(w.tolist())
    assert to_jsonable(np.arange(3, dtype=np.int64)) == [0, 1, 2]
    assert to_jsonable(np.array([True, False])) == [True, False]
    assert to_jsonable(np.array([[1.0, np.nan], [np.inf, 2.0]], np.float32)) == [
        [1.0, None],
        [None, 2.0],
    ]
    assert to_jsonable(np.array(np.nan)) is None and to_jsonable(np.array(2.5)) == 2.5
