"""No silent wrong results (issue 58): each probe finding, refused in one line or fixed.

A sweep's grid never loses a key to a flag; a key the run's method does not read is refused
(and a table leaves it out of the rows that do not read it); too few nodes stops the run
before any pre-training; the refusal of a results-path gives an example that works;
``ripple-config check`` names a typo offline; ``new-partition-size = 1`` is refused by the
parser; and the smaller ones (the status's stage, ``pretrain_vae.py --data-root``,
``onboard.py`` on a method that saves no run, ``ripple-status`` on a link loop or a results
file without its status, the onboarding shape message).
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import FakeGrid, tiny_run_config
from test_sweep import TINY, run_sweep, sets
from test_tables import FakeTrainer

from ripple_flwr.app.run_config import parse_run_config, unread_keys
from ripple_flwr.app.server import run as server_run
from ripple_flwr.app.server.roster.node_wait import (
    NotEnoughClientsError,
    wait_for_nodes,
)
from ripple_flwr.app.server.run import expected_failure, run_server
from ripple_flwr.cli import config as config_cli
from ripple_flwr.cli import onboard as onboard_cli
from ripple_flwr.cli import status as status_cli
from ripple_flwr.experiments import sweep
from ripple_flwr.experiments.compose import PlanError, compose, defined_by, merge_defined
from ripple_flwr.methods.registry import METHODS, all_options
from ripple_flwr.runs.outputs import confined_results_path
from ripple_flwr.settings import ConfigError, Option, RunSettings


@pytest.fixture(autouse=True)
def _restore_output_dir(monkeypatch):
    """sweep.main points $RIPPLE_OUTPUT_DIR at its --out; undo that after."""
    import os

    monkeypatch.setenv("RIPPLE_OUTPUT_DIR", os.environ.get("RIPPLE_OUTPUT_DIR", ""))


def other_value(opt: Option):
    """A valid value of ``opt`` other than its default."""
    d = opt.default
    if opt.choices:
        candidates = [c for c in opt.choices if c != d]
    elif isinstance(d, bool):
        candidates = [not d]
    elif isinstance(d, int):
        candidates = [d + 1, d - 1, d * 2]
    elif isinstance(d, float):
        candidates = [d * 0.5, d + 0.1, 0.5, d - 0.1] if d else [0.5, 0.1]
    else:
        candidates = [f"{d}x"]
    for value in candidates:
        try:
            opt.check(value)
        except ConfigError:
            continue
        return value
    raise AssertionError(f"no other valid value of {opt.key}")


# -- 1. a sweep's grid ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("grid", "needle"),
    [("seed=1,2", "--seeds 1 2"), ("results-path=a.json,b.json", "--out")],
)
def test_a_grid_key_a_flag_owns_is_refused_with_the_fix(grid, needle, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        sweep.main(["--grid", grid, *sets(TINY), "--out", str(tmp_path)], train=FakeTrainer())
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1, err


def test_no_owner_of_a_key_silently_overrides_another():
    with pytest.raises(PlanError, match="seed is set by --grid"):
        merge_defined(defined_by({"seed": 1}, "--grid"), defined_by({"seed": 0}, "--seeds"))
    merged = merge_defined(defined_by({"a": 1}, "x"), defined_by({"b": 2}, "y"))
    assert merged == {"a": (1, "x"), "b": (2, "y")}


def test_a_set_key_applies_only_to_the_points_that_read_it_and_the_title_says_so(tmp_path, capsys):
    fake = FakeTrainer()
    argv = ["--grid", "method=fedavg,ripple", *sets([*TINY, "cluster-optimizer=fedyogi"])]
    code, line = run_sweep([*argv, "--out", str(tmp_path)], capsys, fake)
    assert code == 0
    by_method = {cfg["method"]: cfg for cfg in fake.configs}
    assert "cluster-optimizer" not in by_method["fedavg"]
    assert by_method["ripple"]["cluster-optimizer"] == "fedyogi"
    assert "cluster-optimizer=fedyogi applies only" in line["left_out"]
    assert "method-fedavg" in line["left_out"] and "method-ripple" not in line["left_out"]
    md = Path(line["markdown"]).read_text()
    assert "Left out: cluster-optimizer=fedyogi" in md


# -- 2. options belong to methods ----------------------------------------------------------
def test_every_option_is_refused_under_a_method_that_does_not_read_it():
    """Over the registry: each method option, set away from its default, under each method
    that does not declare it, is refused naming the key and a method that reads it."""
    checked = 0
    for name, spec in METHODS.items():
        own = {o.key for o in spec.options}
        for opt in all_options():
            if opt.key in own:
                continue
            value = other_value(opt)
            with pytest.raises(ConfigError, match=re.escape(opt.key)) as err:
                parse_run_config({"method": name, opt.key: value})
            readers = [m for m, s in METHODS.items() if opt.key in {o.key for o in s.options}]
            assert any(m in str(err.value) for m in readers)
            checked += 1
    assert checked > len(METHODS)  # the registry has options most methods do not read


def test_a_method_reads_its_own_options_and_the_router_keys_only_with_a_router():
    for name, spec in METHODS.items():
        for opt in spec.options:  # its own option alone: read (unless gated below)
            settings = RunSettings.from_run_config(
                {"method": name, opt.key: other_value(opt)}, all_options()
            )
            gated = spec.unread(settings) if spec.unread else {}
            assert (opt.key in unread_keys(settings)) == (opt.key in gated), (name, opt.key)
        router = {"method": name, "pretrain-steps": 10}
        if spec.needs_router:
            parse_run_config(router)
        else:
            with pytest.raises(ConfigError, match="pretrain-steps"):
                parse_run_config(router)


@pytest.mark.parametrize(
    ("cfg", "key"),
    [
        ({"method": "ripple", "sampling": "uniform", "strat-order": "mass"}, "strat-order"),
        ({"method": "ripple", "fedopt-eta": 0.5}, "fedopt-eta"),
        ({"method": "ripple", "cluster-optimizer": "fedyogi", "fedavgm-momentum": 0.5}, "fedavgm"),
        ({"method": "flux", "cluster-optimizer": "fedavgm"}, "cluster-optimizer"),
        ({"method": "ifca", "cluster-optimizer": "fedyogi", "fedavgm-momentum": 0.5}, "fedavgm"),
    ],
)
def test_a_key_its_own_method_does_not_read_in_this_setting_is_refused(cfg, key):
    with pytest.raises(ConfigError, match=key):
        parse_run_config(cfg)


def test_a_fedavg_run_with_cluster_optimizer_fails_with_a_status_naming_it(cache_dir, tmp_path):
    cfg = tiny_run_config(
        cache_dir,
        method="fedavg",
        **{"cluster-optimizer": "fedyogi", "results-path": str(tmp_path / "r.json")},
    )
    with pytest.raises(ConfigError, match="cluster-optimizer"):
        run_server(FakeGrid(cfg), cfg)
    status = json.loads((tmp_path / "r.status").read_text())
    assert status["status"] == "failed" and "cluster-optimizer" in status["error"]


def test_a_table_leaves_a_set_key_out_of_the_rows_that_do_not_read_it():
    user = {"cluster-optimizer": "fedyogi"}
    fedavg = compose(defined_by({"method": "fedavg"}, "row"), user)
    ripple = compose(defined_by({"method": "ripple"}, "row"), user)
    assert "cluster-optimizer" not in fedavg and ripple["cluster-optimizer"] == "fedyogi"
    from paper.rows import left_out

    rows = {"fedavg": {"method": "fedavg"}, "ripple": {"method": "ripple"}}
    assert "(not fedavg)" in left_out(user, rows, rows)
    assert left_out(user, rows, ["ripple"]) == ""


# -- 3. too few nodes ----------------------------------------------------------------------
class Nodes:
    def __init__(self, n: int) -> None:
        self.n = n

    def get_node_ids(self) -> list[int]:
        return list(range(1, self.n + 1))


def test_a_settled_simulation_short_of_nodes_fails_at_once_not_after_the_timeout():
    t0 = time.monotonic()
    with pytest.raises(NotEnoughClientsError, match="num-supernodes=3"):
        wait_for_nodes(Nodes(2), 3, 60.0, poll=0.05, final_once_settled=True, settle=0.2)
    assert time.monotonic() - t0 < 5
    assert wait_for_nodes(Nodes(3), 3, 60.0, final_once_settled=True) == [1, 2, 3]


def test_a_shortage_stops_before_the_data_and_the_router_in_one_line(
    cache_dir, tmp_path, monkeypatch, caplog
):
    """num-partitions=3 on 2 nodes: refused while waiting for nodes, nothing prepared."""

    def never(*a, **k):
        raise AssertionError("prepared a run that has too few nodes")

    monkeypatch.setattr(server_run, "prepare_run", never)
    cfg = tiny_run_config(
        cache_dir,
        method="ripple",
        **{"num-partitions": 3, "node-wait-timeout": 1.0, "results-path": str(tmp_path / "s.json")},
    )
    with caplog.at_level(logging.ERROR), pytest.raises(NotEnoughClientsError):
        run_server(FakeGrid(cfg, num_nodes=2), cfg)
    status = json.loads((tmp_path / "s.status").read_text())
    assert status["status"] == "failed" and status["stage"] == "waiting for nodes"
    assert "NotEnoughClientsError" in status["error"]
    assert "Ripple run failed (waiting for nodes)" in caplog.text
    # The same error later (a client lost after the query round) is one line too.
    assert expected_failure(NotEnoughClientsError("x"), "rounds")


# -- 4. results-path -----------------------------------------------------------------------
def test_the_results_path_refusal_suggests_a_path_that_is_accepted(tmp_path, monkeypatch):
    root = tmp_path / "server-out"
    root.mkdir()
    monkeypatch.setenv("RIPPLE_OUTPUT_DIR", str(root))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        confined_results_path(parse_run_config({"results-path": "outputs/fedavg.json"}))
    suggested = re.search(r"results-path='([^']+)'", str(err.value).split("e.g. ")[1]).group(1)
    assert confined_results_path(parse_run_config({"results-path": suggested})).parent == root
    relative = re.search(r" or '([^']+)'", str(err.value)).group(1)
    assert confined_results_path(parse_run_config({"results-path": relative})).parent == root


# -- 5. a typo in a run-config key ---------------------------------------------------------
def test_ripple_config_check_names_a_typo_and_an_unread_key_offline(capsys):
    for text, needle in (
        ('method="fedavg" cluster-optimzer="fedyogi"', "did you mean 'cluster-optimizer'"),
        ('method="fedavg" cluster-optimizer="fedyogi"', "read only by method ripple"),
        ("method=fedavg", 'method=\\"fedavg\\"'.replace("\\", "")),
    ):
        assert config_cli.main(["check", text]) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1, err
    assert config_cli.main(["check", 'method="ifca" num-server-rounds=3']) == 0
    assert "method='ifca'" in capsys.readouterr().out


# -- 6. new-partition-size -----------------------------------------------------------------
def test_new_partition_size_one_is_refused_by_the_parser():
    with pytest.raises(ConfigError, match="new-partition-size=1"):
        RunSettings.from_run_config({"new-partition-size": 1, "new-clients": 1})
    RunSettings.from_run_config({"new-partition-size": 2, "new-clients": 1})


def test_zero_shot_records_its_test_images_and_warns_below_twenty(cache_dir, tmp_path, caplog):
    cfg = tiny_run_config(
        cache_dir,
        method="fedavg",
        **{
            "new-clients": 2,
            "new-partition-size": 10,
            "num-server-rounds": 1,
            "results-path": str(tmp_path / "z.json"),
        },
    )
    with caplog.at_level(logging.WARNING):
        res = json.loads(run_server(FakeGrid(cfg), cfg).read_text())
    images = res["zero_shot"]["test_images_per_client"]
    assert images["min"] == images["max"] == 2 and images["total"] == 4
    assert "fewer than 20" in caplog.text


# -- 7. the smaller ones -------------------------------------------------------------------
def test_a_running_status_follows_the_stage(cache_dir, tmp_path, monkeypatch):
    seen: list[tuple[str, str]] = []
    real = server_run.write_status

    def spy(path, status, **info):
        seen.append((status, info.get("stage")))
        return real(path, status, **info)

    monkeypatch.setattr(server_run, "write_status", spy)
    cfg = tiny_run_config(cache_dir, method="fedavg", **{"results-path": str(tmp_path / "a.json")})
    run_server(FakeGrid(cfg), cfg)
    stages = [stage for status, stage in seen if status == "running"]
    for stage in ("starting", "waiting for nodes", "loading the data", "rounds", "finishing"):
        assert stage in stages, stages
    assert seen[-1] == ("completed", "done")


def test_pretrain_data_root_a_file_or_missing_is_named_and_never_created(tmp_path, capsys):
    from ripple_flwr.cli.pretrain import main as pretrain_main

    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    missing = tmp_path / "nowhere"
    for root, needle in ((a_file, "is a file"), (missing, "does not exist")):
        argv = ["--dataset", "fashion-mnist", "--data-root", str(root)]
        code = pretrain_main([*argv, "--output", str(tmp_path / "o.pt")])
        assert code == 2
        assert needle in capsys.readouterr().err
    assert not missing.exists()


def test_onboard_on_a_method_that_saves_no_run_says_so(tmp_path, capsys):
    for name, spec in METHODS.items():
        if spec.exports != "none":
            continue
        (tmp_path / f"{name}.json").write_text(json.dumps({"settings": {"method": name}}))
        images = tmp_path / "x.npy"
        np.save(images, np.zeros((2, 1, 28, 28), np.float32))
        run = tmp_path / f"{name}.run.pt"
        code = onboard_cli.main([str(run), "--images", str(images)])
        assert code == 2
        assert f"method={name!r}" in capsys.readouterr().err


def test_ripple_status_on_a_link_loop_and_on_a_results_file_without_status(tmp_path, capsys):
    loop = tmp_path / "loop.status"
    loop.symlink_to(loop)
    assert status_cli.main([str(loop)]) == status_cli.EXIT_NOT_FOUND
    assert "symbolic link that leads nowhere" in capsys.readouterr().err
    results = tmp_path / "done.json"
    results.write_text(json.dumps({"status": "completed", "settings": {}, "final_accuracy": 0.5}))
    assert status_cli.main([str(results)]) == status_cli.EXIT_COMPLETED
    assert "read from the results file" in capsys.readouterr().out


def test_onboarding_names_the_shape_it_takes_not_a_generic_one():
    from ripple_flwr.runs.onboarding import Onboarder

    me = SimpleNamespace(run=SimpleNamespace(image_shape=(1, 28, 28)))
    with pytest.raises(ValueError) as err:
        Onboarder.check_images(me, np.zeros((3, 14, 14), np.float32))
    assert "(N, 28, 28)" in str(err.value) and "(N, H, W)" not in str(err.value)


# -- a second probe of every entry point -----------------------------------------------------
def test_two_grid_points_with_one_results_name_are_refused(tmp_path, capsys):
    argv = ["--grid", "lr=0.5,0.5000001", *sets(TINY), "--set", "method=fedavg"]
    with pytest.raises(SystemExit) as stop:
        sweep.main([*argv, "--out", str(tmp_path)], train=FakeTrainer())
    assert stop.value.code == 2
    assert "same results file name" in capsys.readouterr().err


def test_a_table_target_outside_a_fraction_and_a_plot_it_cannot_write_are_refused(tmp_path, capsys):
    from paper import tables

    base = ["table1", "--methods", "fedavg", "--out", str(tmp_path), "--reuse-only"]
    for extra, needle in (
        (["--target", "80"], "--target 80"),
        (["--plot", str(tmp_path / "x.txt")], "--plot"),
    ):
        with pytest.raises(SystemExit) as stop:
            tables.main([*base, *extra])
        assert stop.value.code == 2
        assert needle in capsys.readouterr().err


def test_an_output_folder_that_takes_no_file_is_refused_before_any_work():
    from ripple_flwr.io.paths import OutputPathError, check_output_path

    proc = Path("/proc/self")  # exists on Linux; root passes os.access there
    if not proc.is_dir():
        pytest.skip("no /proc on this system")
    with pytest.raises(OutputPathError, match="not writable"):
        check_output_path(proc / "new-folder", "--out", folder=True)


def test_ripple_config_check_judges_the_paths_the_server_confines(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("RIPPLE_OUTPUT_DIR", str(tmp_path))
    assert config_cli.main(["check", 'results-path="/etc/x.json"']) == 2
    assert "outside the server's output folder" in capsys.readouterr().err
    assert config_cli.main(["check", f'results-path="{tmp_path / "ok.json"}"']) == 0


def test_a_running_status_whose_server_is_gone_exits_as_failed(tmp_path, capsys):
    import socket

    status = tmp_path / "r.status"
    dead = {"status": "running", "pid": 2**22 + 12345, "host": socket.gethostname()}
    status.write_text(json.dumps(dead))
    assert status_cli.main([str(status)]) == status_cli.EXIT_FAILED
    assert "is gone" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("cfg", "key"),
    [
        ({"min-cluster-size": 5}, "min-cluster-size"),
        ({"embedding-dp-delta": 1e-3}, "embedding-dp-delta"),
    ],
)
def test_a_key_read_only_under_another_setting_is_refused(cfg, key):
    with pytest.raises(ConfigError, match=f"{key}.*read only with"):
        parse_run_config(cfg)


def test_a_grid_value_given_twice_and_a_markdown_folder_are_refused_with_the_right_example(
    tmp_path,
):
    from ripple_flwr.io.paths import OutputPathError, check_output_path

    with pytest.raises(ValueError, match="names fedavg twice"):
        sweep.parse_grid(["method=fedavg,ripple,fedavg"])
    with pytest.raises(OutputPathError, match=r"out\.md"):
        check_output_path(tmp_path, "--md")


@pytest.mark.parametrize(
    ("command", "argv", "needle"),
    [
        ("tables", ["table1", "--methods", "fedavg", "fedavg"], "--methods names fedavg twice"),
        ("hmap", ["--methods", "fedavg", "fedavg"], "--methods names fedavg twice"),
    ],
)
def test_a_row_named_twice_is_refused_not_silently_merged(command, argv, needle, tmp_path, capsys):
    import importlib

    module = importlib.import_module(f"paper.{command}")
    with pytest.raises(SystemExit) as stop:
        module.main([*argv, "--out", str(tmp_path), "--reuse-only"])
    assert stop.value.code == 2 and needle in capsys.readouterr().err


def test_a_domain_label_kind_on_a_dataset_without_domains_is_refused_before_loading():
    with pytest.raises(ConfigError, match="mnist-5k has none"):
        parse_run_config({"label-kind": "domain"})
    parse_run_config({"label-kind": "domain", "dataset": "rotated-mnist-5k"})
    parse_run_config({"label-kind": "joint", "dataset": "permuted-mnist-5k"})
