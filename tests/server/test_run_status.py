"""A failed run says why, once (issue 45): one log line, ``<results>.status`` = failed with the
stage and the error, and ``ripple-status`` prints it (exit status 1). Offline, no Flower
processes: the ServerApp's ``run_server`` stops before it needs a grid."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from conftest import FakeGrid, tiny_run_config

from ripple_flwr.app.server.run import run_server
from ripple_flwr.runs.results import status_path
from ripple_flwr.settings import ConfigError

CONFIG_STAGE = "checking the run config"

# (run-config changes, the key the error line must name)
BAD_CONFIGS = {
    "unknown method": ({"method": "nosuch"}, "method='nosuch'"),
    "negative rounds": ({"num-server-rounds": -3}, "num-server-rounds"),
    "unknown dataset": ({"dataset": "nosuch"}, "dataset='nosuch'"),
    "more clients a round than partitions": (
        {"clients-per-round": 50, "num-partitions": 5},
        "clients-per-round=50 exceeds num-partitions=5",
    ),
}


@pytest.fixture
def root(tmp_path, monkeypatch):
    """This test's own output folder (so 'the newest status' is this test's)."""
    out = (tmp_path / "out").resolve()
    out.mkdir()
    monkeypatch.setenv("RIPPLE_OUTPUT_DIR", str(out))
    return out


class Lines(logging.Handler):
    """The formatted records of a logger, traceback included."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def ripple_log():
    handler = Lines()
    logger = logging.getLogger("flwr.ripple")
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)


def config(root, **over):
    cfg = tiny_run_config(root / "cache", method="fedavg")
    cfg.update(over)
    return cfg


def ripple_status(argv: list[str]) -> int:
    """``ripple-status ARGV``: its exit status (what it prints goes to stdout)."""
    from ripple_flwr.cli.status import main

    return main(argv)


def reported_failure(err: BaseException) -> str | None:
    from ripple_flwr.app.server.run import reported_failure as reported

    return reported(err)


def failing_run(cfg, grid=None) -> Exception:
    with pytest.raises(Exception) as raised:
        run_server(grid, cfg)
    return raised.value


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_a_bad_run_config_leaves_a_failed_status_that_ripple_status_prints(
    root, ripple_log, capsys, case
):
    over, names = BAD_CONFIGS[case]
    results = root / "run.json"
    cfg = config(root, **over, **{"results-path": str(results)})
    err = failing_run(cfg, FakeGrid(config(root)))  # the grid is never asked anything
    assert isinstance(err, ConfigError)  # the caller still gets the error itself

    status = json.loads(status_path(results).read_text())
    assert status["status"] == "failed" and status["stage"] == CONFIG_STAGE
    assert status["error"].startswith("ConfigError: ") and names in status["error"]
    assert "\n" not in status["error"] and not results.exists()

    # One line, no traceback, naming the key and where the status is.
    errors = [line for line in ripple_log if line.startswith("ERROR")]
    assert len(errors) == 1 and "Traceback" not in errors[0], ripple_log
    assert names in errors[0] and str(status_path(results)) in errors[0]
    assert reported_failure(err) == status["error"]

    assert ripple_status([str(results)]) == 1
    shown = capsys.readouterr().out
    assert "state:       failed" in shown and f"stage:       {CONFIG_STAGE}" in shown
    assert names in shown and "(not written)" in shown
    assert ripple_status([]) == 1  # the newest status of the output folder: this one
    assert names in capsys.readouterr().out


def test_without_a_results_path_the_status_gets_the_default_name(root, capsys):
    failing_run(config(root, method="nosuch"))
    (status,) = root.glob("*.status")
    assert status.name.startswith("ripple-nosuch-seed0-")  # as a parsed run would name it
    assert json.loads(status.read_text())["status"] == "failed"
    assert ripple_status([]) == 1
    assert "method='nosuch'" in capsys.readouterr().out


@pytest.mark.parametrize(
    "results_path",
    ["../escaped.json", "/etc/ripple-escaped.json", 7, "run.txt"],
    ids=["dotdot", "absolute", "not-a-string", "not-json"],
)
def test_a_bad_results_path_writes_the_status_at_the_default_place_never_outside(
    root, tmp_path, monkeypatch, results_path
):
    monkeypatch.chdir(root)
    failing_run(config(root, method="nosuch", **{"results-path": results_path}))
    (status,) = root.glob("*.status")  # inside the output folder, default name
    assert status.name.startswith("ripple-nosuch-seed0-")
    body = json.loads(status.read_text())
    assert body["status"] == "failed" and body["stage"] == CONFIG_STAGE
    assert not list(tmp_path.glob("*.status")) and not (tmp_path / "escaped.status").exists()
    assert not Path("/etc/ripple-escaped.status").exists()


def test_another_runs_status_is_never_replaced(root):
    finished = root / "done.json"
    finished.write_text("{}")
    status_path(finished).write_text(json.dumps({"status": "completed"}))
    cfg = config(root, method="nosuch", **{"results-path": str(finished)})
    cfg["overwrite-results"] = True  # the run never started: it replaces nothing
    failing_run(cfg)
    assert json.loads(status_path(finished).read_text()) == {"status": "completed"}
    others = [p for p in root.glob("*.status") if p != status_path(finished)]
    assert len(others) == 1 and json.loads(others[0].read_text())["status"] == "failed"


def test_a_refused_output_folder_gets_no_status_but_the_line(monkeypatch, ripple_log):
    monkeypatch.setenv("RIPPLE_OUTPUT_DIR", "/etc")
    failing_run({"method": "nosuch"})
    (line,) = [line for line in ripple_log if line.startswith("ERROR")]
    assert "method='nosuch'" in line and "no status file written" in line


def test_a_missing_dataset_is_one_line_at_the_data_stage(root, tmp_path, monkeypatch, ripple_log):
    empty = tmp_path / "no-fashion-mnist"
    empty.mkdir()
    monkeypatch.setenv("RIPPLE_FASHION_MNIST_DIR", str(empty))
    results = root / "fm.json"
    cfg = config(root, dataset="fashion-mnist", **{"results-path": str(results)})
    err = failing_run(cfg, FakeGrid(cfg))  # enough nodes: the data stage is reached
    assert isinstance(err, FileNotFoundError)
    status = json.loads(status_path(results).read_text())
    assert status["status"] == "failed" and status["stage"] == "loading the data"
    assert "Fashion-MNIST not found" in status["error"] and "apt-get" in status["error"]
    (line,) = [line for line in ripple_log if line.startswith("ERROR")]
    assert "Fashion-MNIST not found" in line and reported_failure(err) == status["error"]


def test_an_unexpected_error_keeps_its_traceback(root, monkeypatch, ripple_log):
    import ripple_flwr.app.server.run as run_module

    def broken(settings):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(run_module, "resolve_run_data", broken)
    results = root / "bug.json"
    cfg = config(root, **{"results-path": str(results)})
    err = failing_run(cfg, FakeGrid(cfg))
    assert isinstance(err, ZeroDivisionError) and reported_failure(err) is None
    assert not [line for line in ripple_log if line.startswith("ERROR")]  # Flower logs it
    status = json.loads(status_path(results).read_text())
    assert status["stage"] == "loading the data" and status["error"] == "ZeroDivisionError: a bug"


def test_the_serverapp_fails_the_run_with_one_line_and_flower_prints_no_traceback(root):
    from flwr.app import Context, RecordDict

    import server_app
    from ripple_flwr.app.server.run import RunFailed, quiet_reported_failures

    cfg = config(root, method="nosuch", **{"results-path": str(root / "app.json")})
    ctx = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=cfg)
    with pytest.raises(RunFailed) as raised:
        server_app.main(None, ctx)
    assert str(raised.value).startswith("ConfigError: method='nosuch' is not one of")
    assert raised.value.__cause__ is None and raised.value.__suppress_context__

    # What Flower does with it ("ServerApp raised an exception", exc_info=ex): one line.
    try:
        raise ValueError("a bug")
    except ValueError as bug:
        unexpected = bug
    flwr_logger, handler = logging.getLogger("flwr"), Lines()
    quiet_reported_failures()  # idempotent: server_app.py installed it already
    flwr_logger.addHandler(handler)
    try:
        flwr_logger.error("ServerApp raised an exception", exc_info=raised.value)
        flwr_logger.error("ServerApp raised an exception", exc_info=unexpected)
    finally:
        flwr_logger.removeHandler(handler)
    quiet, loud = handler.lines
    assert quiet == "ERROR ServerApp raised an exception"
    assert "Traceback" in loud and "ValueError: a bug" in loud  # unexpected: all of it
    tags = [f for f in flwr_logger.filters if type(f).__name__ == "_ReportedFailureFilter"]
    assert len(tags) == 1


def test_ripple_status_exit_codes(root, capsys):
    for name, state, code in (("a", "completed", 0), ("b", "running", 3), ("c", "odd", 3)):
        status_path(root / f"{name}.json").write_text(json.dumps({"status": state}))
        assert ripple_status([str(root / f"{name}.status")]) == code
        assert f"state:       {state}" in capsys.readouterr().out
    assert ripple_status([str(root / "none.json")]) == 2
    assert ripple_status([str(root / "empty")]) == 2
    (root / "broken.status").write_text("{not json")
    assert ripple_status([str(root / "broken.status")]) == 2
    assert ripple_status(["--all", str(root)]) in (0, 2, 3)
    listed = capsys.readouterr().out
    assert all(f"{n}.status" in listed for n in ("a", "b", "c", "broken"))
