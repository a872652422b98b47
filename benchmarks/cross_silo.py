"""Cross-silo routing: silos with their own folders, in simulation and in a loopback deployment.

Writes the own-data tests' federation (``tests/silos.py``: a server auxiliary
folder and four MNIST-digit silos with chosen class mixtures, one held out),
runs Ripple on it twice with the same settings,

- in simulation: the in-process grid, every node reading its own folder;
- deployed: a real SuperLink and four SuperNodes on 127.0.0.1 (``--no-deploy``
  skips it), each started with ``--node-config "data=... name=..."``;

and prints ONE JSON line per run: the mean L1 error of the routing weights
against the mixtures the silos were written with (and the uniform guess's),
whether each silo's dominant component was found, the held-out silo's
zero-shot weights and accuracy, and the wall time.

    python benchmarks/cross_silo.py [--rounds 2] [--no-deploy]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the silos and the loopback helpers of the tests

import numpy as np  # noqa: E402
from silos import CLASSES, SILO_COUNTS, mixture, write_federation  # noqa: E402

TRAIN = ("silo-a", "silo-b", "silo-c")


def run_config(paths: dict, out: Path, rounds: int) -> dict:
    return {
        "method": "ripple",
        "client-data": "local",
        "aux-data": str(paths["aux"]),
        "aux-size": 240,
        "num-partitions": 3,
        "new-clients": 1,
        "num-components": len(CLASSES),
        "clients-per-round": 3,
        "num-server-rounds": rounds,
        "eval-every": 1,
        "batch-size": 16,
        "pretrain-bank-size": 300,
        "pretrain-steps": 100,
        "pretrain-client-size": 40,
        "cache-dir": str(out / "cache"),
        "results-path": str(out / "results.json"),
        "node-wait-timeout": 60.0,
        "round-timeout": 120.0,
    }


def summary(mode: str, results: dict, seconds: float) -> dict:
    names = results["clients"]["names"]
    truth = np.stack([mixture(SILO_COUNTS[n]) for n in names])
    w = np.asarray(results["routing"]["weights"])
    zs = results["zero_shot"]
    return {
        "benchmark": "cross_silo_routing",
        "mode": mode,
        "silos": names,
        "routing_l1": float(np.abs(w - truth).sum(axis=1).mean()),
        "uniform_l1": float(np.abs(1 / len(CLASSES) - truth).sum(axis=1).mean()),
        "dominant_found": bool((w.argmax(axis=1) == truth.argmax(axis=1)).all()),
        "held_out": zs["names"],
        "held_out_l1": float(
            np.abs(np.asarray(zs["weights"]) - mixture(SILO_COUNTS["silo-d"])).sum()
        ),
        "held_out_accuracy": zs["accuracy"]["weighted_mean"],
        "final_accuracy": results["final_accuracy"],
        "seconds": round(seconds, 1),
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs",
    }


def nodes(paths: dict) -> list[dict]:
    out = [{"data": str(paths[n]), "name": n} for n in TRAIN]
    return out + [{"data": str(paths["silo-d"]), "name": "silo-d", "held-out": True}]


def simulate(paths: dict, out: Path, rounds: int) -> dict:
    from ripple_flwr.app.server.run import run_server
    from ripple_flwr.runs.outputs import OUTPUT_DIR_ENV
    from ripple_flwr.testing.inprocess import InProcessGrid

    os.environ[OUTPUT_DIR_ENV] = str(out)
    cfg = run_config(paths, out, rounds)
    t0 = time.perf_counter()
    path = run_server(InProcessGrid(cfg, node_configs=nodes(paths)), cfg)
    return summary(
        "simulation (in-process)", json.loads(path.read_text()), time.perf_counter() - t0
    )


def deploy(paths: dict, out: Path, rounds: int) -> dict:
    from conftest import run_insecure_deployment

    cfg = run_config(paths, out, rounds)
    text = " ".join(f"{k}={json.dumps(v)}" for k, v in cfg.items())
    node_configs = [
        " ".join(f"{k}={json.dumps(v)}" for k, v in n.items()).replace("True", "true")
        for n in nodes(paths)
    ]
    ray = Path(tempfile.mkdtemp(prefix="rf-ray-", dir="/tmp"))
    t0 = time.perf_counter()
    run_insecure_deployment(out, ray, text, node_configs, timeout=600)
    results = json.loads((out / "results.json").read_text())
    return summary(
        "deployment (loopback SuperLink + 4 SuperNodes)", results, time.perf_counter() - t0
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--no-deploy", action="store_true", help="simulation only")
    args = p.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="ripple-cross-silo-"))
    paths = write_federation(base / "silos")
    (base / "sim").mkdir()
    print(json.dumps(simulate(paths, base / "sim", args.rounds)), flush=True)
    if not args.no_deploy:
        (base / "deploy").mkdir()
        os.environ["RIPPLE_OUTPUT_DIR"] = str(base / "deploy")  # inherited by the SuperLink
        print(json.dumps(deploy(paths, base / "deploy", args.rounds)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
