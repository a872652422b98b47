"""resume = "auto" (the default): a run resubmitted with the same results-path continues from
its last checkpoint; an own-data run matches its nodes by name, and refuses when they changed."""

from __future__ import annotations

import json

import pytest
from conftest import FakeGrid, tiny_run_config
from silos import write_federation
from test_resume import CrashingGrid, comparable

from ripple_flwr.app.server.resume.file import load_server_state
from ripple_flwr.app.server.run import run_server
from ripple_flwr.settings import ConfigError

BASE = {"method": "fedavg", "num-server-rounds": 5, "checkpoint-every": 1, "eval-every": 2}


def crash(cfg: dict, **grid) -> CrashingGrid:
    crashed = CrashingGrid(cfg, **grid)
    with pytest.raises(RuntimeError, match="simulated server crash"):
        run_server(crashed, cfg)
    return crashed


def outliving(cfg: dict, crashed: FakeGrid, **grid) -> FakeGrid:
    """A grid for the resubmitted run whose SuperNodes are the crashed run's (same state)."""
    fresh = FakeGrid(cfg, **grid)
    for node_id, context in fresh.contexts.items():
        context.state = crashed.contexts[node_id].state
    return fresh


def test_a_resubmitted_run_continues_from_its_last_checkpoint(cache_dir, tmp_path):
    full_cfg = tiny_run_config(cache_dir, **BASE, **{"results-path": str(tmp_path / "full.json")})
    full = run_server(FakeGrid(full_cfg), full_cfg)

    cfg = tiny_run_config(cache_dir, **BASE, **{"results-path": str(tmp_path / "cut.json")})
    assert "resume" not in cfg  # the default: "auto"
    crashed = crash(cfg)
    status = json.loads((tmp_path / "cut.status").read_text())
    assert status["status"] == "failed" and status["stage"] == "rounds"
    assert status["resume_file"] == str(tmp_path / "cut.resume.npz")
    assert load_server_state(tmp_path / "cut.resume.npz")["round"] == 3

    # Other settings: refused, with the differences and the way to start afresh.
    with pytest.raises(ConfigError, match=r'(?s)lr: checkpoint has 0.01.*resume="fresh"'):
        run_server(FakeGrid(cfg), {**cfg, "lr": 0.1})
    # The same submission again: it continues after round 3 and ends as the uninterrupted run.
    resumed = run_server(outliving(cfg, crashed), cfg)
    assert comparable(resumed) == comparable(full)
    assert json.loads((tmp_path / "cut.status").read_text())["status"] == "completed"


def test_fresh_and_overwrite_start_again_and_no_checkpoint_means_no_resume(cache_dir, tmp_path):
    cfg = tiny_run_config(cache_dir, **BASE, **{"results-path": str(tmp_path / "a.json")})
    crash(cfg)
    # resume="fresh" keeps the saved state unless told to overwrite it.
    with pytest.raises(ConfigError, match="a.resume.npz exists already"):
        run_server(FakeGrid(cfg), {**cfg, "resume": "fresh"})
    again = {**cfg, "resume": "fresh", "overwrite-results": True}
    res = json.loads(run_server(FakeGrid(again), again).read_text())
    assert [r["round"] for r in res["rounds"]] == [1, 2, 3, 4, 5]
    # overwrite-results=true with resume="auto" starts afresh too.
    b = tiny_run_config(cache_dir, **BASE, **{"results-path": str(tmp_path / "b.json")})
    crash(b)
    over = {**b, "overwrite-results": True}
    res = json.loads(run_server(FakeGrid(over), over).read_text())
    assert [r["round"] for r in res["rounds"]] == [1, 2, 3, 4, 5]
    # checkpoint-every=0: "auto" never resumes; the saved file is kept (refused, as before).
    c = tiny_run_config(cache_dir, **BASE, **{"results-path": str(tmp_path / "c.json")})
    crash(c)
    with pytest.raises(ConfigError, match="c.resume.npz exists already"):
        run_server(FakeGrid(c), {**c, "checkpoint-every": 0})


# -- own data: nodes are matched by name -----------------------------------------------------
@pytest.fixture(scope="module")
def silos(tmp_path_factory):
    return write_federation(tmp_path_factory.mktemp("silos"), aux_per_class=10)


def own_data_config(cache_dir, silos, results) -> dict:
    cfg = tiny_run_config(
        cache_dir,
        **BASE,
        **{
            "client-data": "local",
            "aux-data": str(silos["aux"]),
            "aux-size": 40,
            "num-partitions": 3,
            "clients-per-round": 3,
            "results-path": str(results),
        },
    )
    cfg.pop("dataset")
    return cfg


def named(silos, names) -> list[dict]:
    return [{"data": str(silos[n]), "name": n} for n in names]


def test_an_own_data_run_resumes_by_node_name_and_refuses_when_the_names_changed(
    silos, cache_dir, tmp_path
):
    cfg = own_data_config(cache_dir, silos, tmp_path / "own.json")
    crashed = crash(cfg, node_configs=named(silos, ["silo-a", "silo-b", "silo-c"]))
    saved = load_server_state(tmp_path / "own.resume.npz")["roster"]["clients"]
    slot_of = dict(zip(saved["names"], saved["partition_ids"], strict=True))

    # One silo renamed: refused before any round, naming the missing and the new name.
    renamed = named(silos, ["silo-a", "silo-b", "silo-d"])
    with pytest.raises(ConfigError, match=r"missing: silo-c; new: silo-d"):
        run_server(FakeGrid(cfg, node_configs=renamed), cfg)
    # An unnamed node cannot be matched.
    unnamed = [*named(silos, ["silo-a", "silo-b"]), {"data": str(silos["silo-c"])}]
    with pytest.raises(ConfigError, match="a node has no name"):
        run_server(FakeGrid(cfg, node_configs=unnamed), cfg)

    # The same silos reconnect in another order (other node ids): each keeps its slot.
    order = ["silo-c", "silo-a", "silo-b"]
    grid = FakeGrid(cfg, node_configs=named(silos, order))
    state_of = {c.node_config["name"]: c.state for c in crashed.contexts.values()}
    node_of = {}
    for node_id, context in grid.contexts.items():
        context.state = state_of[context.node_config["name"]]
        node_of[context.node_config["name"]] = str(node_id)
    res = json.loads(run_server(grid, cfg).read_text())
    assert [r["round"] for r in res["rounds"]] == [1, 2, 3, 4, 5]
    clients = res["clients"]
    for pid, name, nid in zip(
        clients["partition_ids"], clients["names"], clients["node_ids"], strict=True
    ):
        assert slot_of[name] == pid and node_of[name] == nid
