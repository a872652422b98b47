"""Nodes that bring their own files (client-data='local'), through the real server and ClientApp.

Every silo is its own ImageFolder (tests/silos.py); the server holds only its own
auxiliary folder. No node has a partition id or a copy of any benchmark.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import FakeGrid, tiny_run_config
from silos import CLASSES, SILO_COUNTS, mixture, write_federation, write_silo

from ripple_flwr.app.server.run import run_server
from ripple_flwr.settings import ConfigError

TRAIN_SILOS = ("silo-a", "silo-b", "silo-c")


@pytest.fixture(scope="module")
def silos(tmp_path_factory):
    return write_federation(tmp_path_factory.mktemp("silos"))


def local_config(cache_dir, paths, results, method="ripple", **over):
    cfg = tiny_run_config(
        cache_dir,
        method=method,
        **{
            "client-data": "local",
            "aux-data": str(paths["aux"]),
            "num-partitions": 3,
            "clients-per-round": 3,
            "aux-size": 240,
            "results-path": str(results),
        },
    )
    cfg.pop("dataset")
    cfg.update(over)
    return cfg


def node(paths, name, **extra):
    return {"data": str(paths[name]), "name": name, **extra}


def run(cfg, node_configs):
    grid = FakeGrid(cfg, node_configs=node_configs)
    path = run_server(grid, cfg)
    return json.loads(path.read_text()), grid


@pytest.mark.slow  # pre-trains the router on the server's folder
def test_silos_with_their_own_folders_run_ripple_and_route_by_mixture(silos, cache_dir, tmp_path):
    cfg = local_config(cache_dir, silos, tmp_path / "r.json", **{"new-clients": 1})
    nodes = [node(silos, n) for n in TRAIN_SILOS] + [node(silos, "silo-d", **{"held-out": True})]
    r, _ = run(cfg, nodes)
    clients = r["clients"]
    assert clients["names"] == list(TRAIN_SILOS)
    assert clients["data_sources"] == ["local"] * 3
    assert r["federation"]["source"] == "local"
    assert r["federation"]["true_mixtures"] is None  # the server cannot see a silo's labels
    assert r["federation"]["true_label_mixtures"] is None
    assert r["federation"]["image_shape"] == [1, 28, 28]
    assert r["federation"]["num_classes"] == len(CLASSES)
    truth = np.stack([mixture(SILO_COUNTS[n]) for n in TRAIN_SILOS])
    w = np.asarray(r["routing"]["weights"])
    l1 = np.abs(w - truth).sum(axis=1).mean()
    uniform = np.abs(1 / len(CLASSES) - truth).sum(axis=1).mean()
    assert l1 < 0.6 * uniform, (l1, uniform, w)
    assert (w.argmax(axis=1) == truth.argmax(axis=1)).all()
    zs = r["zero_shot"]
    assert zs["names"] == ["silo-d"]
    w_new = np.asarray(zs["weights"])
    assert w_new.argmax() == mixture(SILO_COUNTS["silo-d"]).argmax()
    assert zs["accuracy"]["weighted_mean"] > 0.25


def test_a_silo_with_a_class_the_run_does_not_know_is_left_out_with_the_reason(
    silos, cache_dir, tmp_path
):
    from silos import DigitPool

    odd = write_silo(DigitPool(seed=1), tmp_path / "odd", {"0": 20, "zebra": 0})
    for f in sorted((odd / "0").iterdir())[:5]:
        f.rename(odd / "zebra" / f.name)
    cfg = local_config(cache_dir, silos, tmp_path / "r.json", method="fedavg")
    nodes = [node(silos, n) for n in TRAIN_SILOS[:2]] + [{"data": str(odd), "name": "odd"}]
    cfg["num-partitions"] = 3
    cfg["clients-per-round"] = 2
    r, _ = run(cfg, nodes)
    assert r["clients"]["names"] == list(TRAIN_SILOS[:2])
    reasons = list(r["clients"]["left_out"].values())
    assert len(reasons) == 1 and "zebra" in reasons[0], reasons


def test_modes_never_mix(silos, cache_dir, tmp_path):
    # A node without its own data in a local run, and one with data in a benchmark run.
    cfg = local_config(cache_dir, silos, tmp_path / "a.json", method="fedavg")
    cfg["clients-per-round"] = 2
    r, _ = run(cfg, [node(silos, n) for n in TRAIN_SILOS[:2]] + [{"name": "bare"}])
    (reason,) = r["clients"]["left_out"].values()
    assert "data=" in reason and "client-data='local'" in reason
    bench = tiny_run_config(
        cache_dir, method="fedavg", **{"results-path": str(tmp_path / "b.json")}
    )
    nodes = [{"partition-id": i, "num-partitions": 6} for i in range(5)]
    nodes.append({"partition-id": 5, "num-partitions": 6, "data": str(silos["silo-a"])})
    r, _ = run(bench, nodes)
    assert r["clients"]["partition_ids"] == [0, 1, 2, 3, 4]
    (reason,) = r["clients"]["left_out"].values()
    assert "client-data='benchmark'" in reason
    assert r["clients"]["data_sources"] == ["benchmark"] * 5


def test_local_runs_are_refused_before_any_work_without_what_the_server_needs(cache_dir, tmp_path):
    from ripple_flwr.app.run_config import parse_run_config

    base = {"client-data": "local", "cache-dir": str(cache_dir)}
    with pytest.raises(ConfigError, match="aux-data"):
        parse_run_config({**base, "method": "ripple"})
    with pytest.raises(ConfigError, match="true mixtures"):
        parse_run_config({**base, "method": "oracle", "aux-data": "x"})
    from ripple_flwr.app.server.run_data import resolve_run_data

    with pytest.raises(ConfigError, match="class-names, image-size, channels"):
        resolve_run_data(parse_run_config({**base, "method": "fedavg"}))
    data = resolve_run_data(
        parse_run_config(
            {**base, "method": "fedavg", "class-names": "a, b", "image-size": 32, "channels": 3}
        )
    )
    assert data.class_names == ("a", "b") and data.image_shape == (3, 32, 32)
