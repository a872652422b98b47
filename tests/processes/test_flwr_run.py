"""End to end: real `flwr run .` simulations (a local SuperLink, Ray) on tiny configs.

Both runs are submitted to one simulation SuperLink (``sim_link``), as a user's local
SuperLink takes one run after another; each run starts its own Ray."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import SimulationLink

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("flower-processes"),  # conftest.py: one deployment at a time
    pytest.mark.skipif(
        shutil.which("flower-superlink") is None or shutil.which("flwr") is None,
        reason="flower-superlink / flwr not installed (pip install 'flwr[simulation]')",
    ),
]


@pytest.fixture(scope="module")
def sim_link(tmp_path_factory):
    ray_tmp = Path(tempfile.mkdtemp(prefix="rf-ray-", dir="/tmp"))  # short: AF_UNIX paths
    link = SimulationLink(tmp_path_factory.mktemp("sim-link"), ray_tmp)
    try:
        yield link.start()
    finally:
        link.stop()
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_flwr_run_simulation_end_to_end(tmp_path, tiny_checkpoint, sim_link):
    results = tmp_path / "results.json"
    run_config = (
        f'method="ripple" num-partitions=4 partition-size=60 aux-size=300 num-components=4 '
        f"clients-per-round=2 num-server-rounds=2 eval-every=1 batch-size=16 "
        f'checkpoint="{tiny_checkpoint}" results-path="{results}" '
        f'cache-dir="{tmp_path / "cache"}" node-wait-timeout=60.0 round-timeout=120.0'
    )
    sim_link.run(run_config, 4, timeout=170)
    r = json.loads(results.read_text())
    assert r["settings"]["method"] == "ripple" and r["settings"]["num-partitions"] == 4
    assert r["clients"]["partition_ids"] == [0, 1, 2, 3]
    assert sorted(r["accuracy_per_round"]) == ["1", "2"]
    assert all(b["down"] == b["up"] == 2 * r["model_bytes"] for b in r["bytes_per_round"].values())
    assert r["embedding_bytes_per_client"] == 1953 * 4
    assert results.with_suffix(".png").is_file()


def test_flwr_run_flux_describes_clusters_and_onboards_through_flower(tmp_path, sim_link):
    """FLUX's ``query.describe`` messages go through Flower's own runtime (Ray, a SuperLink)."""
    results = tmp_path / "flux.json"
    run_config = (
        f'method="flux" num-partitions=4 new-clients=1 partition-size=60 aux-size=300 '
        f"clients-per-round=2 num-server-rounds=2 eval-every=1 batch-size=16 "
        f"flux-start-round=1 flux-latest-fraction=0.0 "
        f'results-path="{results}" cache-dir="{tmp_path / "cache"}" '
        f"node-wait-timeout=60.0 round-timeout=120.0"
    )
    sim_link.run(run_config, 5, timeout=170)
    r = json.loads(results.read_text())
    first = r["flux"]["descriptor_rounds"][0]
    assert r["flux"]["clustered_at"] == 2 and first["answered"] == 4 and not first["rejected"]
    assert r["bytes_per_round"]["2"]["up"] > 2 * r["model_bytes"]  # + the descriptors
    assert r["zero_shot"]["clients"] == 1 and r["zero_shot"]["supported"]
