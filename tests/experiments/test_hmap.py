"""ripple-map: the heterogeneity map's runs, cells, margins, Markdown and figure (fake runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_tables import FakeTrainer

from paper import hmap


@pytest.fixture(autouse=True)
def _restore_output_dir(monkeypatch):
    """hmap.main points $RIPPLE_OUTPUT_DIR at its --out (it is the server); undo that after."""
    import os

    monkeypatch.setenv("RIPPLE_OUTPUT_DIR", os.environ.get("RIPPLE_OUTPUT_DIR", ""))


def run_map(argv, capsys, train) -> dict:
    assert hmap.main([*argv, "--no-progress"], train=train) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_every_cell_row_and_seed_runs_once_with_its_shift_and_new_clients(tmp_path, capsys):
    fake = FakeTrainer()
    argv = ["--cells", "label-skew-0.01", "rotation", "--seeds", "42", "7", "--rounds", "30"]
    argv += [
        "--set",
        "num-partitions=8",
        "--set",
        "clients-per-round=4",
        "--out",
        str(tmp_path / "o"),
    ]
    line = run_map(argv, capsys, fake)
    assert len(fake.configs) == 2 * len(hmap.ROWS) * 2
    by_name = {Path(c["results-path"]).name: c for c in fake.configs}
    rot = by_name["rotation-ifca-r30-seed7.json"]
    assert (rot["dataset"], rot["label-kind"], rot["num-components"]) == (
        "rotated-fashion-mnist",
        "domain",
        4,
    )
    skew = by_name["label-skew-0.01-ripple-unif-r30-seed42.json"]
    assert skew["alpha"] == skew["alpha-new"] == 0.01 and skew["sampling"] == "uniform"
    assert skew["new-clients"] == 50 and skew["new-partition-size"] == 500
    assert skew["best-by-loss"] is True and skew["data-seed"] == skew["seed"] == 42
    assert by_name["label-skew-0.01-fedavg-r30-seed42.json"]["best-by-loss"] is False
    cell = line["cells"]["label-skew-0.01"]
    assert cell["rows"]["oracle"]["final_accuracy"]["n"] == 2
    assert Path(line["plot"]).is_file()


# A small protocol: one cell, three rows, three seeds no development run used.
PROTOCOL = {
    "name": "test-protocol",
    "development_seeds": [42],
    "seeds": [1, 2, 3],
    "rounds": 30,
    "cells": ["label-skew-0.1"],
    "rows": ["ripple-rec", "ifca", "fedavg"],
    "comparisons": {"ripple-rec": ["ifca", "fedavg"]},
}


def test_the_margin_is_the_best_ripple_variant_minus_the_best_other_paired_per_seed():
    def stat(per_seed):
        from ripple_flwr.runs.statistics import seed_stats

        return seed_stats(per_seed)

    rows = {
        "ripple-strat": {"final_accuracy": stat({42: 0.80, 7: 0.84, 123: 0.82})},
        "oracle": {"final_accuracy": stat({42: 0.99, 7: 0.99, 123: 0.99})},  # never compared
        "ripple-unif": {"final_accuracy": stat({42: 0.85, 7: 0.86, 123: 0.87})},
        "fedavg": {"final_accuracy": stat({42: 0.70, 7: 0.72, 123: 0.71})},
        "local": {"final_accuracy": stat({42: 0.78, 7: 0.82, 123: 0.80})},
    }
    m = hmap.margin(rows, "final_accuracy")
    assert (m["ripple"], m["best_other"]) == ("ripple-unif", "local")
    assert m["per_seed"] == pytest.approx({"42": 0.07, "7": 0.04, "123": 0.07})
    # t(0.975, 2) = 4.303: half-width = 4.303 * sd / sqrt(3)
    assert m["half"] == pytest.approx(4.3027 * 0.017320508 / 3**0.5, rel=1e-3)
    assert m["verdict"] == "leads" and m["wins"] == 3
    rows["local"]["final_accuracy"] = stat({42: 0.90, 7: 0.80, 123: 0.86})  # noisy: no winner
    assert hmap.margin(rows, "final_accuracy")["verdict"] == "no clear winner"
    rows["local"]["final_accuracy"] = stat({42: 0.95, 7: 0.97, 123: 0.96})
    assert hmap.margin(rows, "final_accuracy")["verdict"] == "trails"


def test_the_router_comparison_is_paired_at_each_sampler():
    from ripple_flwr.runs.statistics import seed_stats

    rows = {
        name: {"final_accuracy": seed_stats(dict(zip((42, 7), v, strict=True)))}
        for name, v in {
            "ripple-strat": (0.80, 0.82),
            "ripple-strat-mu": (0.81, 0.84),
            "ripple-unif": (0.85, 0.86),
        }.items()
    }
    got = hmap.router_comparison(rows, "final_accuracy")
    assert list(got) == ["stratified"]  # the uniform pair is incomplete
    assert got["stratified"]["per_seed"] == pytest.approx({"42": 0.01, "7": 0.02})


def test_reuse_only_marks_missing_cells_and_trains_nothing(tmp_path, capsys):
    def never(cfg):
        raise AssertionError("nothing may train")

    argv = [
        "--cells",
        "label-skew-1",
        "--seeds",
        "42",
        "--set",
        "num-partitions=8",
        "--set",
        "clients-per-round=4",
    ]
    line = run_map([*argv, "--out", str(tmp_path), "--reuse-only", "--plot", ""], capsys, never)
    assert len(line["missing"]) == len(hmap.ROWS)
    assert "missing" in Path(line["markdown"]).read_text()


def test_the_rows_of_table2_and_the_map_come_from_the_registry(monkeypatch):
    from dataclasses import replace

    from paper.variants import map_rows, table2_rows
    from ripple_flwr.methods import registry

    for name, spec in registry.METHODS.items():
        in_map = {r["method"] for r in map_rows().values()}
        in_table2 = {r["method"] for r in table2_rows().values()}
        assert (name in in_map) == ("map" in spec.benchmarks)
        assert (name in in_table2) == ("table2" in spec.benchmarks)
    # A method that lists itself gets its row, nothing else to edit.
    toy = replace(registry.METHODS["fedavg"], name="toy", benchmarks=("map", "table2"))
    monkeypatch.setitem(registry.METHODS, "toy", toy)
    assert map_rows()["toy"] == {"method": "toy"} and table2_rows()["toy"] == {"method": "toy"}
    assert {"ripple-strat-mu", "ripple-unif-mu"} <= set(map_rows())
    # A clustered rival that takes cluster-optimizer (its spec declares it) also runs with
    # FedYogi per cluster model, on equal terms with Ripple's -yogi rows.
    from ripple_flwr.methods.options import CLUSTER_OPTIMIZER

    for name, spec in registry.METHODS.items():
        takes = spec.family == "clustered" and CLUSTER_OPTIMIZER in spec.options
        row = map_rows().get(f"{name}-yogi")
        if takes and "map" in spec.benchmarks:
            assert row == {"method": name, "cluster-optimizer": "fedyogi"}
        else:
            assert row is None or spec.family != "clustered"
    assert {"ifca-yogi", "cfl-yogi", "pacfl-yogi"} <= set(map_rows())


def test_an_added_row_is_compared_with_the_best_ripple_variant_and_the_best_other_row():
    from ripple_flwr.runs.statistics import seed_stats

    def row(*acc):
        stats = seed_stats(dict(zip((42, 7, 123), acc, strict=True)))
        return {m: stats for m in hmap.METRICS}

    rows = {
        "ripple-strat": row(0.80, 0.82, 0.81),
        "ripple-unif": row(0.70, 0.71, 0.72),
        "fedyogi": row(0.85, 0.86, 0.84),
        "oracle": row(0.99, 0.99, 0.99),  # never a rival
        "pacfl": row(0.90, 0.91, 0.93),
        "ripple-strat-yogi": row(0.60, 0.61, 0.62),
        "ripple-unif-yogi": row(0.95, 0.96, 0.97),  # beyond the paper: never the Ripple side
    }
    out = hmap.addition_margins(rows, "final_accuracy")
    pacfl = out["pacfl"]
    assert pacfl["ripple"]["against"] == "ripple-strat"
    assert pacfl["other"]["against"] == "fedyogi"  # not the oracle, not itself
    assert pacfl["other"]["mean"] == pytest.approx(0.0633, abs=1e-3)
    assert pacfl["other"]["verdict"] == "leads"
    yogi = out["ripple-strat-yogi"]
    assert yogi["ripple"]["against"] == "ripple-strat"  # the best of the paper's variants
    assert yogi["other"]["against"] == "pacfl" and yogi["other"]["verdict"] == "trails"
    assert out["ripple-unif-yogi"]["ripple"]["against"] == "ripple-strat"
    assert out["ripple-unif-yogi"]["ripple"]["verdict"] == "leads"
    assert "fedgwc" not in out  # a row without runs
    # The headline margin is the paper's Ripple: the optimiser rows are neither side of it.
    m = hmap.margin(rows, "final_accuracy")
    assert (m["ripple"], m["best_other"]) == ("ripple-strat", "pacfl")


def test_table1_additions_pair_each_added_row_with_the_best_paper_ripple_and_best_other(
    monkeypatch,
):
    """The added rows of Table 1 are paired per seed against the best paper-rule Ripple row and
    the best other runnable row; rows with no runs and the oracles are never chosen."""
    from paper import evidence as ev
    from paper import evidence_map_fed as fed

    def row(*acc):
        per = {str(s): a for s, a in zip((42, 7, 123), acc, strict=True)}
        return {"final_accuracy": {"per_seed": per, "mean": sum(acc) / len(acc), "n": len(acc)}}

    table = {
        "dataset": "fashion-mnist",
        "rounds": 300,
        "seeds": [42, 7, 123],
        "rows": {
            "ripple-unif-gmm-vae": row(0.90, 0.91, 0.92),
            "ripple-strat-gmm-vae": row(0.80, 0.81, 0.82),
            "oracle": row(0.99, 0.99, 0.99),
            "fedavg": row(0.60, 0.62, 0.61),
            "ifca": row(0.70, 0.71, 0.72),
            "pacfl": row(0.70, 0.72, 0.70),
            "fedgwc": {"final_accuracy": {"per_seed": {}, "mean": None, "n": 0}},
        },
    }
    monkeypatch.setattr(ev, "load", lambda name: table)
    text = fed._table1_additions()
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(lines) == 1 and lines[0].startswith("- PACFL: 70.7%")
    assert "-20.3 ± 3.8 (0/3) vs Ripple-Unif (GMM-VAE): trails" in lines[0]
    assert "-0.3 ± 3.8 (1/3) vs IFCA: no clear winner" in lines[0]
    assert "oracle" not in lines[0].lower() and "FedGWC" not in text


def test_where_they_win_groups_each_added_rows_cells_by_verdict():
    """The summary line of an added row names each cell under the verdict it got, on each
    side; a cell without runs (mean None) is named nowhere."""
    from paper import evidence_map_fed as fed

    def side(verdict, mean=0.01):
        return {"verdict": verdict, "mean": mean}

    d = {
        "cells": {
            "a": {
                "additions": {
                    "final_accuracy": {"pacfl": {"ripple": side("leads"), "other": side("trails")}}
                }
            },
            "b": {
                "additions": {
                    "final_accuracy": {"pacfl": {"ripple": side("trails"), "other": side("trails")}}
                }
            },
            "c": {"additions": {"final_accuracy": {"pacfl": {"ripple": side("leads", None)}}}},
            "d": {},
        }
    }
    text = fed._where_they_win(d)
    line = next(x for x in text.splitlines() if x.startswith("- "))
    assert line == (
        "- **PACFL**: against Ripple (paper's rule), leads in a; trails in b; "
        "against the best other method, trails in a, b."
    )


@pytest.mark.parametrize(
    "path", sorted((Path(hmap.__file__).parent / "protocols").glob("*.json")), ids=lambda p: p.stem
)
def test_every_committed_protocol_is_fresh_and_names_only_what_the_map_has(path):
    proto = hmap.load_protocol(path)
    assert not set(proto["seeds"]) & {0, 42, 7, 123, 5, 9} and len(proto["seeds"]) == 5
    assert proto["recommended"] in proto["rows"] and proto["paper_row"] in proto["rows"]
    assert "ifca" in proto["rows"] and set(proto["cells"]) == set(hmap.CELLS)
    # Each Ripple row of the headline is compared with every rival (not Ripple) it runs.
    rivals = {r for r in proto["rows"] if hmap.ROWS[r]["method"] not in ("ripple", "oracle")}
    for row in (proto["recommended"], proto["paper_row"]):
        assert rivals <= set(proto["comparisons"][row])


def test_a_protocol_fixes_the_runs_and_its_comparisons_use_shared_seeds(tmp_path, capsys):
    proto = dict(PROTOCOL)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(proto))
    fake = FakeTrainer()
    out = ["--set", "num-partitions=8", "--set", "clients-per-round=4", "--out", str(tmp_path)]
    line = run_map(["--protocol", str(path), *out], capsys, fake)
    assert len(fake.configs) == 3 * 3  # rows x seeds, nothing else
    assert {c["num-server-rounds"] for c in fake.configs} == {30}
    rec = line["protocol"]
    assert rec["name"] == "test-protocol" and len(rec["sha256"]) == 64
    verdicts = line["cells"]["label-skew-0.1"]["protocol"]
    assert set(verdicts) == {"ripple-rec - ifca", "ripple-rec - fedavg"}
    assert verdicts["ripple-rec - ifca"]["final_accuracy"]["n"] == 3
    assert (
        "Pre-registered comparisons (protocol `test-protocol`" in Path(line["markdown"]).read_text()
    )
    # Flags that the protocol fixes are refused, and so is a protocol on development seeds.
    with pytest.raises(SystemExit) as stop:
        hmap.main(["--protocol", str(path), "--seeds", "4", "5", "6", *out])
    assert stop.value.code == 2 and "drop --seeds" in capsys.readouterr().err
    path.write_text(json.dumps({**proto, "seeds": [42, 1, 2]}))
    with pytest.raises(SystemExit) as stop:
        hmap.main(["--protocol", str(path), *out])
    assert stop.value.code == 2 and "development seeds" in capsys.readouterr().err


def test_train_only_runs_the_contenders_first_and_the_rest_waits(tmp_path, capsys):
    proto = dict(PROTOCOL)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(proto))
    out = ["--set", "num-partitions=8", "--set", "clients-per-round=4", "--out", str(tmp_path)]
    fake = FakeTrainer()
    line = run_map(
        ["--protocol", str(path), "--train-only", "ripple-rec", "ifca", *out], capsys, fake
    )
    assert sorted({c["method"] for c in fake.configs}) == ["ifca", "ripple"]
    assert len(fake.configs) == 2 * 3
    verdicts = line["cells"]["label-skew-0.1"]["protocol"]
    assert verdicts["ripple-rec - ifca"]["final_accuracy"]["n"] == 3
    assert verdicts["ripple-rec - fedavg"]["final_accuracy"]["verdict"] == "too few seeds"
    assert len(line["missing"]) == 3 and all("fedavg" in m for m in line["missing"])
    # The next call trains the waiting row only: the finished runs are read (--reuse).
    fake2 = FakeTrainer()
    line = run_map(["--protocol", str(path), "--reuse", *out], capsys, fake2)
    assert {c["method"] for c in fake2.configs} == {"fedavg"} and not line["missing"]
    with pytest.raises(SystemExit) as stop:
        hmap.main(["--protocol", str(path), "--train-only", "cfl", *out])
    assert stop.value.code == 2 and "not among the map's rows" in capsys.readouterr().err


def test_an_extension_adds_rows_and_their_comparisons_and_nothing_else(tmp_path, capsys):
    base = {
        "name": "base",
        "development_seeds": [42],
        "seeds": [1, 2, 3],
        "rounds": 30,
        "cells": ["label-skew-0.1", "label-skew-1"],
        "rows": ["ripple-rec", "ifca"],
        "comparisons": {"ripple-rec": ["ifca"]},
    }
    ext = {
        "name": "ext",
        "extends": "base",
        "rows": ["ifca-yogi", "fedavg"],
        "comparisons": {"ripple-rec": ["ifca-yogi", "fedavg"]},
        "row_cells": {"fedavg": ["label-skew-1"]},
    }
    (tmp_path / "base.json").write_text(json.dumps(base))
    path = tmp_path / "ext.json"
    path.write_text(json.dumps(ext))
    merged = hmap.load_protocol(path)
    assert merged["rows"] == ["ripple-rec", "ifca", "ifca-yogi", "fedavg"]
    assert merged["comparisons"] == {"ripple-rec": ["ifca", "ifca-yogi", "fedavg"]}
    assert merged["seeds"] == [1, 2, 3] and [c["name"] for c in merged["chain"]] == ["base", "ext"]
    fake = FakeTrainer()
    out = ["--set", "num-partitions=8", "--set", "clients-per-round=4", "--out", str(tmp_path)]
    line = run_map(["--protocol", str(path), *out], capsys, fake)
    # 2 cells x 3 rows + fedavg in one cell, 3 seeds each.
    assert len(fake.configs) == (2 * 3 + 1) * 3
    assert [c["name"] for c in line["protocol"]["chain"]] == ["base", "ext"]
    skew01 = line["cells"]["label-skew-0.1"]
    assert "fedavg" not in skew01["rows"] and "ripple-rec - fedavg" not in skew01["protocol"]
    assert (
        line["cells"]["label-skew-1"]["protocol"]["ripple-rec - fedavg"]["final_accuracy"]["n"] == 3
    )
    # What an extension may not do: change the base's seeds, or compare two base rows.
    for bad, said in (
        ({**ext, "seeds": [7, 8, 9]}, "may add rows and their comparisons only"),
        ({**ext, "comparisons": {"ifca": ["ripple-rec"]}}, "rows of base alone"),
        ({**ext, "rows": ["ifca"]}, "it repeats ifca"),
        ({**ext, "row_cells": {"fedavg": ["rotation"]}}, "row_cells of fedavg"),
    ):
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=said):
            hmap.load_protocol(path)
