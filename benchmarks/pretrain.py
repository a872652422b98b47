"""Pre-training cost and routing quality: one JSON line per dataset.

Runs the full pre-training job (bank built from scratch in a fresh cache,
so the bank time is counted) with the defaults of ``pretrain_vae.py`` in a
child process, and prints its wall time, peak memory and routing errors
(GMM-VAE vs uniform and mean unmixing, held-out synthetic and real clients).

    python benchmarks/pretrain.py --dataset mnist-5k [--dataset fashion-mnist] [-- extra args]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEYS = ("pretrain_seconds", "bank_seconds", "train_seconds", "train_steps", "peak_rss_mb")


def run(dataset: str, extra: list[str], out_dir: Path) -> dict:
    cache = out_dir / f"cache-{dataset}"
    ckpt = out_dir / f"{dataset}.pt"
    cmd = [
        sys.executable,
        str(ROOT / "pretrain_vae.py"),
        "--dataset",
        dataset,
        "--output",
        str(ckpt),
        "--cache-dir",
        str(cache),
        "--no-progress",
        *extra,
    ]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    report = json.loads(ckpt.with_suffix(".json").read_text())
    line = {"dataset": dataset, "wall_seconds": wall}
    line.update({k: report[k] for k in KEYS})
    line.update({k: v for k, v in report.items() if k.startswith("routing_l1")})
    return line


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dataset", action="append", default=None)
    p.add_argument("--out", default=None, help="keep checkpoints and reports here")
    p.add_argument("extra", nargs="*", help="arguments passed to pretrain_vae.py (after --)")
    args = p.parse_args()
    out_dir = Path(args.out or tempfile.mkdtemp(prefix="ripple-pretrain-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    for dataset in args.dataset or ["mnist-5k"]:
        print(json.dumps(run(dataset, args.extra, out_dir)), flush=True)


if __name__ == "__main__":
    main()
