"""What one client sends in the one-shot query round, by method, against one model.

Ripple (GMM-VAE router) sends its WST embedding, Ripple with mean unmixing its mean image,
class-conditional Ripple either of those followed by its per-label block (count, pixel
variance and mean image of each label with ``min-label-count`` training images or more;
labels below it send zeros, so the block has a fixed length), PACFL its per-class
subspaces (``pacfl-p`` vectors per class, absent classes as zeros);
each is computed by the client code itself (:func:`ripple_flwr.app.client.work.client_summary`)
for the clients of the map's protocol (Fashion-MNIST, 100 clients x 200 images,
Dir(0.1) over the classes, ``--data-seed``), and its array bytes are printed beside the
CNN's model bytes (what every round sends each way, per client).

    PYTHONPATH=. python benchmarks/summary_bytes.py --json docs/results/summary_bytes.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paper.hmap import BASE, CELLS  # noqa: E402
from ripple_flwr.app.client.work import client_summary  # noqa: E402
from ripple_flwr.app.run_config import parse_run_config  # noqa: E402
from ripple_flwr.training.models import build_model, get_state  # noqa: E402

# name -> (the method's settings, the summary kind its clients send)
KINDS = {
    "ripple (gmm-vae)": ({"method": "ripple"}, "embedding"),
    "ripple (mean-unmixing)": ({"method": "ripple", "router": "mean-unmixing"}, "mean"),
    "ripple class-conditional (gmm-vae)": (
        {"method": "ripple", "class-conditional": True},
        "method",
    ),
    "ripple class-conditional (mean-unmixing)": (
        {"method": "ripple", "router": "mean-unmixing", "class-conditional": True},
        "method",
    ),
    "pacfl": ({"method": "pacfl"}, "method"),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-seed", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=5, help="clients summarised (5)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    cfg = {**BASE, **CELLS["label-skew-0.1"], "data-seed": args.data_seed, "new-clients": 0}
    model = sum(v.nbytes for v in get_state(build_model("cnn", (1, 28, 28), 10)).values())
    out = {"protocol": cfg, "model_bytes": int(model), "summary_bytes": {}}
    print(f"model (the paper's CNN): {model:,} bytes, sent down and up each round")
    for name, (method, kind) in KINDS.items():
        settings = parse_run_config({**cfg, **method})
        sizes = [client_summary(settings, pid, kind).nbytes for pid in range(args.clients)]
        out["summary_bytes"][name] = int(np.max(sizes))
        print(f"{name:24s}: {max(sizes):9,} bytes once ({max(sizes) / model:.1%} of one model)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
