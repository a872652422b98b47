"""Side by side with a peer: the default simulation's FedAvg round against PFLlib's, same clients.

PFLlib (github.com/TsingZ0/PFLlib) is a maintained single-process FL library.
This script gives both the same federation, the app's own partition:
Fashion-MNIST, 20 clients of 200 images (160 train / 40 test), Dir(0.1)
over classes, FedAvg, 10 clients a round, ``--rounds`` rounds.

- **PFLlib as shipped**: its ``system/main.py`` with its defaults (its
  FedAvgCNN for MNIST-like data, plain SGD at lr 0.005, batch 10, one local
  epoch, torch's default threads, no OpenMP wait policy set), on the CPU. Its
  ``system/`` folder is copied into a temp folder beside a
  ``dataset/<name>/{train,test}/<i>.npz`` written from our partition (its
  format: ``data = {"x": (n, 1, 28, 28) float32, "y": (n,) int64}``).
  It evaluates every client at rounds 0 and R only (``-eg R``); its training
  round is the median of its own per-round times for the rounds between.
- **ripple-flwr as shipped**: ``flwr run`` in simulation with the README's
  federation (``client-resources-num-cpus=1``: one ClientApp per core) and
  the app's defaults (paper CNN, its optimiser, ``client-threads = 1``,
  ``OMP_WAIT_POLICY=PASSIVE``); its training round is the median round wall
  from the results file, round 1 left out.

Prints ONE JSON line: ``peer_train_round_ratio_vs_pfllib`` (ours / PFLlib's;
the target is <= 0.8), both medians, both accuracies and the settings.

    python benchmarks/peer_pfllib.py --pfllib PATH/TO/PFLlib [--rounds 40] [--python PY]

``--python`` is the interpreter with PFLlib's requirements (h5py, cvxpy,
calmsize besides torch); default: this one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as server_app.py and client_app.py set it

import numpy as np  # noqa: E402
from sim_overhead import simulated_rounds  # noqa: E402

from ripple_flwr.app.client.data import benchmark_data  # noqa: E402
from ripple_flwr.app.run_config import parse_run_config  # noqa: E402

DATASET = "FMNIST_ripple"  # "MNIST" in the name: PFLlib picks FedAvgCNN(1, 10, dim=1024)
TIME_COST = re.compile(r"-+ time cost -+ ([0-9.eE+-]+)")
ACCURACY = re.compile(r"Averaged Test Accuracy: ([0-9.]+)")


def run_config(args: argparse.Namespace, results: Path) -> dict:
    return {
        "method": "fedavg",
        "dataset": "fashion-mnist",
        "num-partitions": args.clients,
        "partition-size": 200,
        "test-fraction": 0.2,
        "alpha": 0.1,
        "clients-per-round": args.clients // 2,
        "num-server-rounds": args.rounds,
        "eval-every": args.rounds,
        "results-path": str(results),
    }


def write_pfllib_data(cfg: dict, root: Path) -> tuple[int, int]:
    """Our partition in PFLlib's layout under ``root/dataset/DATASET``; (train, test) images."""
    settings = parse_run_config(cfg)
    sizes = [0, 0]
    for split in ("train", "test"):
        (root / "dataset" / DATASET / split).mkdir(parents=True, exist_ok=True)
    for pid in range(int(cfg["num-partitions"])):
        d = benchmark_data(settings, pid)
        for i, (split, x, y) in enumerate(
            (("train", d.x_train, d.y_train), ("test", d.x_test, d.y_test))
        ):
            x = np.asarray(x, dtype=np.float32).reshape(len(x), *d.image_shape)
            data = {"x": x, "y": np.asarray(y, dtype=np.int64)}
            np.savez(root / "dataset" / DATASET / split / f"{pid}.npz", data=data)
            sizes[i] += len(x)
    return sizes[0], sizes[1]


def run_pfllib(args: argparse.Namespace, cfg: dict, tmp: Path) -> dict:
    """PFLlib's FedAvg on our partition; its per-round times and final accuracy."""
    shutil.copytree(Path(args.pfllib) / "system", tmp / "system")
    write_pfllib_data(cfg, tmp)
    cmd = [args.python, "main.py", "-data", DATASET, "-m", "CNN", "-algo", "FedAvg"]
    cmd += ["-gr", str(args.rounds), "-nc", str(args.clients), "-jr", "0.5", "-ncl", "10"]
    cmd += ["-dev", "cpu", "-eg", str(args.rounds)]
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}  # as shipped
    t0 = time.perf_counter()
    out = subprocess.run(
        cmd, cwd=tmp / "system", env=env, capture_output=True, text=True, timeout=args.timeout
    )
    wall = time.perf_counter() - t0
    costs = [float(c) for c in TIME_COST.findall(out.stdout)]
    if out.returncode != 0 or len(costs) != args.rounds + 1:
        raise SystemExit(f"PFLlib did not finish its rounds:\n{(out.stdout + out.stderr)[-3000:]}")
    accuracy = [float(a) for a in ACCURACY.findall(out.stdout)]
    train = costs[1 : args.rounds]  # rounds 0 and R evaluate every client besides training
    return {
        "train_round_s": statistics.median(train),
        "eval_s": costs[args.rounds] - statistics.median(train),
        "final_accuracy": accuracy[-1] if accuracy else None,
        "wall_s": wall,
    }


def run_ours(args: argparse.Namespace, cfg: dict, tmp: Path) -> dict:
    sim_args = argparse.Namespace(
        clients=args.clients, workers=os.cpu_count() or 1, in_memory=False, timeout=args.timeout
    )
    t0 = time.perf_counter()
    res = simulated_rounds(sim_args, cfg, tmp)
    walls = [float(r["wall_seconds"]) for r in res["rounds"]][1:]
    evals = [float(e.get("wall_seconds", float("nan"))) for e in res.get("evaluations", [])]
    return {
        "train_round_s": statistics.median(walls),
        "eval_s": evals[-1] if evals else None,
        "final_accuracy": res.get("final_accuracy"),
        "wall_s": time.perf_counter() - t0,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pfllib", required=True, help="a PFLlib checkout (holds system/main.py)")
    p.add_argument("--python", default=sys.executable, help="interpreter for PFLlib")
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--timeout", type=float, default=1800)
    args = p.parse_args(argv)
    if not (Path(args.pfllib) / "system" / "main.py").is_file():
        p.error(f"--pfllib {args.pfllib!r} has no system/main.py; pass a PFLlib checkout")
    if args.rounds < 4:
        p.error("--rounds must be >= 4 (rounds 0/1 and R are left out of the medians)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        cfg = run_config(args, tmp_path / "ours" / "sim.json")
        (tmp_path / "ours").mkdir()
        (tmp_path / "peer").mkdir()
        peer = run_pfllib(args, cfg, tmp_path / "peer")
        ours = run_ours(args, cfg, tmp_path / "ours")
    commit = os.popen(f"git -C {ROOT} rev-parse --short HEAD").read().strip()
    peer_commit = os.popen(f"git -C {args.pfllib} rev-parse --short HEAD 2>/dev/null").read()
    line = {
        "peer_train_round_ratio_vs_pfllib": round(ours["train_round_s"] / peer["train_round_s"], 3),
        "ripple_flwr_train_round_s": round(ours["train_round_s"], 4),
        "pfllib_train_round_s": round(peer["train_round_s"], 4),
        "ripple_flwr_eval_s": ours["eval_s"],
        "pfllib_eval_s": round(peer["eval_s"], 4),
        "ripple_flwr_final_accuracy": ours["final_accuracy"],
        "pfllib_final_accuracy": peer["final_accuracy"],
        "ripple_flwr_wall_s": round(ours["wall_s"], 1),
        "pfllib_wall_s": round(peer["wall_s"], 1),
        "rounds": args.rounds,
        "clients": args.clients,
        "clients_per_round": args.clients // 2,
        "dataset": "fashion-mnist, 160/40 images a client, Dir(0.1)",
        "ripple_flwr": "flwr run, simulation, 1 CPU a ClientApp, client-threads 1, PASSIVE",
        "pfllib": "main.py defaults: FedAvgCNN, SGD lr 0.005, batch 10, torch default threads",
        "cpus": os.cpu_count(),
        "commit": commit,
        "pfllib_commit": peer_commit.strip() or "unknown (not a git checkout)",
    }
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
