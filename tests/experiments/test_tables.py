"""ripple-tables: cells over seeds, the K sweep, --reuse-only, the figures, the presets.

Most tests build the tables from a fake trainer that writes hand-made results
files (no training); the two marked slow run tiny real federations end to end.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import get_args

import numpy as np
import pytest
from test_data import cifar_md5_off, offline, write_cifar10  # noqa: F401  (fixtures)

from ripple_flwr.methods.registry import METHODS, Family  # noqa: E402

PEAK_K = 6  # the fake clustered methods do best at this K


@pytest.fixture(autouse=True)
def _restore_output_dir(monkeypatch):
    """tables.main points $RIPPLE_OUTPUT_DIR at its --out (it is the server); undo that after."""
    import os

    monkeypatch.setenv("RIPPLE_OUTPUT_DIR", os.environ.get("RIPPLE_OUTPUT_DIR", ""))


def fake_accuracy(cfg: dict) -> float:
    """A final accuracy that depends on the method, the seed and (clustered) K."""
    method, seed, k = cfg["method"], cfg["seed"], cfg["num-components"]
    base = {"ripple": 0.90, "oracle": 0.92, "fedavg": 0.70, "local": 0.85}.get(method, 0.80)
    if METHODS[method].sweeps_k:
        base -= 0.01 * abs(k - PEAK_K)
    return base + {42: -0.02, 7: 0.0, 123: 0.02}.get(seed, 0.0)


class FakeTrainer:
    """Writes a results file shaped like the server's for ``cfg``, and counts what it trained."""

    def __init__(self) -> None:
        self.configs: list[dict] = []

    def __call__(self, cfg: dict) -> dict:
        self.configs.append(cfg)
        spec, k, n = METHODS[cfg["method"]], cfg["num-components"], cfg["num-partitions"]
        final, rounds = fake_accuracy(cfg), cfg["num-server-rounds"]
        evals = list(range(cfg["eval-every"], rounds + 1, cfg["eval-every"]))
        truth = np.eye(k)[np.arange(n) % k]  # every client one-hot on pid mod K
        res = {
            "settings": dict(cfg),
            "accuracy_per_round": {
                str(r): {"weighted_mean": final * r / rounds if r < rounds - 20 else final}
                for r in evals
            },
            "bytes_per_round": {
                "1": {
                    "down": 1000 * cfg["clients-per-round"],
                    "up": 1000 * cfg["clients-per-round"],
                }
            },
            "model_bytes": 1000,
            "timings": {"total": 10.0 + cfg["seed"]},
            "num_models": k if spec.models == "clusters" else 1,
            "federation": {"true_mixtures": truth.tolist()},
            "clients": {"partition_ids": list(range(n))},
            "zero_shot": {},  # as the server writes it when no new clients were onboarded
        }
        if spec.routing_weights:
            res["routing"] = {"weights": truth.tolist()}
        elif spec.family == "clustered":
            res["assignment"] = {"labels": [0] * n, "partition_ids": list(range(n))}
        if cfg.get("new-clients"):
            zs = final - 0.1 * cfg["alpha-new"] / 100
            best = {"accuracy": {"weighted_mean": zs - 0.05}} if cfg.get("best-by-loss") else None
            res["zero_shot"] = {"accuracy": {"weighted_mean": zs}, "best_by_loss": best}
        Path(cfg["results-path"]).write_text(json.dumps(res))
        if cfg.get("checkpoint-every"):  # the final state the server saves, for a resume
            Path(cfg["results-path"]).with_suffix(".resume.npz").write_bytes(b"state")
        return res


def never_train(cfg: dict) -> dict:
    raise AssertionError(f"--reuse-only trained {cfg['results-path']}")


def build(argv: list[str], capsys, train) -> dict:
    from paper import tables

    assert tables.main(argv, train=train) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


SMALL = [
    "--clients",
    "8",
    "--clients-per-round",
    "4",
    "--rounds",
    "40",
    "--sweep-rounds",
    "30",
    "--eval-every",
    "10",
]
TABLE1_ROWS = ["ripple-strat-gmm-vae", "oracle", "fedavg", "local", "ifca", "fesem", "cfl"]


# -- cell statistics --------------------------------------------------------------------------
def test_a_cell_is_the_mean_and_two_sample_sigmas_of_its_seeds():
    from ripple_flwr.experiments.stats import fmt_stat
    from ripple_flwr.runs.statistics import seed_stats

    cell = seed_stats({42: 0.90, 7: 0.92, 123: 0.94})
    assert cell["per_seed"] == {"42": 0.90, "7": 0.92, "123": 0.94}
    assert cell["mean"] == pytest.approx(0.92) and cell["n"] == 3
    assert cell["sigma"] == pytest.approx(0.02)  # ddof = 1 (ddof = 0 would be 0.0163)
    assert fmt_stat(cell, ".1f", 100) == "92.0 ± 4.0"
    assert fmt_stat(seed_stats({42: 0.9}), ".1f", 100) == "90.0"  # one seed: the value alone
    never = seed_stats({42: None, 7: 30, 123: float("nan")})
    assert never["per_seed"] == {"42": None, "7": 30.0, "123": None} and never["n"] == 1
    assert never["mean"] == 30.0 and never["sigma"] is None
    assert fmt_stat(seed_stats({}), ".1f") == "n/a"


def test_the_best_k_has_the_highest_mean_final_accuracy():
    from ripple_flwr.experiments.stats import best_k
    from ripple_flwr.runs.statistics import seed_stats

    def sweep(means: dict[int, list[float]]) -> dict:
        return {k: {"final_accuracy": seed_stats(dict(enumerate(v)))} for k, v in means.items()}

    assert best_k(sweep({2: [0.5, 0.7], 4: [0.62, 0.62], 6: [0.9, 0.1]})) == 4
    assert best_k(sweep({2: [0.6], 4: [], 8: [0.6]})) == 2  # a tie: the smaller K; none ran: out
    assert best_k(sweep({2: [], 4: []})) is None


# -- Table 1 ----------------------------------------------------------------------------------
def test_table1_keeps_every_seed_and_runs_the_swept_methods_at_their_best_k(tmp_path, capsys):
    from paper import tables

    trainer, out = FakeTrainer(), tmp_path / "t1"
    argv = ["table1", *SMALL, "--methods", *TABLE1_ROWS, "--sweep-k", "--out", str(out)]
    line = build(argv, capsys, trainer)
    assert line["seeds"] == [42, 7, 123]  # the paper's, by default
    fedavg = line["rows"]["fedavg"]
    assert fedavg["final_accuracy"]["per_seed"] == pytest.approx(
        {"42": 0.68, "7": 0.70, "123": 0.72}
    )
    assert fedavg["final_accuracy"]["sigma"] == pytest.approx(0.02)
    assert fedavg["wall_seconds"]["per_seed"] == {"42": 52.0, "7": 17.0, "123": 133.0}
    assert fedavg["bytes_ratio_vs_fedavg"]["mean"] == pytest.approx(1.0)
    assert line["rows"]["ripple-strat-gmm-vae"]["ari_hard"]["mean"] == pytest.approx(1.0)
    # The sweep covers the methods the registry sweeps, every K at its own seed and rounds.
    swept = {n for n in TABLE1_ROWS if METHODS[tables.TABLE1[n]["method"]].sweeps_k}
    assert set(line["sweep"]["methods"]) == swept == {"ifca", "fesem"}
    assert line["sweep"]["seeds"] == [42] and line["sweep"]["rounds"] == 30
    for name in swept:
        entry = line["sweep"]["methods"][name]
        assert set(entry["by_k"]) == {"2", "4", "6", "8", "10"} and entry["complete"]
        assert entry["by_k"]["4"]["final_accuracy"]["per_seed"] == pytest.approx({"42": 0.76})
        assert entry["best_k"] == line["rows"][name]["k"] == PEAK_K
        assert line["rows"][name]["final_accuracy"]["n"] == 3
        assert (out / f"{name}-k2-r30-seed42.json").is_file()  # the sweep's own files
        assert (out / f"{name}-k{PEAK_K}-r40-seed123.json").is_file()  # the table's
    assert line["rows"]["cfl"]["k"] == 10 and not line["rows"]["cfl"]["k_from_sweep"]
    assert len(trainer.configs) == 7 * 3 + 2 * 5  # rows x seeds, sweep: 2 methods x 5 K
    md = (out / "table1.md").read_text()
    assert "| fedavg | global | - | 70.0 ± 4.0 |" in md
    assert f"| ifca | clustered | {PEAK_K} (best of sweep) |" in md
    # The fake clustered methods put every client in one cluster: at chance, and the table says so.
    assert line["rows"]["ifca"]["ari_p_all"]["per_seed"] == {"42": 1.0, "7": 1.0, "123": 1.0}
    ifca_line = next(row for row in md.splitlines() if row.startswith("| ifca |"))
    assert "(end; p <= 1.000 / 1.000)" in ifca_line
    assert "K sweep (seeds 42, 30 rounds" in md and "the seed spread" in md
    assert md.index("| oracle |") < md.index("| ripple-strat-gmm-vae |") < md.index("| fedavg |")
    assert line["plot"] == str(out / "table1.png") and Path(line["plot"]).stat().st_size > 10_000
    assert line["machine"]["cpus"] >= 1 and line["missing"] == []

    # --reuse: a second sitting reads every run and trains nothing.
    again = build([*argv, "--reuse"], capsys, never_train)
    assert again["rows"] == line["rows"] and again["sweep"] == line["sweep"]


def test_reuse_only_reports_the_missing_run_and_trains_nothing(tmp_path, capsys):
    out = tmp_path / "t1"
    argv = ["table1", *SMALL, "--methods", "fedavg", "ifca", "--out", str(out)]
    build(argv, capsys, FakeTrainer())
    gone = out / "ifca-k10-r40-seed7.json"
    gone.unlink()
    line = build([*argv, "--reuse-only"], capsys, never_train)
    assert line["missing"] == [str(gone)]
    ifca = line["rows"]["ifca"]
    assert ifca["seeds_done"] == [42, 123] and ifca["seeds_missing"] == [7]
    assert ifca["final_accuracy"]["per_seed"] == pytest.approx({"42": 0.74, "123": 0.78})
    assert line["rows"]["fedavg"]["seeds_missing"] == []
    md = (out / "table1.md").read_text()
    assert "| 2/3 (missing 7) |" in md and "- ifca-k10-r40-seed7.json" in md
    # A sweep with nothing done: its row is marked missing, and nothing trains either.
    line = build([*argv, "--reuse-only", "--sweep-k"], capsys, never_train)
    assert line["rows"]["ifca"]["k"] is None and len(line["missing"]) == 5
    assert "| ifca | clustered | sweep missing | missing |" in (out / "table1.md").read_text()
    # --reuse trains exactly the missing run.
    trainer = FakeTrainer()
    build([*argv, "--reuse"], capsys, trainer)
    assert [c["results-path"] for c in trainer.configs] == [str(gone)]
    # A sweep partly done: the best K of what finished, said so.
    build([*argv, "--reuse", "--sweep-k"], capsys, FakeTrainer())
    (out / f"ifca-k{PEAK_K}-r30-seed42.json").unlink()
    line = build([*argv, "--reuse-only", "--sweep-k"], capsys, never_train)
    assert line["rows"]["ifca"]["k"] == 4 and not line["sweep"]["methods"]["ifca"]["complete"]
    assert (
        "| ifca | clustered | 4 (best of the finished sweep) |" in (out / "table1.md").read_text()
    )


def test_reuse_reads_a_run_under_its_earlier_name(tmp_path, capsys):
    out = tmp_path / "t1"
    argv = ["table1", *SMALL, "--seeds", "42", "--methods", "fedavg", "--out", str(out)]
    first = build(argv, capsys, FakeTrainer())
    (out / "fedavg-k10-r40-seed42.json").rename(out / "fedavg-seed42.json")  # before K, rounds
    again = build([*argv, "--reuse-only"], capsys, never_train)
    assert again["missing"] == [] and again["rows"] == first["rows"]
    assert "| fedavg | global | - | 68.0 |" in (out / "table1.md").read_text()  # one seed


def test_kept_summaries_rebuild_both_tables_without_the_results_files(tmp_path, capsys):
    out, keep = tmp_path / "t", tmp_path / "kept"
    one = ["table1", *SMALL, "--methods", "fedavg", "ifca", "--sweep-k", "--keep", str(keep)]
    two = ["table2", *SMALL, "--methods", "ripple-strat", "ifca", "--sweep-k"]
    two += ["--seeds", "42", "7", "--keep", str(keep / "two")]
    first = build([*one, "--out", str(out / "1")], capsys, FakeTrainer())
    second = build([*two, "--out", str(out / "2")], capsys, FakeTrainer())
    for f in out.rglob("*.json"):
        f.unlink()  # another machine: only the committed summaries are there
    kept = sorted(keep.rglob("*.json"))
    # Table 1: 2 rows x 3 seeds + 5 K; Table 2: 2 rows x 2 x 2 alphas x 2 seeds + 5 K x 2
    assert len(kept) == (2 * 3 + 5) + (2 * 2 * 2 * 2 + 5 * 2)
    assert all(f.stat().st_size < 8000 for f in kept)
    assert not any("results-path" in json.loads(f.read_text())["settings"] for f in kept)
    again = build([*one, "--out", str(out / "1"), "--reuse-only"], capsys, never_train)
    assert again["missing"] == [] and again["rows"] == first["rows"]
    assert again["curves"] == first["curves"] and again["sweep"] == first["sweep"]
    again = build([*two, "--out", str(out / "2"), "--reuse-only"], capsys, never_train)
    assert again["missing"] == [] and again["cells"] == second["cells"]
    # A kept summary of other settings is not taken for this run.
    line = build(
        [*one, "--out", str(out / "1"), "--reuse-only", "--alpha", "0.5"], capsys, never_train
    )
    assert len(line["missing"]) == 3 + 5  # FedAvg's seeds and the sweep (IFCA has no K)


def test_a_kept_summary_names_the_machine_and_commit_of_its_run_through_reuse(tmp_path, capsys):
    out, keep = tmp_path / "t", tmp_path / "kept"
    argv = ["table1", *SMALL, "--methods", "fedavg", "--seeds", "42", "--out", str(out)]
    build([*argv, "--keep", str(keep)], capsys, FakeTrainer())
    (kept,) = keep.glob("*.json")
    stamp = json.loads(kept.read_text())["made_on"]
    assert set(stamp) == {"node", "processor", "cpus", "commit"} and stamp["commit"]
    # Reused from the results file (which names no machine): the kept stamp stays.
    build([*argv, "--keep", str(keep), "--reuse"], capsys, never_train)
    assert json.loads(kept.read_text())["made_on"] == stamp
    # A summary with no stamp (made before stamps) is not given one it did not earn.
    (out / kept.name).rename(tmp_path / "results.json")
    bare = {k: v for k, v in json.loads(kept.read_text()).items() if k != "made_on"}
    kept.write_text(json.dumps(bare))
    build([*argv, "--keep", str(keep), "--reuse-only"], capsys, never_train)
    assert "made_on" not in json.loads(kept.read_text())


def test_table2_trains_afresh_when_the_first_alpha_tests_state_is_only_a_kept_summary(
    tmp_path, capsys
):
    out, keep = tmp_path / "t2", tmp_path / "kept"
    argv = ["table2", *SMALL, "--methods", "fedavg", "--seeds", "42", "--alphas-train", "0.1"]
    argv += ["--out", str(out), "--keep", str(keep)]
    first = build(argv, capsys, FakeTrainer())
    for f in out.iterdir():
        f.unlink()  # another machine: the results files and the saved state are not there
    (keep / "fedavg-k10-r40-a0.1-t100-seed42.json").unlink()
    trainer = FakeTrainer()
    again = build([*argv, "--reuse"], capsys, trainer)
    (cfg,) = trainer.configs
    assert cfg["alpha-new"] == 100 and "resume" not in cfg and cfg["checkpoint-every"] == 40
    assert again["cells"] == first["cells"]


def test_rotated_preset_labels_by_domain_with_four_components(tmp_path, capsys):
    from paper import tables

    args = vars(tables.parse(["table1", "--dataset", "rotated-fashion-mnist"]))
    want = {"label_kind": "domain", "num_components": 4, "clients": 100, "model": "cnn"}
    assert {key: args[key] for key in want} == want
    trainer = FakeTrainer()
    argv = ["table1", "--dataset", "rotated-fashion-mnist", *SMALL, "--seeds", "42"]
    line = build([*argv, "--methods", "ifca", "--out", str(tmp_path)], capsys, trainer)
    assert {(c["label-kind"], c["num-components"]) for c in trainer.configs} == {("domain", 4)}
    assert line["label_kind"] == "domain" and (tmp_path / "ifca-k4-r40-seed42.json").is_file()
    assert "ARI vs domain" in (tmp_path / "table1.md").read_text()
    with pytest.raises(SystemExit):  # one K, said once
        tables.parse(["table1", "--num-components", "4", "--set", "num-components=6"])


def test_clusters_ari_of_a_domain_run_is_against_the_clients_rotation():
    from ripple_flwr.data.federation import build_federation
    from ripple_flwr.data.registry import load_dataset
    from ripple_flwr.experiments.stats import clusters_ari

    ds = load_dataset("rotated-mnist-5k")
    kw = {"num_partitions": 6, "partition_size": 60, "alpha": 0.1, "aux_size": 300}
    fed = build_federation(ds, **kw, num_components=4, label_kind="domain")
    rotation, _ = ds.cluster_labels("domain")
    turns = [np.bincount(rotation[fed.client_indices(p)], minlength=4).argmax() for p in range(6)]
    res = {"federation": {"true_mixtures": fed.mixtures.tolist()}}  # as the server records it
    res["assignment"] = {"labels": [t + 7 for t in turns], "partition_ids": list(range(6))}
    assert clusters_ari(res)[1:] == (pytest.approx(1.0), "end")  # clusters = rotations
    res["assignment"]["labels"] = [0, 1, 0, 1, 0, 1]
    assert clusters_ari(res)[1] < 0.5
    res = {"federation": res["federation"], "clients": {"partition_ids": [4, 5, 0]}}
    res["routing"] = {"weights": np.eye(4)[[turns[4], turns[5], turns[0]]].tolist()}
    assert clusters_ari(res)[1:] == (pytest.approx(1.0), "before round 1")


def test_clusters_ari_at_k_below_the_classes_is_against_the_dominant_class_not_class_mod_k():
    from ripple_flwr.experiments.stats import clusters_ari

    # Six clients of class 0 or 2, clustered at K = 2 exactly by their class.
    classes = np.array([0, 2, 0, 2, 2, 0])
    label_mixtures = np.eye(10)[classes]
    folded = np.stack([label_mixtures[:, c::2].sum(axis=1) for c in range(2)], axis=1)
    fed = {"true_mixtures": folded.tolist(), "true_label_mixtures": label_mixtures.tolist()}
    res = {"federation": fed}
    res["assignment"] = {
        "labels": (classes == 2).astype(int).tolist(),
        "partition_ids": list(range(6)),
    }
    assert clusters_ari(res)[:2] == (pytest.approx(1.0), pytest.approx(1.0))
    # Folded, both classes are component 0: the same clustering would score 0.
    del fed["true_label_mixtures"]
    assert clusters_ari(res)[:2] == (pytest.approx(0.0), pytest.approx(0.0))


# -- figures ----------------------------------------------------------------------------------
def _curve(level: float, seeds: int = 3) -> dict:
    per = {str(s): [level + s / 100, level + 0.1 + s / 100] for s in range(seeds)}
    stack = np.asarray(list(per.values()))
    return {
        "rounds": [10, 20],
        "per_seed": per,
        "mean": stack.mean(0).tolist(),
        "min": stack.min(0).tolist(),
        "max": stack.max(0).tolist(),
    }


def test_small_multiples_draw_each_method_in_its_familys_panel():
    from paper.plots import family_figure

    families = {
        "ripple-strat-gmm-vae": "ripple",
        "oracle": "ripple",
        "fedavg": "global",
        "fedadam": "global",
        "ifca": "clustered",
    }
    curves = {name: _curve(0.5 + 0.05 * i) for i, name in enumerate(families)}
    stamp = {"node": "box", "processor": "x86_64", "cpus": 2, "commit": "abc1234"}
    fig = family_figure(curves, families, ["ripple-strat-gmm-vae", "oracle"], "T1", stamp)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["ripple", "global", "clustered"]
    own = {ax.get_title(): [] for ax in panels}
    for ax in panels:
        labels = [line.get_label() for line in ax.get_lines()]
        own[ax.get_title()] = [lab for lab in labels if not lab.endswith("(reference)")]
        refs = [lab for lab in labels if lab.endswith("(reference)")]
        if ax.get_title() != "ripple":  # the references, repeated in every other panel
            assert refs == ["ripple-strat-gmm-vae (reference)", "oracle (reference)"]
        assert len(ax.collections) == len(own[ax.get_title()])  # one seed band per own method
        colours = [
            str(ln.get_color()) for ln in ax.get_lines() if ln.get_label() in own[ax.get_title()]
        ]
        assert len(set(colours)) == len(colours)  # distinct within a panel
    drawn = [name for names in own.values() for name in names]
    assert sorted(drawn) == sorted(families)  # every method in exactly one panel
    texts = " ".join(t.get_text() for t in fig.texts)
    assert "box" in texts and "2 CPUs" in texts and "abc1234" in texts
    assert "min-max over seeds" in fig.get_suptitle()


def test_table2_bars_group_by_column_with_two_sigma_error_bars():
    from matplotlib.container import BarContainer

    from paper.plots import bars_figure
    from ripple_flwr.runs.statistics import seed_stats

    cols = ["0.01/1", "0.1/1"]
    cells = {
        "ripple-strat": {c: {"zero_shot_accuracy": seed_stats({1: 0.5, 2: 0.6})} for c in cols},
        "fedavg": {"0.01/1": {"zero_shot_accuracy": seed_stats({1: 0.4})}, "0.1/1": None},
        "cfl": dict.fromkeys(cols),  # nothing finished: no bars and no legend entry
    }
    stamp = {"node": "n", "processor": "p", "cpus": 1, "commit": "unknown"}
    ax = bars_figure(cells, cols, "T2", stamp).axes[0]
    ripple, fedavg = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [b.get_height() for b in ripple] == pytest.approx([55.0, 55.0])
    assert [b.get_height() for b in fedavg] == pytest.approx([40.0])  # a missing cell: no bar
    low, high = ripple.errorbar.lines[2][0].get_segments()[0]
    two_sigma = 2 * 100 * np.std([0.5, 0.6], ddof=1)
    assert high[1] - low[1] == pytest.approx(2 * two_sigma)  # from mean - 2 sigma to mean + 2 sigma
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["ripple-strat", "fedavg"]
    colours = [h.get_facecolor() for h in legend.legend_handles]
    assert colours[0] != colours[1]


def test_the_machine_stamp_names_the_commit_or_unknown(tmp_path):
    from paper.plots import ROOT, machine_stamp

    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert machine_stamp()["commit"] == (head or "unknown")
    outside = machine_stamp(tmp_path)
    assert outside["commit"] == "unknown" and outside["cpus"] >= 1


def test_every_registered_method_has_a_family_and_a_table1_row():
    from paper.rows import TABLE1, swept_rows

    for name, spec in METHODS.items():
        assert spec.family in get_args(Family), name
        assert any(cfg["method"] == name for cfg in TABLE1.values()), f"{name} has no row"
    swept = {TABLE1[n]["method"] for n in swept_rows(TABLE1, TABLE1)}
    assert swept == {name for name, spec in METHODS.items() if spec.sweeps_k}


# -- Table 2 ----------------------------------------------------------------------------------
def test_table2_trains_once_per_alpha_train_and_sweeps_on_the_training_clients(tmp_path, capsys):
    trainer, out = FakeTrainer(), tmp_path / "t2"
    argv = [
        "table2", "--clients", "8", "--clients-per-round", "4", "--rounds", "30",
        "--sweep-rounds", "30", "--eval-every", "10",
        "--seeds", "42", "7", "--alphas-train", "0.1", "--alphas-test", "1", "100",
        "--methods", "ripple-strat", "ifca", "fedavg", "--sweep-k", "--out", str(out),
    ]  # fmt: skip
    line = build(argv, capsys, trainer)
    cell = line["cells"]["fedavg"]["0.1/100"]
    assert cell["zero_shot_accuracy"]["per_seed"] == pytest.approx({"42": 0.58, "7": 0.60})
    assert cell["best_cluster_by_train_loss"] is None
    ripple = line["cells"]["ripple-strat"]["0.1/1"]
    assert ripple["best_cluster_by_train_loss"]["mean"] == pytest.approx(0.839)
    assert line["cells"]["ifca"]["0.1/1"]["k"] == PEAK_K  # the sweep's best, on final accuracy
    sweep = line["sweep"]["methods"]["ifca"]["0.1"]
    assert sweep["by_k"]["2"]["zero_shot_accuracy"]["n"] == 1
    # The second alpha_test resumes the first's finished training.
    later = [c for c in trainer.configs if c["alpha-new"] == 100.0]
    for c in later:
        first = c["results-path"].replace("-t100-", "-t1-")
        assert c["resume"] == str(Path(first).with_suffix(".resume.npz"))
    # The sweep at seed 42 and the table's 30 rounds is the table's own run at that K.
    assert len(trainer.configs) == 2 * 2 * 3 + (5 - 1)
    md = (out / "table2.md").read_text()
    assert f"(K={PEAK_K})" in md and "[best cluster: " in md and "K sweep (seeds 42" in md
    assert line["plot"] == str(out / "table2.png") and Path(line["plot"]).is_file()


# -- real runs (tiny federations) -------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.usefixtures("cifar_md5_off", "offline")
def test_table1_runs_cifar10_with_resnet9_from_torchvision_files(tmp_path, capsys):
    write_cifar10(tmp_path / "data", per_batch=40, n_test=20)
    out = tmp_path / "runs"
    argv = [
        "table1",
        "--dataset", "cifar10", "--data-root", str(tmp_path / "data"), "--model", "resnet9",
        "--clients", "4", "--clients-per-round", "4", "--partition-size", "30",
        "--aux-size", "50", "--rounds", "1", "--seeds", "0",
        "--eval-every", "1", "--methods", "fedavg", "ifca", "--out", str(out),
        "--jobs", "1",  # in this process: the fixtures' patches (md5, offline) hold here only
    ]  # fmt: skip
    line = build(argv, capsys, None)
    rows = line["rows"]
    assert set(rows) == {"fedavg", "ifca"}
    assert rows["fedavg"]["bytes_ratio_vs_fedavg"]["mean"] == pytest.approx(1.0)
    # IFCA: K = 10 models down and one up per client, against FedAvg's one and one.
    assert rows["ifca"]["bytes_ratio_vs_fedavg"]["mean"] == pytest.approx((10 + 1) / 2)
    res = json.loads((out / "ifca-k10-r1-seed0.json").read_text())
    assert res["settings"]["model"] == "resnet9"
    assert res["federation"]["image_shape"] == [3, 32, 32]
    assert len(res["assignment"]["labels"]) == 4
    assert (out / "ifca-k10-r1-seed0.assignment.png").stat().st_size > 1000
    assert not (out / "fedavg-k10-r1-seed0.assignment.png").exists()  # one model: nothing to draw
    md = (out / "table1.md").read_text()
    assert "| ifca |" in md and "| fedavg |" in md and (out / "table1.png").is_file()

    # --reuse: a second call reads the finished runs instead of training again.
    again = build([*argv, "--reuse"], capsys, never_train)
    assert again["rows"]["ifca"]["final_accuracy"] == rows["ifca"]["final_accuracy"]


@pytest.mark.slow
def test_table2_scores_new_clients_of_every_method(tmp_path, capsys):
    out = tmp_path / "runs"
    argv = [
        "table2",
        "--dataset", "mnist-5k", "--clients", "6", "--clients-per-round", "3",
        "--partition-size", "60", "--aux-size", "300", "--new-clients", "2",
        "--rounds", "1", "--eval-every", "1", "--seeds", "0",
        "--alphas-train", "0.1", "--alphas-test", "1", "100", "--methods", "fedavg", "ifca", "cfl",
        "--out", str(out),
    ]  # fmt: skip
    line = build(argv, capsys, None)
    for name in ("fedavg", "ifca", "cfl"):
        cell = line["cells"][name]["0.1/1"]
        res = json.loads((out / f"{name}-k10-r1-a0.1-t1-seed0.json").read_text())
        assert cell["zero_shot_accuracy"]["mean"] == res["zero_shot"]["accuracy"]["weighted_mean"]
        assert res["zero_shot"]["clients"] == 2
    ifca = json.loads((out / "ifca-k10-r1-a0.1-t1-seed0.json").read_text())
    assert all(c["chosen"] in range(10) for c in ifca["zero_shot"]["per_client"])
    md = (out / "table2.md").read_text()
    assert "alpha_train/alpha_test 0.1/1 " in md and "alpha_train/alpha_test 0.1/100 " in md
    # The second alpha_test resumed the finished training: same rounds, other new clients.
    t100 = json.loads((out / "ifca-k10-r1-a0.1-t100-seed0.json").read_text())
    assert t100["settings"]["alpha-new"] == 100.0 and t100["settings"]["resume"]
    assert t100["rounds"] == ifca["rounds"]
    assert (
        line["cells"]["ifca"]["0.1/100"]["zero_shot_accuracy"]["mean"]
        == t100["zero_shot"]["accuracy"]["weighted_mean"]
    )
