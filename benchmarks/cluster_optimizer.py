"""Server time of one Ripple aggregation with and without ``cluster-optimizer``.

One round's server step on the paper's CNN (Fashion-MNIST shapes) with K cluster models
and S returned updates: eq. 9 alone (``none``) against eq. 9 followed by Flower's
optimiser per cluster (``fedyogi``, ``fedadam``, ``fedavgm``). The bytes of a round do
not change (the optimiser is server work only). Median of ``--repeats`` rounds, each after
one warm-up round (FedYogi's and FedAdam's moments are created on the first).

    PYTHONPATH=. python benchmarks/cluster_optimizer.py --json docs/results/cluster_optimizer.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ripple_flwr.aggregation.mixing import apply_stacked_deltas  # noqa: E402
from ripple_flwr.app.flower_internals import set_task_identity  # noqa: E402
from ripple_flwr.app.run_config import parse_run_config  # noqa: E402
from ripple_flwr.app.server.bases.cluster_optimizer import OPTIMIZERS, ClusterOptimizer  # noqa: E402
from ripple_flwr.training.models import build_model, get_state  # noqa: E402


def one_round(stacked, deltas, w, optimizer) -> dict:
    """The server's step of one round (server-lr = 1, the default): the new stacked models."""
    updated = apply_stacked_deltas(stacked, deltas, w, 1.0, 1e-8)
    if optimizer is not None:
        updated = optimizer.step(2, stacked, updated, w.sum(axis=0))
    return updated


def traffic_floor(stacked: dict, repeats: int) -> float:
    """Seconds to read 4 and write 3 float32 arrays of the stacked models' size (what any
    FedOpt step must move: now, target, m, v in; m, v, the new models out), as 3 fused
    two-in-one-out passes plus one copy: a floor no implementation in numpy beats."""
    size = sum(int(np.asarray(v).size) for v in stacked.values())
    a, b, c, d = (np.full(size, 0.5, dtype=np.float32) for _ in range(4))
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        np.add(a, b, out=c)  # 2 in, 1 out
        np.add(c, d, out=a)  # 2 in, 1 out (7 arrays moved with the copy below: 4 in, 3 out)
        np.copyto(b, a)
        times.append(time.perf_counter() - t0)
    return float(np.median(times[1:]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, nargs="+", default=[10, 40])
    ap.add_argument("--clients", type=int, default=10, help="updates a round (10)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    # Flower's strategies build Messages, which need a run's identity outside a Flower run.
    set_task_identity(run_id=1, node_id=0, task_id=1)
    rng = np.random.default_rng(0)
    state = get_state(build_model("cnn", (1, 28, 28), 10))
    out: dict = {
        "machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs)",
        "model_parameters": int(sum(v.size for v in state.values())),
        "clients": args.clients,
        "seconds": {},
    }
    for k in args.k:
        stacked = {key: np.repeat(v[None], k, axis=0) for key, v in state.items()}
        deltas = {
            key: rng.normal(0, 1e-3, (args.clients, *v.shape)).astype(v.dtype)
            for key, v in state.items()
        }
        w = rng.dirichlet(np.full(k, 0.1), size=args.clients)
        for name in ("none", *OPTIMIZERS):
            settings = parse_run_config({"num-components": k, "cluster-optimizer": name})
            opt = None if name == "none" else ClusterOptimizer(name, k, settings)
            one_round(stacked, deltas, w, opt)  # warm-up: the moments exist from here
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                one_round(stacked, deltas, w, opt)
                times.append(time.perf_counter() - t0)
            med = float(np.median(times))
            out["seconds"].setdefault(str(k), {})[name] = med
            print(f"K={k:3d} {name:8s}: {med * 1e3:8.1f} ms per round")
        floor = traffic_floor(stacked, args.repeats)
        out.setdefault("fedopt_memory_floor_seconds", {})[str(k)] = floor
        print(
            f"K={k:3d} floor   : {floor * 1e3:8.1f} ms more than none at least: FedYogi's and "
            "FedAdam's step reads 4 and writes 3 arrays of the K models' size (now, target, "
            "m, v -> m, v, new), timed as the same traffic through plain copies"
        )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
