"""Does every model of the zoo learn? One JSON line per model.

Trains each model with the app's own client loop (``local.train_local``:
SGD lr 0.01, momentum 0.9, batch 32) on a mnist-5k subset for a few epochs
and reports, per epoch, the mean training loss and the held-out accuracy
(1,000 digits outside the training subset, eval mode).

    python benchmarks/models_learning.py [--train 1000] [--epochs 4] [--device auto]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from ripple_flwr.data import load_dataset
from ripple_flwr.training.loops import evaluate_model, train_local
from ripple_flwr.training.models import available_models, build_model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--train", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--device", default="auto")
    p.add_argument("--model", action="append", default=None)
    args = p.parse_args()
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    data = load_dataset("mnist-5k")
    order = np.random.default_rng(0).permutation(len(data.images))
    train, test = order[: args.train], order[-1000:]
    for name in args.model or available_models():
        torch.manual_seed(0)
        model = build_model(name, (1, 28, 28), 10)
        losses, accs = [], []
        t = time.perf_counter()
        for epoch in range(args.epochs):
            r = train_local(
                model, data.images[train], data.labels[train], epochs=1, seed=epoch, device=device
            )
            losses.append(r["mean_loss"])
            accs.append(
                evaluate_model(model, data.images[test], data.labels[test], device=device)[
                    "accuracy"
                ]
            )
        print(
            json.dumps(
                {
                    "model": name,
                    "device": device,
                    "train_images": args.train,
                    "train_loss": losses,
                    "test_accuracy": accs,
                    "seconds": time.perf_counter() - t,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
