"""PACFL's two budget rules side by side: the clusters each gives before any training.

``pacfl-budget = per-class`` (the port's default: ``pacfl-p`` = 3 vectors for every class a
client holds) against ``dirichlet`` (the authors' rule for Dirichlet splits: 20 vectors
spread by class share, a dominant class weighing its raw count). Each client's summary is
computed by the client code itself (:func:`ripple_flwr.app.client.work.client_summary`), the
server reads it as its checks would (unit rows, :func:`~ripple_flwr.aggregation.subspaces.basis_of`)
and clusters the angles at ``pacfl-beta`` (default 8) with the default linkage, on the map's
protocol (100 clients x 200 Fashion-MNIST images) at ``--data-seed`` (default 1000: no table
or map run uses it, as for ``benchmarks/pacfl_beta.py``). No training, no test data. For each
cell and rule it prints the clusters, their adjusted Rand index against the clients' dominant
labels (where one holds >= 0.5 of a client's mixture), the vectors and bytes each client sent.

    PYTHONPATH=. python benchmarks/pacfl_budget.py --json docs/results/pacfl_budget.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paper.hmap import BASE, CELLS  # noqa: E402
from ripple_flwr.aggregation.subspaces import (  # noqa: E402
    basis_of,
    cluster_by_angles,
    smallest_angles,
)
from ripple_flwr.app.client.work import client_summary  # noqa: E402
from ripple_flwr.app.run_config import parse_run_config  # noqa: E402
from ripple_flwr.data.cache import cached_federation  # noqa: E402
from ripple_flwr.methods.pacfl.spec import PACFL_BETA, PACFL_BUDGET  # noqa: E402
from ripple_flwr.runs.results import hard_ari  # noqa: E402

RULES = PACFL_BUDGET.choices  # per-class, dirichlet


def clusters(cell: str, seed: int, budget: str, beta: float) -> dict:
    """One cell under one budget rule: the clusters and what the clients sent."""
    cfg = {**BASE, **CELLS[cell], "data-seed": seed, "new-clients": 0}
    settings = parse_run_config({**cfg, "method": "pacfl", "pacfl-budget": budget})
    fed = cached_federation(settings)
    d = int(np.prod(fed.dataset.image_shape))
    sent = [client_summary(settings, pid, "method") for pid in range(fed.num_train_partitions)]
    bases = [basis_of(s, d) for s in sent]
    labels = cluster_by_angles(smallest_angles(bases, bases), beta, "average")
    ari, hard = hard_ari(fed.mixtures[: fed.num_train_partitions], labels)
    vectors = [len(b) for b in bases]
    nbytes = [int(s.nbytes) for s in sent]
    return {
        "clusters": int(labels.max()) + 1,
        "sizes": np.bincount(labels).tolist(),
        "ari": ari,
        "hard_clients": hard,
        "vectors": {"min": min(vectors), "median": float(np.median(vectors)), "max": max(vectors)},
        "summary_bytes": {"median": float(np.median(nbytes)), "max": max(nbytes)},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cells",
        nargs="+",
        default=["label-skew-1", "label-skew-0.1", "quantity-skew"],
        choices=list(CELLS),
    )
    ap.add_argument("--data-seed", type=int, default=1000)
    ap.add_argument("--beta", type=float, default=PACFL_BETA.default)
    ap.add_argument("--json", type=Path, help="also write the table here")
    args = ap.parse_args(argv)
    rows: dict[str, dict] = {}
    for cell in args.cells:
        rows[cell] = {rule: clusters(cell, args.data_seed, rule, args.beta) for rule in RULES}
        for rule, r in rows[cell].items():
            ari = "n/a" if r["ari"] is None else f"{r['ari']:.3f}"
            v = r["vectors"]
            print(
                f"{cell:15s} {rule:9s}: {r['clusters']:3d} clusters, ARI {ari} "
                f"({r['hard_clients']} clients with a dominant label), vectors "
                f"{v['min']}-{v['max']} (median {v['median']:g}), "
                f"at most {r['summary_bytes']['max']:,} bytes"
            )
    out = {
        "command": "PYTHONPATH=. python benchmarks/pacfl_budget.py --json "
        "docs/results/pacfl_budget.json",
        "data_seed": args.data_seed,
        "beta": args.beta,
        "linkage": "average",
        "protocol": {k: v for k, v in BASE.items() if k != "new-clients"},
        "cells": rows,
    }
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
