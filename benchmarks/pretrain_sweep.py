"""GMM-VAE batch size vs routing error and time: one JSON line per setting.

Runs the whole pre-training job (``ripple_flwr.router.pretrain.pretrain``) once per
batch size on one cached bank, each the default schedule (times ``--samples``)
rescaled by ``TrainSettings.for_device`` (same samples seen, lr scaled by
sqrt(batch/64), evaluations and weight average per sample), so the batch a
device trains with is chosen on measured routing errors and seconds.

    python benchmarks/pretrain_sweep.py --device cuda --batch 64 --batch 256 --batch 512
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from ripple_flwr.router.pretrain import PretrainSettings, pretrain
from ripple_flwr.router.training import TrainSettings


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dataset", default="mnist-5k")
    p.add_argument("--device", default="auto")
    p.add_argument("--batch", type=int, action="append", default=None)
    p.add_argument("--samples", type=float, default=1.0, help="x the reference 6,000 x 64")
    p.add_argument("--cache-dir", default=None, help="bank cache (default: a temp folder)")
    p.add_argument("--bank-size", type=int, default=None, help="default: the job's 22,000")
    p.add_argument("--heldout", type=int, default=None, help="default: the job's 1,000")
    args = p.parse_args()
    cache = args.cache_dir or tempfile.mkdtemp(prefix="ripple-sweep-")
    for batch in args.batch or [64, 256, 512]:
        reference = TrainSettings()
        train = TrainSettings(
            steps=max(1, round(reference.steps * args.samples)), device_batch=batch
        ).for_device(args.device)
        steps = train.steps
        settings = PretrainSettings(
            dataset=args.dataset, device=args.device, train=train, cache_dir=cache
        )
        if args.bank_size or args.heldout:
            settings = replace(
                settings,
                bank=replace(
                    settings.bank, num_clients=args.bank_size or settings.bank.num_clients
                ),
                heldout_clients=args.heldout or settings.heldout_clients,
            )
        t = time.perf_counter()
        _, report = pretrain(settings, Path(cache) / f"sweep-{batch}.pt", progress=False)
        line = {
            "batch": batch,
            "steps": steps,
            "lr": train.lr,
            "wall_seconds": time.perf_counter() - t,
        }
        line.update({k: report[k] for k in ("train_seconds", "train_steps", "bank_seconds")})
        line.update({k: v for k, v in report.items() if k.startswith("routing_l1")})
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
