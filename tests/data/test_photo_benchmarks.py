"""Office-Home and GLDv2-23k end to end, with a pretrained ResNet-18, on files the tests write.

The paper's protocol at a tiny scale: Office-Home partitioned by Dirichlet over its
four domains (the routing label), embedded at 64x64 (P = 3 x 217 x 8 x 8 = 41,664);
GLDv2 in its natural user split. The weights file sits where torchvision would put
the ImageNet one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FakeGrid, tiny_run_config
from photo_sets import write_fake_resnet18_weights, write_gldv2, write_office_home

from ripple_flwr.app.server.run import run_server
from ripple_flwr.settings import ConfigError

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
P_64 = 3 * 217 * 8 * 8
RESNET18 = "resnet18-f37072fd.pth"


@pytest.fixture(scope="module")
def photo_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("photos")
    write_office_home(root / "office-home")
    write_gldv2(root / "gldv2")
    write_fake_resnet18_weights(root / "torch")
    return root


@pytest.fixture
def torch_home(photo_root, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(photo_root / "torch"))
    return photo_root / "torch"


def office_config(cache_dir, root, results, **over):
    cfg = tiny_run_config(
        cache_dir,
        method="ripple",
        dataset="office-home",
        model="resnet18",
        pretrained=True,
        **{
            "data-root": str(root / "office-home"),
            "label-kind": "domain",
            "num-partitions": 4,
            "partition-size": 12,
            "aux-size": 32,
            "alpha": 0.1,
            "clients-per-round": 2,
            "num-server-rounds": 1,
            "batch-size": 8,
            "pretrain-bank-size": 100,
            "pretrain-steps": 20,
            "pretrain-client-size": 12,
            "results-path": str(results),
        },
    )
    cfg.update(over)
    return cfg


def test_pretrained_offline_without_the_file_names_the_path(tmp_path, cache_dir, monkeypatch):
    from ripple_flwr.training import pretrained as module

    def offline(*args, **kwargs):
        raise OSError("offline (test)")

    monkeypatch.setattr(module, "_download", offline)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "empty"))
    cfg = office_config(cache_dir, tmp_path, tmp_path / "x.json")
    expected = tmp_path / "empty" / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    with pytest.raises(ConfigError, match=str(expected)):
        run_server(FakeGrid(cfg), cfg)


def test_gldv2_natural_split_with_pretrained_resnet18(photo_root, torch_home, cache_dir, tmp_path):
    cfg = tiny_run_config(
        cache_dir,
        method="fedavg",  # the split and the model (Ripple on GLDv2: the tables test below)
        dataset="gldv2-23k",
        model="resnet18",
        pretrained=True,
        **{
            "data-root": str(photo_root / "gldv2"),
            "num-partitions": 5,
            "new-clients": 1,
            "aux-size": 24,
            "clients-per-round": 2,
            "num-server-rounds": 1,
            "batch-size": 8,
            "results-path": str(tmp_path / "gld.json"),
        },
    )
    r = json.loads(run_server(FakeGrid(cfg), cfg).read_text())
    assert r["federation"]["image_shape"] == [3, 64, 64]
    assert r["pretrained"]["loaded"] > 0
    assert r["clients"]["partition_ids"] == [0, 1, 2, 3, 4]
    assert r["zero_shot"]["partition_ids"] == [5]


# Per data set: the tables.py flags that shrink the paper's protocol to the test files.
TABLES_FLAGS = {
    "gldv2-23k": ["--clients", "5", "--aux-size", "24", "--set", "pretrain-client-size=10"],
    "office-home": [
        "--clients",
        "4",
        "--partition-size",
        "12",
        "--aux-size",
        "32",
        "--set",
        "pretrain-client-size=12",
    ],
}
FOLDER = {"gldv2-23k": "gldv2", "office-home": "office-home"}


@pytest.mark.parametrize("dataset", sorted(TABLES_FLAGS))
def test_tables_script_runs_the_photo_sets(dataset, photo_root, torch_home, tmp_path):
    """Table 1's photo columns: tables.py fills in the paper's protocol for the data set."""
    out = tmp_path / "table1"
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "tables.py"),
        "table1",
        "--dataset",
        dataset,
        "--data-root",
        str(photo_root / FOLDER[dataset]),
        "--methods",
        "ripple-strat-gmm-vae",
        "--rounds",
        "1",
        "--seeds",
        "42",  # one seed: the paper's three would triple the test for nothing it checks
        "--jobs",
        "1",  # one run: serially, no Ray (tests/experiments/test_sweep.py covers Ray tasks)
        "--eval-every",
        "1",
        "--clients-per-round",
        "2",
        *TABLES_FLAGS[dataset],
        "--set",
        "num-components=4",
        "--set",
        "batch-size=8",
        "--set",
        "pretrain-bank-size=100",
        "--set",
        "pretrain-steps=20",
        "--set",
        f'cache-dir="{tmp_path / "cache"}"',
        "--out",
        str(out),
    ]
    env = {**os.environ, "TORCH_HOME": str(torch_home)}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["dataset"] == dataset and line["model"] == "resnet18"
    results = sorted(out.glob("*.json"))
    assert results, list(out.iterdir())
    r = json.loads(results[0].read_text())
    assert r["settings"]["pretrained"] is True
    assert r["pretrained"]["path"] == str(torch_home / "hub" / "checkpoints" / RESNET18)
    assert r["embedding_bytes_per_client"] == P_64 * 4  # embedded at 64x64
    if dataset == "office-home":  # the preset: Dirichlet over the four domains, 224x224
        assert r["settings"]["label-kind"] == "domain" and r["settings"]["alpha"] == 0.1
        assert r["federation"]["image_shape"] == [3, 224, 224]


FLWR_RUN = {
    "office-home": (
        'label-kind="domain" image-size=64 num-partitions=4 partition-size=12 aux-size=32 ',
        4,
        [3, 64, 64],
    ),
    "gldv2-23k": ("num-partitions=5 aux-size=24 ", 5, [3, 64, 64]),
}


@pytest.fixture(scope="module")
def photo_sim_link(photo_root):
    """One simulation SuperLink for both photo sets' runs; ``TORCH_HOME`` (the weights file)
    must be in its environment, which its simulations and their Ray workers inherit."""
    import tempfile

    from conftest import SimulationLink

    ray_tmp = Path(tempfile.mkdtemp(prefix="rf-ray-", dir="/tmp"))  # short: AF_UNIX paths
    link = SimulationLink(photo_root / "sim-link", ray_tmp, TORCH_HOME=str(photo_root / "torch"))
    try:
        yield link.start()
    finally:
        link.stop()
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.mark.skipif(shutil.which("flwr") is None, reason="flwr CLI not installed")
@pytest.mark.xdist_group("flower-processes")  # conftest.py: one deployment at a time
@pytest.mark.parametrize("dataset", sorted(FLWR_RUN))
def test_flwr_run_photo_sets(dataset, photo_root, tmp_path, photo_sim_link):
    results = tmp_path / "results.json"
    extra, nodes, shape = FLWR_RUN[dataset]
    run_config = (
        f'method="fedavg" dataset="{dataset}" data-root="{photo_root / FOLDER[dataset]}" '
        f'model="resnet18" pretrained=true {extra}'
        "num-components=4 clients-per-round=2 num-server-rounds=1 eval-every=1 batch-size=8 "
        f'results-path="{results}" cache-dir="{tmp_path / "cache"}" node-wait-timeout=60.0 '
        "round-timeout=300.0"
    )
    photo_sim_link.run(run_config, nodes, timeout=400)
    r = json.loads(results.read_text())
    assert r["federation"]["dataset"] == dataset
    assert r["federation"]["image_shape"] == shape
    assert r["pretrained"]["official"] is False
    assert r["clients"]["partition_ids"] == list(range(nodes))
