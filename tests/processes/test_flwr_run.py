"""End to end: a real `flwr run .` simulation (own SuperLink, Ray) on a tiny config."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import run_simulation

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("flower-superlink") is None or shutil.which("flwr") is None,
        reason="flower-superlink / flwr not installed (pip install 'flwr[simulation]')",
    ),
]


def test_flwr_run_simulation_end_to_end(tmp_path, tiny_checkpoint, ray_tmp):
    results = tmp_path / "results.json"
    run_config = (
        f'method="ripple" num-partitions=4 partition-size=60 aux-size=300 num-components=4 '
        f"clients-per-round=2 num-server-rounds=2 eval-every=1 batch-size=16 "
        f'checkpoint="{tiny_checkpoint}" results-path="{results}" '
        f'cache-dir="{tmp_path / "cache"}" node-wait-timeout=60.0 round-timeout=120.0'
    )
    run_simulation(tmp_path, ray_tmp, run_config, 4, timeout=170)
    r = json.loads(results.read_text())
    assert r["settings"]["method"] == "ripple" and r["settings"]["num-partitions"] == 4
    assert r["clients"]["partition_ids"] == [0, 1, 2, 3]
    assert sorted(r["accuracy_per_round"]) == ["1", "2"]
    assert all(b["down"] == b["up"] == 2 * r["model_bytes"] for b in r["bytes_per_round"].values())
    assert r["embedding_bytes_per_client"] == 1953 * 4
    assert results.with_suffix(".png").is_file()


def test_flwr_run_flux_describes_clusters_and_onboards_through_flower(tmp_path, ray_tmp):
    """FLUX's ``query.describe`` messages go through Flower's own runtime (Ray, a SuperLink)."""
    results = tmp_path / "flux.json"
    run_config = (
        f'method="flux" num-partitions=4 new-clients=1 partition-size=60 aux-size=300 '
        f"clients-per-round=2 num-server-rounds=2 eval-every=1 batch-size=16 "
        f"flux-start-round=1 flux-latest-fraction=0.0 "
        f'results-path="{results}" cache-dir="{tmp_path / "cache"}" '
        f"node-wait-timeout=60.0 round-timeout=120.0"
    )
    run_simulation(tmp_path, ray_tmp, run_config, 5, timeout=170)
    r = json.loads(results.read_text())
    first = r["flux"]["descriptor_rounds"][0]
    assert r["flux"]["clustered_at"] == 2 and first["answered"] == 4 and not first["rejected"]
    assert r["bytes_per_round"]["2"]["up"] > 2 * r["model_bytes"]  # + the descriptors
    assert r["zero_shot"]["clients"] == 1 and r["zero_shot"]["supported"]
