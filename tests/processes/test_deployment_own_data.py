"""Cross-silo deployment: a loopback SuperLink and four SuperNodes, each with its own folder.

No node has a partition id or a benchmark: three silos train, the fourth is held
out and onboarded zero-shot; the server holds only its own auxiliary folder. The
routing must find the class mixtures the test wrote into the silos.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import run_insecure_deployment
from silos import CLASSES, SILO_COUNTS, mixture, write_federation

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("flower-superlink") is None or shutil.which("flower-supernode") is None,
        reason="flower-superlink / flower-supernode not installed (pip install flwr)",
    ),
]


def test_cross_silo_deployment_routes_each_silo_by_its_own_files(tmp_path, ray_tmp):
    paths = write_federation(tmp_path / "silos")
    results = tmp_path / "results.json"
    cache = tmp_path / "cache"
    run_config = (
        f'method="ripple" client-data="local" aux-data="{paths["aux"]}" aux-size=240 '
        "num-partitions=3 new-clients=1 num-components=4 clients-per-round=3 "
        "num-server-rounds=1 eval-every=1 batch-size=16 pretrain-bank-size=300 "
        "pretrain-steps=100 pretrain-client-size=40 "
        f'results-path="{results}" cache-dir="{cache}" node-wait-timeout=60.0 '
        "round-timeout=120.0"
    )
    nodes = [f'data="{paths[n]}" name="{n}"' for n in ("silo-a", "silo-b", "silo-c")]
    nodes.append(f'data="{paths["silo-d"]}" name="silo-d" held-out=true')
    run_insecure_deployment(tmp_path, ray_tmp, run_config, nodes, timeout=300)
    r = json.loads(results.read_text())
    names = r["clients"]["names"]
    assert sorted(names) == ["silo-a", "silo-b", "silo-c"]
    assert r["clients"]["data_sources"] == ["local"] * 3
    truth = np.stack([mixture(SILO_COUNTS[n]) for n in names])
    w = np.asarray(r["routing"]["weights"])
    l1 = float(np.abs(w - truth).sum(axis=1).mean())
    uniform = float(np.abs(1 / len(CLASSES) - truth).sum(axis=1).mean())
    assert l1 < 0.6 * uniform, (l1, uniform, w)
    assert (w.argmax(axis=1) == truth.argmax(axis=1)).all()
    zs = r["zero_shot"]
    assert zs["names"] == ["silo-d"] and zs["supported"]
    assert np.asarray(zs["weights"]).argmax() == mixture(SILO_COUNTS["silo-d"]).argmax()
    assert sorted(r["accuracy_per_round"]) == ["1"]
    assert list((cache / "local-data").glob("*.npz"))  # decoded once per node, then cached
