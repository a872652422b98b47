"""A hostile SuperNode in a real loopback deployment (SuperLink + 3 SuperNodes): the run survives.

The app is copied to a temporary folder whose ``client_app.py`` wraps the
real handlers with the fault named in a node's ``--node-config`` (only the
test's copy can misbehave), and submitted with ``flwr run <copy> deploy``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import run_insecure_deployment

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("flower-superlink") is None or shutil.which("flower-supernode") is None,
        reason="flower-superlink / flower-supernode not installed (pip install flwr)",
    ),
]

HOSTILE_CLIENT_APP = '''
"""The app's ClientApp, with the fault named in the node config applied to its replies."""

from flwr.clientapp import ClientApp

from ripple_flwr.app.client.handlers import handle_evaluate, handle_query, handle_train
from ripple_flwr.testing.faults import FAULTS, wrap_handler

app = ClientApp()


def _maybe_hostile(handler, msg, context):
    name = str(context.node_config.get("fault", ""))
    return (wrap_handler(handler, FAULTS[name]()) if name else handler)(msg, context)


@app.query("embed")
def query(msg, context):
    return _maybe_hostile(handle_query, msg, context)


@app.train()
def train(msg, context):
    return _maybe_hostile(handle_train, msg, context)


@app.evaluate()
def evaluate(msg, context):
    return _maybe_hostile(handle_evaluate, msg, context)
'''


def test_a_supernode_sending_huge_weights_is_dropped_and_the_run_completes(tmp_path, ray_tmp):
    root = Path(__file__).resolve().parents[2]
    app = tmp_path / "app"
    shutil.copytree(
        root,
        app,
        ignore=shutil.ignore_patterns(".git", "outputs", "docs", "__pycache__", "*.egg-info", ".*"),
    )
    (app / "client_app.py").write_text(HOSTILE_CLIENT_APP)
    # The test helpers stay out of the real app's bundle; this copy's client needs them.
    pyproject = app / "pyproject.toml"
    shipped = pyproject.read_text().replace(', "ripple_flwr/testing/**"', "")
    assert shipped != pyproject.read_text(), "fab-exclude no longer names ripple_flwr/testing"
    pyproject.write_text(shipped)
    results = tmp_path / "results.json"
    run_config = (
        'method="fedavg" num-partitions=3 partition-size=60 aux-size=300 num-components=4 '
        "clients-per-round=3 num-server-rounds=2 eval-every=2 batch-size=16 "
        f'results-path="{results}" cache-dir="{tmp_path / "cache"}" node-wait-timeout=60.0 '
        "round-timeout=120.0"
    )
    node_configs = [
        f"partition-id={pid} num-partitions=3" + (' fault="huge-weights"' if pid == 1 else "")
        for pid in range(3)
    ]
    run_insecure_deployment(tmp_path, ray_tmp, run_config, node_configs, app=app, timeout=400)
    r = json.loads(results.read_text())
    for rnd in r["rounds"]:
        (drop,) = rnd["dropped"]
        assert drop["partition"] == 1 and "update norm" in drop["reason"]
        assert rnd["received"] == 2
    # The two honest clients keep a sane global model: all three are scored every round.
    for ev in r["evaluations"]:
        assert ev["scored"] == 3 and ev["coverage"] == 1.0
        assert all(c["loss"] < 10 for c in ev["clients"])
