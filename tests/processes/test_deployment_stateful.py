"""Loopback deployment of a method with client state: SCAFFOLD's c_i across rounds.

Every message to a SuperNode starts a fresh ``flwr-clientapp`` process, so
c_i survives between rounds only through the SuperNode's ``context.state``.
Each client reports how many trainings its state has seen; the server
records any node whose count falls short of what it was sent (a lost
state), so an empty record over three rounds with both clients trained
every round shows the state persisted. The SuperLink and SuperNodes are the
session's (``loopback_deployment``, conftest.py): each run is a run series of its
own, so no state reaches this run from an earlier one.
"""

from __future__ import annotations

import json
import shutil

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("flower-superlink") is None or shutil.which("flower-supernode") is None,
        reason="flower-superlink / flower-supernode not installed (pip install flwr)",
    ),
]


def test_scaffold_client_state_survives_fresh_clientapp_processes(tmp_path, loopback_deployment):
    results = tmp_path / "results.json"
    cache = tmp_path / "cache"
    run_config = (
        'method="scaffold" num-partitions=2 partition-size=60 aux-size=300 '
        "num-components=4 clients-per-round=2 num-server-rounds=3 eval-every=3 batch-size=16 "
        f'results-path="{results}" cache-dir="{cache}" node-wait-timeout=60.0 '
        "round-timeout=120.0"
    )
    loopback_deployment.run_streamed(run_config, timeout=480)  # partitions 0 and 1 of 2
    r = json.loads(results.read_text())
    assert r["clients"]["partition_ids"] == [0, 1]
    assert list(r["accuracy_per_round"]) == ["3"]  # scored once, after the three rounds
    for rnd in r["rounds"]:
        assert rnd["received"] == 2 and not rnd["dropped"], rnd
    # Model and control variate, both ways.
    assert all(b["down"] == b["up"] == 4 * r["model_bytes"] for b in r["bytes_per_round"].values())
    assert r["client_state"]["lost"] == []
    assert r["scaffold"]["control_norm"] > 0
