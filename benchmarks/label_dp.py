"""What label DP costs the class-conditional summary: noise per pixel and the concepts found.

For each epsilon, every client of a concept-shift federation releases its per-label block
through :class:`~ripple_flwr.privacy.label_means.LabelMechanism` (the client code's own
path: clipped images, Gaussian noise from a seeded generator here so that the figure can
be reproduced; a real client's noise is secret), the server reads the blocks with the
noise it knows and finds the concepts (Ripple-HDB's rule), and the ARI of each client's
largest concept weight against its true concept is printed, for the training clients and
the new clients. No model is trained. The federation is FedRC's cell of the map
(``concept-per-client``) and the Dir(0.1) ``concept-shift`` cell, at a data seed no map
uses (1000 by default).

    PYTHONPATH=. python benchmarks/label_dp.py --json docs/results/label_dp.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paper.hmap import BASE, CELLS  # noqa: E402
from ripple_flwr.aggregation.concepts import (  # noqa: E402
    find_concepts,
    label_block,
    read_blocks,
    unmix,
)
from ripple_flwr.app.run_config import parse_run_config  # noqa: E402
from ripple_flwr.data.cache import cached_federation  # noqa: E402
from ripple_flwr.privacy.label_means import (  # noqa: E402
    LabelMechanism,
    clip_images,
    default_clip,
)
from ripple_flwr.runs.results import hard_ari  # noqa: E402

EPSILONS = (math.inf, 64.0, 16.0, 4.0, 1.0)
CLIPS = (0.0, 4.0)  # 0: the default, sqrt(C*H*W) (nothing clipped); Fashion-MNIST's mean norm ~11
CELL_NAMES = ("concept-per-client", "concept-shift")
MIN_COUNT = 20  # the default min-label-count
DELTA = 1e-5


def concept_ari(cell: str, data_seed: int, epsilon: float, clip: float) -> dict:
    """The concepts found and their ARI on one cell's federation at one epsilon and clip."""
    keys = {k: v for k, v in CELLS[cell].items() if k != "rows"}
    alpha = keys.get("alpha", BASE.get("alpha"))  # new clients drawn as the training ones
    settings = parse_run_config({**BASE, **keys, "alpha-new": alpha, "data-seed": data_seed})
    fed = cached_federation(settings)
    c, shape = fed.dataset.num_classes, fed.dataset.image_shape
    d = int(np.prod(shape))
    bound = clip or default_clip(shape)
    mech = None if math.isinf(epsilon) else LabelMechanism(epsilon, DELTA, bound)
    rng = np.random.default_rng([data_seed, 60])
    blocks = []
    for pid in range(fed.num_partitions):
        x, y, _, _ = fed.client_data(pid)
        if mech is not None:
            x = clip_images(x, mech.clip)
        block = label_block(x, y, c, MIN_COUNT)
        blocks.append(block if mech is None else mech.release(block, c, rng))
    stacks, _ = read_blocks(
        np.stack(blocks), c, d, MIN_COUNT, noise_sd=None if mech is None else mech.sigmas
    )
    n = fed.num_train_partitions
    found = find_concepts(stacks.select(np.arange(n)), None, 3, np.random.default_rng(0))
    w, _ = unmix(stacks, found)
    truth = fed.concept_mixtures()
    train, _ = hard_ari(truth[:n], w[:n].argmax(axis=1))
    new, _ = hard_ari(truth[n:], w[n:].argmax(axis=1))
    sd = None if mech is None else float(mech.sigmas(np.array([MIN_COUNT]))[0][0])
    return {
        "concepts": found.num_concepts,
        "ari_train": train,
        "ari_new": new,
        "noise_sd_per_pixel_at_min_count": sd,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-seed", type=int, default=1000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    out = {
        "protocol": {**BASE, "data-seed": args.data_seed, "min-label-count": MIN_COUNT},
        "delta": DELTA,
        "clips": {"0": "sqrt(C*H*W), the default: nothing clipped", "4": "L2 norm 4"},
        "cells": {},
    }
    for cell in CELL_NAMES:
        out["cells"][cell] = {}
        for clip in CLIPS:
            for eps in EPSILONS:
                if math.isinf(eps) and clip:
                    continue  # no release: the clip does nothing
                r = concept_ari(cell, args.data_seed, eps, clip)
                key = f"clip {clip:g}, epsilon {'inf' if math.isinf(eps) else f'{eps:g}'}"
                out["cells"][cell][key] = r
                print(
                    f"{cell:20s} {key:22s}: G = {r['concepts']}, ARI train "
                    f"{r['ari_train']}, new {r['ari_new']}, noise sd per pixel (n = "
                    f"{MIN_COUNT}) {r['noise_sd_per_pixel_at_min_count']}"
                )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
