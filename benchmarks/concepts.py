"""The concept step on every map cell, without training: concepts found, ARI, and the
standardized template distances that ``MERGE_Z`` separates.

For each cell of the map (``paper/hmap.py``) and each development seed, every client's
per-label block is computed by the client code (``label_block`` on its training split,
``min-label-count`` 20), the server's concept step runs on the training clients
(Ripple-HDB's rule), and the script prints:

- G, the concepts found, and the ARI of each client's largest concept weight against its
  true concept (cells with concept shift; n/a elsewhere: one true concept);
- the standardized distance between the templates of HDBSCAN's first groups after k-means
  (before any merge), split into pairs whose groups share their majority true concept
  ("alike": merging them is right) and pairs that do not ("apart"). ``MERGE_Z`` must lie
  above the first and below the second. Cells whose domains are no concepts (rotations)
  have no such truth: their pairs are not split.

    PYTHONPATH=. python benchmarks/concepts.py --json docs/results/concepts.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paper.hmap import BASE, CELLS, ROW_KEYS  # noqa: E402
from ripple_flwr.aggregation import concepts as cm  # noqa: E402
from ripple_flwr.app.run_config import parse_run_config  # noqa: E402
from ripple_flwr.data.cache import cached_federation  # noqa: E402
from ripple_flwr.runs.results import hard_ari  # noqa: E402

DEV_SEEDS = (42, 7, 123)  # the development seeds (issue 62): no verdict is drawn from these
MIN_COUNT = 20


def one(cell: str, seed: int, min_count: int = MIN_COUNT) -> dict:
    keys = {k: v for k, v in CELLS[cell].items() if k != ROW_KEYS}
    alpha = keys.get("alpha", BASE.get("alpha"))
    settings = parse_run_config({**BASE, **keys, "alpha-new": alpha, "data-seed": seed})
    fed = cached_federation(settings)
    c, d = fed.dataset.num_classes, int(np.prod(fed.dataset.image_shape))
    blocks = [
        cm.label_block(*fed.client_data(p)[:2], c, min_count) for p in range(fed.num_partitions)
    ]
    stacks, _ = cm.read_blocks(np.stack(blocks), c, d, min_count)
    n = fed.num_train_partitions
    train = stacks.select(np.arange(n))
    truth = fed.concept_mixtures()
    found = cm.find_concepts(train, None, 3, np.random.default_rng(0))
    w, _ = cm.unmix(stacks, found)
    out = {
        "labels_kept": float(train.mask.sum(axis=1).mean()),
        "clients_keeping_none": int((~train.mask.any(axis=1)).sum()),
        "concepts": found.num_concepts,
        "ari_train": None if truth is None else hard_ari(truth[:n], w[:n].argmax(1))[0],
        "ari_new": None if truth is None else hard_ari(truth[n:], w[n:].argmax(1))[0],
    }
    if truth is None and fed.dataset.domains is not None:
        return out  # domains that are no concepts (rotations): no truth to split pairs by
    # HDBSCAN's first groups after k-means, before any merge: their templates' distances.
    usable = np.flatnonzero(train.mask.any(axis=1))
    part = train.select(usable)
    dist = cm.completed_distances(cm.standardized_distances(part))
    groups = cm._kmeans(part, cm._hdbscan_groups(dist, 3)[0])
    z = cm.standardized_distances(cm.templates(part, groups, int(groups.max()) + 1))
    own = np.zeros(len(usable), dtype=int) if truth is None else truth[:n][usable].argmax(axis=1)
    major = [np.bincount(own[groups == g]).argmax() for g in range(int(groups.max()) + 1)]
    alike, apart = [], []
    for a in range(len(major)):
        for b in range(a + 1, len(major)):
            if np.isfinite(z[a, b]):
                (alike if major[a] == major[b] else apart).append(float(z[a, b]))
    out["z_alike_max"] = max(alike) if alike else None
    out["z_apart_min"] = min(apart) if apart else None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(DEV_SEEDS))
    ap.add_argument(
        "--min-count", type=int, default=MIN_COUNT, help="min-label-count (the default's: 20)"
    )
    ap.add_argument("--cells", nargs="+", choices=list(CELLS), default=list(CELLS))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    out = {
        "merge_z": cm.MERGE_Z,
        "min_label_count": args.min_count,
        "seeds": args.seeds,
        "cells": {},
    }
    for cell in args.cells:
        out["cells"][cell] = {}
        for seed in args.seeds:
            r = one(cell, seed, args.min_count)
            out["cells"][cell][str(seed)] = r
            print(f"{cell:20s} seed {seed:4d}: {json.dumps(r)}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
