"""One hostile or broken client never ruins a run (in-process grid, the real ClientApp).

Each case runs a tiny federation twice, clean and with partition 1 misbehaving
(:mod:`ripple_flwr.testing.faults`), and checks that the run completes, the culprit is
named, the models stay finite and close to the clean run, and the headline
figure is not moved by what the client claims.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import FakeGrid, tiny_run_config

from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.app.server.run import run_server
from ripple_flwr.runs.saved_runs import load_run
from ripple_flwr.testing import faults

BAD = 1  # the misbehaving partition


def run(cache_dir, tmp_path, name, fault=None, method="oracle", **over):
    cfg = tiny_run_config(
        cache_dir,
        method=method,
        sampling="uniform",
        **{
            "clients-per-round": 6,  # everyone every round: the bad client is always in
            "num-server-rounds": 3,
            "round-timeout": 5.0,
            "results-path": str(tmp_path / f"{name}.json"),
            **over,
        },
    )
    grid = FakeGrid(cfg, faults=None if fault is None else {BAD: fault})
    path = run_server(grid, cfg)
    return json.loads(path.read_text()), path


def model_norm(path) -> float:
    states = load_run(path.with_suffix(".run.pt")).cluster_states
    return float(np.sqrt(sum(float((v.astype(np.float64) ** 2).sum()) for v in states.values())))


@pytest.fixture(scope="module")
def clean(cache_dir, tmp_path_factory):
    return run(cache_dir, tmp_path_factory.mktemp("clean"), "clean", method="fedavg")


@pytest.mark.parametrize("name", ["huge-weights", "scaled-weights"])
def test_huge_updates_are_dropped_and_named_models_stay_sane(
    name, clean, cache_dir, tmp_path, caplog
):
    with caplog.at_level("WARNING", logger="flwr.ripple"):
        res, path = run(cache_dir, tmp_path, name, faults.FAULTS[name](), method="fedavg")
    for r in res["rounds"]:
        assert r["received"] == 5
        (drop,) = r["dropped"]
        assert drop["partition"] == BAD and "update norm" in drop["reason"]
    assert f"dropped reply of partition {BAD}: update norm" in caplog.text
    # No honest client is ever blamed, and the global model stays near the clean run's.
    assert all(d["partition"] == BAD for r in res["rounds"] for d in r["dropped"])
    clean_res, clean_path = clean
    assert model_norm(path) == pytest.approx(model_norm(clean_path), rel=0.05)
    assert abs(res["final_accuracy"] - clean_res["final_accuracy"]) < 0.15


@pytest.mark.parametrize("name", ["doubled-weights", "growing-weights"])
@pytest.mark.parametrize("culprits", [(BAD,), (1, 4, 7)], ids=["alone", "3-of-10"])
def test_rescaling_below_the_models_norm_is_dropped_alone_or_colluding(
    name, culprits, cache_dir, tmp_path
):
    # 1.99 x (1.05 x) the trained model: an update of 0.99 (0.05) of the model's norm, which
    # the old floor let through every round (FedAvg's norm 6.5 -> 21.9 in 8 rounds).
    over = {"num-partitions": 10, "clients-per-round": 10, "num-server-rounds": 4}
    cfg = tiny_run_config(cache_dir, method="fedavg", sampling="uniform", **over)
    results = {}
    for case, bad in (("clean", {}), (name, {p: faults.FAULTS[name]() for p in culprits})):
        cfg["results-path"] = str(tmp_path / f"{case}.json")
        path = run_server(FakeGrid(cfg, faults=bad), cfg)
        results[case] = json.loads(path.read_text()), model_norm(path)
    res, norm = results[name]
    clean_res, clean_norm = results["clean"]
    for r in res["rounds"]:
        assert sorted(d["partition"] for d in r["dropped"]) == sorted(culprits)
        assert all(d["reason"].startswith(("update norm", "it grows")) for d in r["dropped"])
    assert norm == pytest.approx(clean_norm, rel=0.02)
    assert not any(r["dropped"] for r in clean_res["rounds"])  # no honest client is blamed


@pytest.mark.parametrize("method", ["scaffold", "feddyn", "pfedme", "perfedavg"])
def test_a_lonely_huge_reply_is_refused_by_the_aggregate_check(method, cache_dir, tmp_path):
    # One client a round: a reply has nothing to be compared with, so only the aggregate
    # check (non-finite, or 10 x the model's norm) stands between it and the saved model.
    over = {"num-partitions": 2, "clients-per-round": 1, "num-server-rounds": 4}
    cfg = tiny_run_config(cache_dir, method=method, sampling="uniform", **over)
    cfg["results-path"] = str(tmp_path / "lonely.json")
    path = run_server(FakeGrid(cfg, faults={BAD: faults.FAULTS["huge-weights"]()}), cfg)
    res = json.loads(path.read_text())
    bad_rounds = [r for r in res["rounds"] if r["sampled"] == [BAD]]
    assert bad_rounds, "the seeded sampler never drew the bad client: pick another seed"
    for r in res["rounds"]:
        assert (r["refused"] is not None) == (r["sampled"] == [BAD])
    assert all("model norm would grow" in r["refused"] for r in bad_rounds)
    assert model_norm(path) < 100  # the paper's CNN starts near 6.5


def test_an_out_of_range_embedding_cannot_pick_a_cluster(tiny_checkpoint, cache_dir, tmp_path):
    # All 3e38 used to route one-hot to cluster 0: a client could choose its cluster.
    runs = {}
    for name, fault in (("clean", None), ("far", faults.FAULTS["far-embedding"]())):
        res, _ = run(
            cache_dir, tmp_path, name, fault, method="ripple", checkpoint=str(tiny_checkpoint)
        )
        runs[name] = res
    far = runs["far"]["routing"]
    assert [d["partition"] for d in far["out_of_domain"]] == [BAD]
    assert "outside the router's domain" in far["out_of_domain"][0]["reason"]
    assert runs["clean"]["routing"]["out_of_domain"] == []
    w = {k: np.asarray(v["routing"]["weights"]) for k, v in runs.items()}
    np.testing.assert_allclose(w["far"][BAD], 1 / w["far"].shape[1])  # no cluster chosen
    others = [r for r in range(len(w["far"])) if r != BAD]
    # Honest routing intact (to float32 BLAS rounding: the batch differs in one row).
    np.testing.assert_allclose(w["far"][others], w["clean"][others], atol=1e-6)


def test_huge_updates_never_reach_ripples_cluster_models(cache_dir):
    from ripple_flwr.app.protocol.records import state_to_record
    from ripple_flwr.app.run_config import parse_run_config
    from ripple_flwr.app.server.setup import build_engine, initial_state
    from ripple_flwr.data.cache import cached_federation

    stacked = {}
    for name, fault in (("clean", None), ("huge", faults.FAULTS["huge-weights"]())):
        cfg = tiny_run_config(cache_dir, **{"clients-per-round": 6, "num-server-rounds": 2})
        settings = parse_run_config(cfg)
        fed = cached_federation(settings)
        state = initial_state(settings, fed.dataset.image_shape, fed.dataset.num_classes)
        strategy = build_engine(settings, state, fed)
        grid = FakeGrid(cfg, faults=None if fault is None else {BAD: fault})
        strategy.start(grid, state_to_record(state), num_rounds=2)
        stacked[name] = strategy.method.stacked
        if fault is not None:
            assert [[d.partition for d in r.dropped] for r in strategy.ledger.rounds] == [
                [BAD],
                [BAD],
            ]
    for key, clean_value in stacked["clean"].items():
        huge = stacked["huge"][key]
        assert np.all(np.isfinite(huge))
        # Without the bad client's share the cluster models are near the clean ones.
        scale = np.abs(clean_value).max() + 1e-6
        assert np.abs(huge.astype(np.float64) - clean_value).max() < scale


def test_inflated_count_does_not_take_over_fedavg(clean, cache_dir, tmp_path, caplog):
    with caplog.at_level("WARNING", logger="flwr.ripple"):
        res, path = run(
            cache_dir, tmp_path, "count", faults.FAULTS["inflated-count"](), method="fedavg"
        )
    assert f"partition {BAD} reported num-examples=1000000000000" in caplog.text
    clean_res, clean_path = clean
    # Held to its true count, the reply weighs what it did in the clean run: same model.
    assert model_norm(path) == pytest.approx(model_norm(clean_path), rel=1e-6)
    assert res["final_accuracy"] == pytest.approx(clean_res["final_accuracy"])


def test_fake_evaluation_cannot_move_the_headline_beyond_its_share(clean, cache_dir, tmp_path):
    res, _ = run(
        cache_dir, tmp_path, "fake-eval", faults.FAULTS["fake-evaluation"](), method="fedavg"
    )
    clean_res, _ = clean
    for rnd, acc in res["accuracy_per_round"].items():
        ev = next(e for e in res["evaluations"] if str(e["round"]) == rnd)
        scores = {c["partition"]: c for c in ev["clients"]}
        # The claimed 10**9 examples count as the client's real test split.
        assert (
            scores[BAD]["num_examples"]
            == clean_res["evaluations"][0]["clients"][BAD]["num_examples"]
        )
        honest = [c for p, c in scores.items() if p != BAD]
        n_total = sum(c["num_examples"] for c in scores.values())
        share = scores[BAD]["num_examples"] / n_total
        honest_mean = np.average(
            [c["accuracy"] for c in honest], weights=[c["num_examples"] for c in honest]
        )
        assert acc["weighted_mean"] <= honest_mean * (1 - share) + share + 1e-9
        assert acc["coverage"] == 1.0


def test_inconsistent_accuracy_is_not_scored(cache_dir, tmp_path):
    res, _ = run(
        cache_dir, tmp_path, "odd-acc", faults.fake_evaluation(0.123456, 12), method="fedavg"
    )
    for ev in res["evaluations"]:
        (f,) = ev["failed"]
        assert f["partition"] == BAD and "not a share of the" in f["reason"]
        assert ev["scored"] == 5 and ev["expected"] == 6
        assert res["accuracy_per_round"][str(ev["round"])]["coverage"] == pytest.approx(5 / 6)
    assert res["final_accuracy_coverage"] == pytest.approx(5 / 6)


def test_killed_node_is_named_left_out_of_sampling_and_coverage_says_so(
    cache_dir, tmp_path, caplog
):
    with caplog.at_level("WARNING", logger="flwr.ripple"):
        res, _ = run(
            cache_dir,
            tmp_path,
            "killed",
            faults.dead_after(1),
            method="fedavg",
            **{"num-server-rounds": 5, "max-failures": 2},
        )
    reasons = [d["reason"] for r in res["rounds"] for d in r["dropped"]]
    assert reasons and all("simulated kill" in x for x in reasons)  # the real reason, logged
    # Sampled every round: failed rounds 2 and 3, then never sampled again (it answers nothing).
    failures = [
        r["round"] for r in res["rounds"] if any(d["partition"] == BAD for d in r["dropped"])
    ]
    assert failures == [2, 3]
    assert all(BAD not in r["sampled"] for r in res["rounds"] if r["round"] > failures[-1])
    assert "left out of sampling" in caplog.text
    for ev in res["evaluations"][1:]:
        assert [f["partition"] for f in ev["failed"]] == [BAD]
        assert ev["coverage"] == pytest.approx(5 / 6)


def test_error_reply_from_another_node_is_matched_to_its_message(cache_dir, tmp_path, caplog):
    def relayed_error(msg, reply):  # the SuperLink answers for a dead node, from its own id
        out = faults.dead_after(0)(msg, reply)
        if out is not None and out.has_error():
            out.metadata.__dict__["_src_node_id"] = 1
        return out

    with caplog.at_level("WARNING", logger="flwr.ripple"):
        res, _ = run(
            cache_dir,
            tmp_path,
            "relayed",
            relayed_error,
            method="fedavg",
            **{"num-server-rounds": 1},
        )
    (drop,) = res["rounds"][0]["dropped"]
    assert drop == {"partition": BAD, "reason": "client error: node unavailable (simulated kill)"}
    assert "ignoring" not in caplog.text


def test_one_bad_embedding_in_a_two_client_run_degrades_instead_of_dying(cache_dir, tmp_path):
    res, _ = run(
        cache_dir,
        tmp_path,
        "two",
        faults.bad_embedding(),
        method="ripple",
        checkpoint="",
        **{
            "num-partitions": 2,
            "clients-per-round": 2,
            "pretrain-bank-size": 100,
            "pretrain-steps": 20,
        },
    )
    assert res["clients"]["partition_ids"] == [0]
    assert "NaN or Inf" in next(iter(res["clients"]["left_out"].values()))
    assert [r["sampled"] for r in res["rounds"]] == [[0], [0], [0]]


def test_same_seed_same_results_whatever_the_reply_order(cache_dir, tmp_path):
    class ShuffledGrid(FakeGrid):
        """Replies come back in a different order every pull, as over a network."""

        rng = np.random.default_rng(7)

        def pull_messages(self, message_ids):
            got = list(super().pull_messages(message_ids))
            return [got[i] for i in self.rng.permutation(len(got))]

    outs = []
    for i, grid_cls in enumerate((FakeGrid, ShuffledGrid)):
        cfg = tiny_run_config(
            cache_dir,
            method="oracle",
            **{"num-server-rounds": 3, "results-path": str(tmp_path / f"r{i}.json")},
        )
        path = run_server(grid_cls(cfg), cfg)
        res = json.loads(path.read_text())
        for key in ("timings", "settings", "saved_run"):
            res.pop(key)
        for r in res["rounds"]:
            for k in ("server_seconds", "wall_seconds"):
                r.pop(k)
        for e in res["evaluations"]:
            e.pop("wall_seconds")
        outs.append(json.dumps(res, sort_keys=True))
    assert outs[0] == outs[1]


def test_when_every_client_is_left_out_rounds_send_nothing_and_the_run_ends(cache_dir, tmp_path):
    everyone_dead = {p: faults.dead_after(0) for p in range(6)}
    cfg = tiny_run_config(
        cache_dir,
        method="fedavg",
        **{
            "clients-per-round": 6,
            "num-server-rounds": 4,
            "max-failures": 2,
            "round-timeout": 5.0,
            "results-path": str(tmp_path / "dead.json"),
        },
    )
    res = json.loads(run_server(FakeGrid(cfg, faults=everyone_dead), cfg).read_text())
    # Rounds 1-2 fail for everyone; from round 3 on nobody is sampled and nothing is sent.
    assert [len(r["sampled"]) for r in res["rounds"]] == [6, 6, 0, 0]
    assert [len(r["dropped"]) for r in res["rounds"]] == [6, 6, 0, 0]
    assert all(e["coverage"] == 0.0 for e in res["evaluations"])


@pytest.mark.parametrize("method", ["ifca", "fesem", "cfl"])
def test_huge_updates_never_reach_the_clustered_baselines_models(method, cache_dir):
    from ripple_flwr.app.protocol.records import state_to_record
    from ripple_flwr.app.server.setup import build_engine, initial_state
    from ripple_flwr.data.cache import cached_federation

    cfg = tiny_run_config(
        cache_dir, method=method, **{"clients-per-round": 6, "num-server-rounds": 2}
    )
    settings = parse_run_config(cfg)
    fed = cached_federation(settings)
    state = initial_state(settings, fed.dataset.image_shape, fed.dataset.num_classes)
    strategy = build_engine(settings, state, fed)
    grid = FakeGrid(cfg, faults={BAD: faults.FAULTS["huge-weights"]()})
    strategy.start(grid, state_to_record(state), num_rounds=2)
    for r in strategy.ledger.rounds:
        (drop,) = r.dropped
        assert drop.partition == BAD and "update norm" in drop.reason
    for model in strategy.method.models:
        big = max(float(np.abs(v).max()) for v in model.values() if v.dtype.kind == "f")
        assert np.isfinite(big) and big < 100.0
