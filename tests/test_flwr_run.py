"""End to end: a real `flwr run .` simulation (own SuperLink, Ray) on a tiny config."""

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
        shutil.which("flower-superlink") is None or shutil.which("flwr") is None,
        reason="flower-superlink / flwr not installed (pip install 'flwr[simulation]')",
    ),
]


def test_flwr_run_simulation_end_to_end(tmp_path, tiny_checkpoint, ray_tmp):
    port = free_port()
    home = tmp_path / "flwr-home"
    env = flower_env(home, ray_tmp)
    write_cli_config(home, "sim", port)
    results = tmp_path / "results.json"
    run_config = (
        f'method="ripple" num-partitions=4 partition-size=60 aux-size=300 num-components=4 '
        f"clients-per-round=2 num-server-rounds=2 eval-every=1 batch-size=16 "
        f'checkpoint="{tiny_checkpoint}" results-path="{results}" '
        f'cache-dir="{tmp_path / "cache"}" node-wait-timeout=60.0 round-timeout=120.0'
    )
    procs = Processes(tmp_path)
    try:
        procs.start(
            "superlink",
            [
                "flower-superlink",
                "--insecure",
                "--simulation",
                "--isolation",
                "subprocess",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--database",
                str(tmp_path / "state.db"),
            ],
            env,
        )
        wait_for_port(port, 60, procs)
        out = run_flwr(
            [
                "run",
                ".",
                "sim",
                "--stream",
                "--run-config",
                run_config,
                "--federation-config",
                "num-supernodes=4 client-resources-num-cpus=1",
            ],
            env,
            timeout=170,
        )
        text = out.stdout + out.stderr
        assert out.returncode == 0, text[-4000:]
        status = run_status(text, env, "sim")
        assert status == "finished:completed", f"{status}\n{text[-4000:]}\n{procs.logs()}"
    finally:
        procs.stop()
    r = json.loads(results.read_text())
    assert r["settings"]["method"] == "ripple" and r["settings"]["num-partitions"] == 4
    assert r["clients"]["partition_ids"] == [0, 1, 2, 3]
    assert sorted(r["accuracy_per_round"]) == ["1", "2"]
    assert all(b["down"] == b["up"] == 2 * r["model_bytes"] for b in r["bytes_per_round"].values())
    assert r["embedding_bytes_per_client"] == 1953 * 4
    assert results.with_suffix(".png").is_file()
