"""Loopback deployment of a method with client state: SCAFFOLD's c_i across rounds.

Every message to a SuperNode starts a fresh ``flwr-clientapp`` process, so
c_i survives between rounds only through the SuperNode's ``context.state``.
Each client reports how many trainings its state has seen; the server
records any node whose count falls short of what it was sent (a lost
state), so an empty record over three rounds with both clients trained
every round shows the state persisted.
"""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import (
    Processes,
    flower_env,
    free_port,
    run_flwr,
    run_status,
    wait_for_port,
    write_cli_config,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("flower-superlink") is None or shutil.which("flower-supernode") is None,
        reason="flower-superlink / flower-supernode not installed (pip install flwr)",
    ),
]


def test_scaffold_client_state_survives_fresh_clientapp_processes(tmp_path, ray_tmp):
    link = free_port()
    results = tmp_path / "results.json"
    cache = tmp_path / "cache"
    run_config = (
        'method="scaffold" num-partitions=2 partition-size=60 aux-size=300 '
        "num-components=4 clients-per-round=2 num-server-rounds=3 eval-every=1 batch-size=16 "
        "pretrain-bank-size=200 pretrain-steps=60 pretrain-client-size=40 "
        f'results-path="{results}" cache-dir="{cache}" node-wait-timeout=60.0 '
        "round-timeout=120.0"
    )
    procs = Processes(tmp_path)
    try:
        procs.start(
            "superlink",
            [
                "flower-superlink",
                "--insecure",
                "--host",
                "127.0.0.1",
                "--port",
                str(link),
                "--database",
                str(tmp_path / "state.db"),
            ],
            flower_env(tmp_path / "home-superlink", ray_tmp),
        )
        wait_for_port(link, 60, procs)
        for pid in range(2):
            procs.start(
                f"supernode-{pid}",
                [
                    "flower-supernode",
                    "--insecure",
                    "--superlink",
                    f"127.0.0.1:{link}",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(free_port()),
                    "--node-config",
                    f"partition-id={pid} num-partitions=2",
                ],
                flower_env(tmp_path / f"home-supernode-{pid}", ray_tmp),
            )
        cli_home = tmp_path / "home-cli"
        env = flower_env(cli_home, ray_tmp)
        write_cli_config(cli_home, "deploy", link)
        out = run_flwr(
            ["run", ".", "deploy", "--stream", "--run-config", run_config], env, timeout=480
        )
        text = out.stdout + out.stderr
        assert out.returncode == 0, text[-4000:]
        status = run_status(text, env, "deploy")
        assert status == "finished:completed", f"{status}\n{text[-4000:]}\n{procs.logs()}"
    finally:
        procs.stop()
    for name, proc, _ in procs.procs:
        assert proc.poll() is not None, f"{name} still running"
    r = json.loads(results.read_text())
    assert r["clients"]["partition_ids"] == [0, 1]
    assert sorted(r["accuracy_per_round"], key=int) == ["1", "2", "3"]
    for rnd in r["rounds"]:
        assert rnd["received"] == 2 and not rnd["dropped"], rnd
    # Model and control variate, both ways.
    assert all(b["down"] == b["up"] == 4 * r["model_bytes"] for b in r["bytes_per_round"].values())
    assert r["client_state"]["lost"] == []
    assert r["scaffold"]["control_norm"] > 0
