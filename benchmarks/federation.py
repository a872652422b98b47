"""Ripple vs FedAvg on the same small federation: bytes and server cost per round.

Runs both methods in-process (``ripple_flwr.testing.inprocess.InProcessGrid`` with the
real client handlers, no Ray), K=10 and the paper's CNN on mnist-5k, and
prints ONE JSON line:

- ``bytes_per_round_ratio_vs_fedavg``: (down + up) bytes per round, measured
  from the ArrayRecords of the messages of both runs (must be 1.000);
- ``embedding_bytes_per_client``: the one-shot summary each client sends once;
- ``bytes_per_round_vs_fedavg``: the same ratio for each of ``--methods``
  (default SCAFFOLD, FedDyn, Per-FedAvg, pFedMe), with their bytes per round:
  SCAFFOLD's control variate travels both ways beside the model;
- ``round_wall_ratio_vs_fedavg``: wall time of a whole round in simulation
  (configure, client training, aggregation), median over rounds, Ripple /
  FedAvg: what Ripple's server-side work (mixing K models per client, eq. 9)
  costs a user per round;
- ``server_seconds_ratio_vs_fedavg``: the server's own share alone (the
  strategy's configure_train + aggregate_train: sampling, mixing,
  serialising one model per client, reply validation, aggregation). FedAvg
  sends one shared record and Ripple one per client, so this ratio is above
  1 by construction; its absolute value (milliseconds) is what matters;
- ``ifca_round_wall_ratio_vs_fedavg``: the same whole-round ratio for IFCA at
  K = 4 (each client scores the 4 cluster models on its training split, then
  trains the best; ``benchmarks/ifca_eval.py`` times that choice alone);
- the raw numbers behind them.

    python benchmarks/federation.py [--rounds 10] [--cache-dir DIR] [--methods scaffold ...]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from ripple_flwr.app.server.run import run_server  # noqa: E402
from ripple_flwr.experiments.compose import applied  # noqa: E402
from ripple_flwr.runs.outputs import OUTPUT_DIR_ENV  # noqa: E402
from ripple_flwr.settings import CACHE_DIR_ENV  # noqa: E402
from ripple_flwr.testing.inprocess import InProcessGrid  # noqa: E402

IFCA_K = 4  # IFCA sends and scores K models per client: its round cost grows with K


def run(method: str, rounds: int, cache_dir: str, out: Path, k: int = 10) -> dict:
    cfg = {
        "method": method,
        "num-partitions": 20,
        "clients-per-round": 10,
        "num-components": k,
        "model": "cnn",
        "num-server-rounds": rounds,
        "eval-every": rounds,
        "pretrain-bank-size": 1000,
        "pretrain-steps": 500,
        "cache-dir": cache_dir,
        "results-path": str(out / f"{method}-k{k}.json"),
    }
    cfg = applied(cfg, ["pretrain-bank-size", "pretrain-steps"])[0]  # the router's: Ripple's
    os.environ[OUTPUT_DIR_ENV] = str(out.resolve())  # this script is the server
    path = run_server(InProcessGrid(cfg, keep_traffic=False), cfg)
    return json.loads(path.read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--cache-dir", default="", help="default: $RIPPLE_CACHE_DIR or ~/.cache")
    p.add_argument(
        "--methods",
        nargs="*",
        default=["scaffold", "feddyn", "perfedavg", "pfedme"],
        help="other registered methods whose bytes per round are compared with FedAvg's",
    )
    args = p.parse_args(argv)
    if args.cache_dir:  # this script is the server: the folder is its cache root
        os.environ[CACHE_DIR_ENV] = str(Path(args.cache_dir).expanduser())
    logging.getLogger("flwr").setLevel(logging.WARNING)
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        ripple = run("ripple", args.rounds, args.cache_dir, Path(tmp))
        fedavg = run("fedavg", args.rounds, args.cache_dir, Path(tmp))
        ifca = run("ifca", args.rounds, args.cache_dir, Path(tmp), k=IFCA_K)
        others = {m: run(m, args.rounds, args.cache_dir, Path(tmp)) for m in args.methods}

    def per_round(r: dict, key: str) -> list[float]:
        return [float(x[key]) for x in r["rounds"]]

    def traffic(r: dict) -> list[int]:
        return [x["bytes_down"] + x["bytes_up"] for x in r["rounds"]]

    # Round 1 includes one-off warm-up (first torch calls); leave it out of the medians.
    srv_r = float(np.median(per_round(ripple, "server_seconds")[1:]))
    srv_f = float(np.median(per_round(fedavg, "server_seconds")[1:]))
    wall_r = float(np.median(per_round(ripple, "wall_seconds")[1:]))
    wall_f = float(np.median(per_round(fedavg, "wall_seconds")[1:]))
    wall_i = float(np.median(per_round(ifca, "wall_seconds")[1:]))
    bytes_r, bytes_f = float(np.mean(traffic(ripple))), float(np.mean(traffic(fedavg)))
    others_bytes = {m: float(np.mean(traffic(r))) for m, r in others.items()}
    print(
        json.dumps(
            {
                "bytes_per_round_ratio_vs_fedavg": round(bytes_r / bytes_f, 3),
                "embedding_bytes_per_client": ripple["embedding_bytes_per_client"],
                "bytes_per_round_vs_fedavg": {
                    m: round(b / bytes_f, 3) for m, b in others_bytes.items()
                },
                "bytes_per_round": {"fedavg": bytes_f, **others_bytes},
                "round_wall_ratio_vs_fedavg": round(wall_r / wall_f, 3),
                "server_seconds_ratio_vs_fedavg": round(srv_r / srv_f, 3),
                "ifca_round_wall_ratio_vs_fedavg": round(wall_i / wall_f, 3),
                "ifca_round_wall_seconds": wall_i,
                "ifca_num_components": IFCA_K,
                "ripple_server_seconds_per_round": srv_r,
                "fedavg_server_seconds_per_round": srv_f,
                "ripple_round_wall_seconds": wall_r,
                "fedavg_round_wall_seconds": wall_f,
                "ripple_bytes_per_round": bytes_r,
                "fedavg_bytes_per_round": bytes_f,
                "model_bytes": ripple["model_bytes"],
                "rounds": args.rounds,
                "num_components": 10,
                "clients_per_round": 10,
                "model": "cnn",
                "grid": "in-process (real client handlers, no Ray)",
                "ripple_final_accuracy": ripple["final_accuracy"],
                "fedavg_final_accuracy": fedavg["final_accuracy"],
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
