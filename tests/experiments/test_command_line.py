"""The tables, the map and sweeps refuse what would give a silently wrong result, before any run.

One merge rule (``experiments/compose.py``): ``--set`` only adds keys, so it can never
relabel a row, change a cell's shift or override a flag; every run's config, dataset and
checkpoint are checked before Ray or any training starts, one line per distinct problem.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_tables import SMALL, FakeTrainer, never_train

from paper import hmap, tables
from ripple_flwr.experiments import sweep


@pytest.fixture(autouse=True)
def _restore_output_dir(monkeypatch):
    """The commands point $RIPPLE_OUTPUT_DIR at their --out; undo that after."""
    import os

    monkeypatch.setenv("RIPPLE_OUTPUT_DIR", os.environ.get("RIPPLE_OUTPUT_DIR", ""))


def refused(main, argv: list[str], capsys) -> str:
    """``main(argv)`` stops with exit 2 before training anything; its message."""
    try:
        rc = main(argv, train=never_train)
    except SystemExit as stop:  # argparse's p.error
        rc = stop.code
    assert rc == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "key", "owner"),
    [
        (["--set", "method=local"], "method", "row 'fedavg'"),
        (["--set", "num-server-rounds=7"], "num-server-rounds", "--rounds"),
        (["--alpha", "0.1", "--set", "alpha=0.5"], "alpha", "--alpha"),
        (["--set", "seed=3"], "seed", "--seeds"),
    ],
)
def test_a_set_key_the_table_defines_is_refused_naming_key_and_owner(
    tmp_path, capsys, extra, key, owner
):
    argv = ["table1", *SMALL, "--methods", "fedavg", "--out", str(tmp_path), *extra]
    err = refused(tables.main, argv, capsys)
    assert f"--set {key}=" in err and owner in err
    assert len([line for line in err.splitlines() if line.startswith("ripple-tables:")]) == 1


@pytest.mark.parametrize("rounds", ["0", "-1"])
def test_zero_or_negative_rounds_are_refused_not_read_as_the_default(tmp_path, capsys, rounds):
    err = refused(tables.main, ["table1", "--rounds", rounds, "--out", str(tmp_path)], capsys)
    assert f"--rounds {rounds}" in err


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        (["--set", "nosuch-key=1"], "nosuch-key"),
        (["--dataset", "nosuch"], "nosuch"),
        (["--alpha", "-1"], "alpha"),
        (["--checkpoint", "/nonexistent/ckpt.pt"], "/nonexistent/ckpt.pt"),
    ],
)
def test_a_bad_run_is_refused_in_one_line_before_any_run(tmp_path, capsys, extra, names):
    argv = ["table1", *SMALL, "--methods", "fedavg", "ifca", "--out", str(tmp_path), *extra]
    err = refused(tables.main, argv, capsys)
    lines = [line for line in err.splitlines() if line.startswith("ripple-tables:")]
    assert len(lines) == 1 and names in lines[0]  # the same problem in every run: said once


def test_a_corrupt_checkpoint_is_refused_before_any_run(tmp_path, capsys):
    bad = tmp_path / "ckpt.pt"
    bad.write_bytes(b"not a torch file")
    argv = ["table1", *SMALL, "--methods", "fedavg", "--out", str(tmp_path / "o")]
    err = refused(tables.main, [*argv, "--checkpoint", str(bad)], capsys)
    assert "ckpt.pt" in err and "Traceback" not in err


def test_the_refusal_starts_no_ray(tmp_path):
    code = (
        "import sys\n"
        "from paper import tables\n"
        f"rc = tables.main(['table1', '--methods', 'fedavg', '--set', 'nosuch=1', '--out', "
        f"{str(tmp_path)!r}])\n"
        "print(json.dumps({'rc': rc, 'ray': 'ray' in sys.modules}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", "import json\n" + code], capture_output=True, text=True, check=False
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"rc": 2, "ray": False}
    assert "nosuch" in done.stderr


def test_failed_runs_are_not_reported_as_reuse_only(tmp_path, capsys):
    def failing(cfg: dict) -> dict:
        raise RuntimeError("boom")

    argv = ["table1", *SMALL, "--methods", "fedavg", "--seeds", "42", "--jobs", "1"]
    assert tables.main([*argv, "--out", str(tmp_path), "--no-progress"], train=failing) == 1
    md = (tmp_path / "table1.md").read_text()
    assert "--reuse-only" not in md and ": failed (RuntimeError: boom" in md


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--set", "alpha=0.5"], "cell 'label-skew-1'"),
        (["--set", "method=local"], "row 'fedavg'"),
        (["--rounds", "-1"], "--rounds -1"),
        (["--eval-every", "0"], "--eval-every 0"),
    ],
)
def test_the_map_refuses_the_same_way(tmp_path, capsys, extra, needle):
    argv = ["--cells", "label-skew-1", "--methods", "fedavg", "--seeds", "42"]
    argv += ["--set", "num-partitions=8", "--set", "clients-per-round=4", "--out", str(tmp_path)]
    err = refused(hmap.main, [*argv, *extra], capsys)
    assert needle in err


def test_the_maps_protocol_may_change_and_its_title_and_json_say_so(tmp_path, capsys):
    fake = FakeTrainer()
    argv = ["--cells", "label-skew-1", "--methods", "fedavg", "--seeds", "42", "--rounds", "20"]
    argv += ["--set", "num-partitions=8", "--set", "clients-per-round=4", "--out", str(tmp_path)]
    assert hmap.main([*argv, "--no-progress"], train=fake) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["base"]["num-partitions"] == 8
    assert "8 clients" in Path(line["markdown"]).read_text()
    assert {c["alpha"] for c in fake.configs} == {1.0}  # the cell's, never a --set


def test_a_sweep_refuses_a_set_key_it_also_sweeps_or_its_seed(tmp_path, capsys):
    base = ["--out", str(tmp_path), "--set", "num-partitions=4"]
    for extra, needle in (
        (["--grid", "alpha=0.1,1", "--set", "alpha=0.5"], "--grid"),
        (["--set", "seed=3"], "--seeds"),
    ):
        with pytest.raises(SystemExit) as stop:
            sweep.main([*base, *extra], train=never_train)
        assert stop.value.code == 2
        assert needle in capsys.readouterr().err


@pytest.mark.parametrize("command", ["tables", "hmap"])
def test_the_paper_commands_outside_a_checkout_say_where_they_run(command, tmp_path, monkeypatch):
    """ripple-tables / ripple-map: paper/ is not installed; elsewhere one line and exit 2."""
    from ripple_flwr.experiments import paper_entry

    monkeypatch.chdir(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", f"from {paper_entry.__name__} import {command}; exit({command}())"],
        capture_output=True,
        text=True,
        check=False,
    )
    name = {"tables": "ripple-tables", "hmap": "ripple-map"}[command]
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"{name} runs from a source checkout of ripple-flwr (cd into it, or into a folder "
        "under it); the installed package holds the sweep engine (ripple-sweep)"
    ]
    inside = tmp_path / "checkout" / "docs"
    (tmp_path / "checkout" / "paper").mkdir(parents=True)
    inside.mkdir()
    (tmp_path / "checkout" / "paper" / "__init__.py").write_text("")
    (tmp_path / "checkout" / "paper" / f"{command}.py").write_text("def main():\n    return 7\n")
    monkeypatch.chdir(inside)  # a folder under a checkout finds it
    done = subprocess.run(
        [sys.executable, "-c", f"from {paper_entry.__name__} import {command}; exit({command}())"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 7


@pytest.mark.parametrize("flag", ["--out", "--keep", "--json", "--md"])
def test_an_output_under_a_file_is_refused_naming_the_flag(tmp_path, capsys, flag):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("mine")
    argv = ["table1", "--methods", "fedavg", "--out", str(tmp_path / "o"), flag]
    err = refused(tables.main, [*argv, str(blocker / "sub")], capsys)
    assert flag in err and "notes.txt" in err and "Traceback" not in err
    assert blocker.read_text() == "mine"


def test_reuse_only_still_refuses_a_run_no_command_could_make(tmp_path, capsys):
    argv = ["table1", *SMALL, "--methods", "fedavg", "--reuse-only", "--out", str(tmp_path)]
    err = refused(tables.main, [*argv, "--partition-size", "1"], capsys)
    assert "partition-size" in err


@pytest.mark.parametrize(
    "extra", [["--alphas-test", "-1"], ["--new-clients", "5"], ["--seeds", "42", "42"]]
)
def test_table1_refuses_table2_flags_and_repeated_seeds(tmp_path, capsys, extra):
    err = refused(tables.main, ["table1", "--out", str(tmp_path), *extra], capsys)
    assert extra[0] in err


def test_a_refusal_names_the_flag_the_user_typed(tmp_path, capsys):
    argv = ["table2", *SMALL, "--methods", "fedavg", "--out", str(tmp_path)]
    err = refused(tables.main, [*argv, "--alphas-test", "-1"], capsys)
    assert "alpha-new" in err and "(set by --alphas-test)" in err


def test_a_sweep_with_a_missing_checkpoint_is_refused_in_one_line(tmp_path, capsys):
    argv = ["--set", "num-partitions=4", "--set", "clients-per-round=2", "--out", str(tmp_path)]
    rc = sweep.main([*argv, "--set", "checkpoint=/nonexistent/c.pt"], train=never_train)
    assert rc == 2 and "ripple-sweep: checkpoint:" in capsys.readouterr().err
