"""Loopback deployment: a real SuperLink and two SuperNodes on 127.0.0.1, a short Ripple run.

Every message to a SuperNode starts a fresh ``flwr-clientapp`` process, so this
also exercises the on-disk federation cache and the server's own pre-training
(tiny) when ``checkpoint`` is empty. The SuperLink and SuperNodes are the session's
(``loopback_deployment``, conftest.py): that every process they started is stopped
afterwards is checked where they stop (the fault tests, or the session's end).
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


def test_loopback_deployment_two_supernodes(tmp_path, loopback_deployment):
    results = tmp_path / "results.json"
    cache = tmp_path / "cache"
    run_config = (
        'method="ripple" sampling="uniform" num-partitions=2 partition-size=60 aux-size=300 '
        "num-components=4 clients-per-round=2 num-server-rounds=2 eval-every=2 batch-size=16 "
        "pretrain-bank-size=200 pretrain-steps=60 pretrain-client-size=40 "
        f'results-path="{results}" cache-dir="{cache}" node-wait-timeout=60.0 '
        "round-timeout=120.0"
    )
    loopback_deployment.run_streamed(run_config, timeout=170)  # partitions 0 and 1 of 2
    r = json.loads(results.read_text())
    assert r["clients"]["partition_ids"] == [0, 1]
    assert r["checkpoint"]["source"] == "pretrained"
    assert list(r["accuracy_per_round"]) == ["2"]  # scored once, at the end (CI time)
    assert all(b["down"] == b["up"] == 2 * r["model_bytes"] for b in r["bytes_per_round"].values())
    assert r["embedding_bytes_per_client"] == 1953 * 4
    assert list((cache / "federations").glob("federation-*.npz"))  # cached for fresh processes
