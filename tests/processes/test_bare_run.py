"""`num-partitions = 0`: the federation is the nodes that connect, so the bare `flwr run .`
(Flower's default simulation: 2 SuperNodes) completes; every run says how it stands."""

from __future__ import annotations

import json
import time

import pytest
from conftest import FakeGrid, tiny_run_config

from ripple_flwr.app.server.roster.node_wait import (
    NotEnoughClientsError,
    wait_for_settled_nodes,
)
from ripple_flwr.app.server.run import run_server
from ripple_flwr.runs.results import status_path
from ripple_flwr.settings import ConfigError, RunSettings


def nodes_config(n: int) -> list[dict]:
    """The node configs Flower's simulation gives ``n`` SuperNodes."""
    return [{"partition-id": i, "num-partitions": n} for i in range(n)]


def without_provenance(path) -> dict:
    res = json.loads(path.read_text())
    for key in ("timings", "settings", "num_partitions_from", "server_folders", "saved_run"):
        res.pop(key)
    for r in res["rounds"]:
        r.pop("server_seconds"), r.pop("wall_seconds")
    for e in res["evaluations"]:
        e.pop("wall_seconds")
    return res


def test_num_partitions_zero_takes_the_nodes_that_connect_and_equals_the_explicit_run(
    cache_dir, tmp_path
):
    over = {"method": "fedavg", "clients-per-round": 10, "node-wait-timeout": 5.0}
    auto = tiny_run_config(cache_dir, **over, **{"num-partitions": 0})
    auto["results-path"] = str(tmp_path / "auto.json")
    t0 = time.monotonic()
    path = run_server(FakeGrid(auto, node_configs=nodes_config(3)), auto)
    assert time.monotonic() - t0 < 30
    res = json.loads(path.read_text())
    assert res["status"] == "completed" and res["num_partitions_from"] == "nodes"
    # The settled count, and clients-per-round capped at it.
    assert res["settings"]["num-partitions"] == 3 and res["settings"]["clients-per-round"] == 3
    assert res["clients"]["partition_ids"] == [0, 1, 2]
    assert json.loads(status_path(path).read_text())["status"] == "completed"

    explicit = tiny_run_config(cache_dir, **{**over, "clients-per-round": 3, "num-partitions": 3})
    explicit["results-path"] = str(tmp_path / "explicit.json")
    other = run_server(FakeGrid(explicit), explicit)
    assert json.loads(other.read_text())["num_partitions_from"] == "run config"
    assert without_provenance(path) == without_provenance(other)


def test_a_run_with_no_node_fails_with_a_readable_status(cache_dir, tmp_path):
    cfg = tiny_run_config(cache_dir, method="fedavg", **{"num-partitions": 0})
    cfg.update({"node-wait-timeout": 0.3, "results-path": str(tmp_path / "none.json")})
    with pytest.raises(NotEnoughClientsError, match="none connected within node-wait-timeout"):
        run_server(FakeGrid(cfg, node_configs=[]), cfg)
    status = json.loads((tmp_path / "none.status").read_text())
    assert status["status"] == "failed" and status["stage"] == "waiting for nodes"
    assert "NotEnoughClientsError: num-partitions=0" in status["error"]
    assert not (tmp_path / "none.json").exists()  # no results file: nothing was run


class GrowingGrid:
    """Nodes connect one by one, ``every`` seconds apart, up to ``total``."""

    def __init__(self, total: int, every: float) -> None:
        self.total, self.every, self.t0 = total, every, time.monotonic()

    def get_node_ids(self):
        n = min(self.total, 1 + int((time.monotonic() - self.t0) / self.every))
        return list(range(100, 100 + n))


def test_the_node_count_must_settle_before_it_is_taken():
    t0 = time.monotonic()
    assert wait_for_settled_nodes(GrowingGrid(3, 0.2), timeout=10, settle=0.5, poll=0.05) == 3
    assert 0.9 <= time.monotonic() - t0 < 3
    # Still changing at the timeout: the nodes there by then.
    assert wait_for_settled_nodes(GrowingGrid(50, 0.1), timeout=0.5, settle=1.0, poll=0.05) < 50


def test_settings_with_nodes():
    s = RunSettings.of(num_partitions=0, new_clients=1, clients_per_round=10)
    assert s.data.partitions_from_nodes and s.data.total_partitions == 1
    r = s.with_nodes(4)
    assert (r.data.num_partitions, r.training.clients_per_round, r.data.total_partitions) == (
        3,
        3,
        4,
    )
    assert r.with_nodes(9) is r  # an explicit count is kept
    with pytest.raises(ConfigError, match="leave no training client"):
        s.with_nodes(1)


def test_the_server_warns_when_its_working_folder_is_not_the_submitted_app(
    tmp_path, monkeypatch, caplog
):
    """A local SuperLink started from another checkout runs the bundle in that folder."""
    import logging
    import sys
    import types

    from ripple_flwr.app.server.folders import log_folders

    bundle = tmp_path / "apps" / "ripple-flwr.0.1.0.abc"
    for rel, text in (("server_app.py", "app = 1\n"), ("client_app.py", "app = 2\n")):
        (bundle / rel).parent.mkdir(parents=True, exist_ok=True)
        (bundle / rel).write_text(text)
    (bundle / "ripple_flwr").mkdir()
    (bundle / "ripple_flwr" / "x.py").write_text("X = 1\n")
    module = types.ModuleType("server_app")
    module.__file__ = str(bundle / "server_app.py")
    monkeypatch.setitem(sys.modules, "server_app", module)
    monkeypatch.delenv("RIPPLE_OUTPUT_DIR")

    other = tmp_path / "other-checkout"
    (other / "ripple_flwr").mkdir(parents=True)
    (other / "server_app.py").write_text("app = 1\n")
    (other / "client_app.py").write_text("app = 2  # edited\n")
    monkeypatch.chdir(other)
    with caplog.at_level(logging.INFO, logger="flwr.ripple"):
        folders = log_folders(RunSettings())
    assert folders["app_folder"] == str(bundle) and folders["working_folder"] == str(other)
    assert folders["output_folder"] == str(other / "outputs")
    assert folders["working_folder_differs_from_app"] == ["client_app.py", "ripple_flwr/x.py"]
    assert "is not the app folder that was submitted" in caplog.text

    caplog.clear()  # a folder holding the same app: no warning
    (other / "client_app.py").write_text("app = 2\n")
    (other / "ripple_flwr" / "x.py").write_text("X = 1\n")
    with caplog.at_level(logging.INFO, logger="flwr.ripple"):
        assert log_folders(RunSettings())["working_folder_differs_from_app"] == []
    assert "not the app folder" not in caplog.text and "results under" in caplog.text
