"""ripple-sweep and the executor: the grid, bad input, failures, Ctrl-C, and the same numbers
whether a run goes serially in this process or as a Ray task (a local Ray here; a two-node
cluster in tests/processes/test_ray_cluster.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_tables import FakeTrainer

from ripple_flwr.experiments import sweep
from ripple_flwr.experiments.executor import Link
from ripple_flwr.experiments.runner import chains

# Runs that need no router, so a results file depends on its settings alone.
TINY = [
    "dataset=mnist-5k", "num-partitions=6", "partition-size=60", "aux-size=300",
    "num-components=2", "num-server-rounds=2", "clients-per-round=3", "eval-every=1",
    "batch-size=16",
]  # fmt: skip
# What may differ between two executions of one run: timings, and the output folder's paths.
VOLATILE = {"timings", "wall_seconds", "server_seconds", "saved_run", "server_folders"}


def comparable(results: dict) -> dict:
    """``results`` without timings and paths (``settings.results-path`` included)."""

    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k not in VOLATILE | {"results-path"}}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v

    return strip(results)


def sets(values: list[str]) -> list[str]:
    return [w for v in values for w in ("--set", v)]


def run_sweep(argv: list[str], capsys, train=None) -> tuple[int, dict]:
    code = sweep.main([*argv, "--no-progress"], train=train)
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.fixture(autouse=True)
def _restore_output_dir(monkeypatch):
    """sweep.main points $RIPPLE_OUTPUT_DIR at its --out (it is the server); undo that after."""
    import os

    monkeypatch.setenv("RIPPLE_OUTPUT_DIR", os.environ.get("RIPPLE_OUTPUT_DIR", ""))


def test_the_grid_is_every_combination_with_typed_values_and_safe_names():
    grid = sweep.parse_grid(["method=fedavg,ifca alpha=0.01,0.1", "num-components=4"])
    assert grid == {"method": ["fedavg", "ifca"], "alpha": [0.01, 0.1], "num-components": [4]}
    points = sweep.grid_points(grid)
    assert len(points) == 4 and points[1] == {"method": "fedavg", "alpha": 0.1, "num-components": 4}
    assert sweep.point_name(points[1]) == "method-fedavg_alpha-0.1_num-components-4"
    assert sweep.point_name({"data-root": "/a b/../c"}) == "data-root-ab..c"
    for bad in (["method"], ["method="], ["method=a", "method=b"]):
        with pytest.raises(ValueError, match="--grid"):
            sweep.parse_grid(bad)


def test_bad_input_stops_with_one_line_before_any_run(tmp_path, capsys):
    def never(cfg):
        raise AssertionError("nothing may run")

    out = ["--out", str(tmp_path)]
    for argv, needle in (
        (["--grid", "methd=fedavg", *sets(TINY)], "unknown run-config key"),
        (["--grid", "method=fedavgg", *sets(TINY)], "not one of"),
        (["--grid", "method=fedavg", "--set", "num-partitions=0"], "num-partitions=N"),
        (["--grid", "method=fedavg", *sets(TINY), "--jobs", "0"], "--jobs must be at least 1"),
    ):
        with pytest.raises(SystemExit) as stop:
            sweep.main([*argv, *out], train=never)
        assert stop.value.code == 2  # as ripple-tables and ripple-map refuse
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, err


def test_a_failed_run_is_reported_with_its_settings_and_the_others_go_on(tmp_path, capsys):
    fake = FakeTrainer()

    def train(cfg):
        if cfg["method"] == "ifca" and cfg["seed"] == 1:
            raise RuntimeError("boom")
        return fake(cfg)

    argv = ["--grid", "method=fedavg,ifca", "--seeds", "0", "1", *sets(TINY)]
    code, line = run_sweep([*argv, "--out", str(tmp_path)], capsys, train)
    assert code == 1
    assert list(line["failed"]) == ["method-ifca-seed1.json"]
    assert "RuntimeError: boom" in line["failed"]["method-ifca-seed1.json"]
    rows = {r["name"]: r for r in line["rows"]}
    assert rows["method-fedavg"]["final_accuracy"]["n"] == 2
    assert rows["method-ifca"]["final_accuracy"]["n"] == 1
    assert rows["method-ifca"]["seeds_missing"] == [1]
    assert len(fake.configs) == 3  # the run after the failed one still ran


def test_ctrl_c_keeps_the_finished_runs_and_reuse_goes_on_from_them(tmp_path, capsys):
    fake, interrupt = FakeTrainer(), [True]

    def train(cfg):
        if fake.configs and interrupt[0]:
            raise KeyboardInterrupt
        return fake(cfg)

    keep = tmp_path / "kept"
    argv = ["--grid", "method=fedavg,ifca", *sets(TINY), "--out", str(tmp_path / "o")]
    argv += ["--keep", str(keep), "--no-progress"]
    assert sweep.main(argv, train=train) == 130
    assert [p.name for p in keep.iterdir()] == ["method-fedavg-seed0.json"]
    interrupt[0] = False
    code, _ = run_sweep([*argv, "--reuse"], capsys, train)
    assert code == 0
    assert [Path(c["results-path"]).name for c in fake.configs] == [
        "method-fedavg-seed0.json",
        "method-ifca-seed0.json",
    ]  # the finished run was read back, not trained again


def test_a_chain_keeps_a_resumed_run_after_the_run_it_resumes():
    def link(name, after=None):
        return Link({"results-path": f"/o/{name}.json"}, after)

    first, later, alone = link("a"), link("b", "/o/a.resume.npz"), link("c", "/o/x.resume.npz")
    jobs = chains([later, alone, first])
    assert sorted([lk.path for lk in j.links] for j in jobs) == [
        ["/o/a.json", "/o/b.json"],
        ["/o/c.json"],
    ]


@pytest.fixture(scope="module")
def serial_runs(tmp_path_factory):
    """Three tiny real runs, serially in this process: {results name: results}."""
    out = tmp_path_factory.mktemp("serial")
    argv = ["--grid", "method=fedavg,ifca,local", *sets(TINY), "--out", str(out)]
    with pytest.MonkeyPatch.context() as mp:  # sweep.main makes this process the server
        mp.setenv("RIPPLE_OUTPUT_DIR", os.environ.get("RIPPLE_OUTPUT_DIR", ""))
        assert sweep.main([*argv, "--jobs", "1", "--no-progress"]) == 0
    return {p.name: json.loads(p.read_text()) for p in sorted(out.glob("method-*.json"))}


@pytest.fixture
def local_ray_tmp():
    """A short temp folder for this process's local Ray (AF_UNIX paths), removed afterwards.

    Not conftest's ``ray_tmp``: that one puts a test in the "flower-processes" group, which
    runs one after another the tests that start Flower processes (ports, cores, timeouts);
    this test starts none, only a Ray of its own (its temp folder, its ports), so it may run
    beside them on another worker."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="rf-ray-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_a_run_gives_the_same_results_file_serially_and_as_a_local_ray_task(
    serial_runs, tmp_path, capsys, local_ray_tmp, monkeypatch
):
    monkeypatch.setenv("RAY_TMPDIR", str(local_ray_tmp))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    argv = ["--grid", "method=fedavg,ifca,local", *sets(TINY), "--out", str(tmp_path)]
    code, line = run_sweep([*argv, "--jobs", "2"], capsys)
    assert code == 0, line
    assert all(r["ray_node"] for r in line["ran"]), line["ran"]  # every run was a Ray task
    ray_runs = {p.name: json.loads(p.read_text()) for p in sorted(tmp_path.glob("method-*.json"))}
    assert list(ray_runs) == list(serial_runs)
    for name, results in ray_runs.items():
        assert comparable(results) == comparable(serial_runs[name]), name


def test_tracker_gets_every_finished_run_of_a_sweep(tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    fake, out = FakeTrainer(), tmp_path / "o"
    argv = ["--grid", "method=fedavg,ifca", "--seeds", "0", "1", *sets(TINY), "--out", str(out)]
    code, line = run_sweep([*argv, "--tracker", "tensorboard"], capsys, fake)
    assert code == 0
    runs = sorted(p.name for p in (out / "tracking").iterdir())
    assert runs == sorted(Path(c["results-path"]).stem for c in fake.configs) and len(runs) == 4
    for cfg in fake.configs:
        events = EventAccumulator(str(out / "tracking" / Path(cfg["results-path"]).stem))
        events.Reload()
        final = json.loads(Path(cfg["results-path"]).read_text())["accuracy_per_round"]
        last = final[max(final, key=int)]["weighted_mean"]
        assert events.Scalars("accuracy/weighted_mean")[-1].value == pytest.approx(last, rel=1e-6)
