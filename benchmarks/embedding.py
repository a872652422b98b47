"""Embedding speed on this machine: one JSON line.

- ms_per_client_{C}x{H}x{W}: median wall time to embed one client of n=200
  images (prototype + scattering), after a warm-up, on the default device.
- synthetic_clients_per_s: synthetic-bank throughput (1x28x28, n_syn=200,
  mnist-5k D_aux of 1000 images), the rate pre-training builds its bank at.

    python benchmarks/embedding.py [--repeats 30] [--bank-clients 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch

from ripple_flwr.data import load_dataset, server_aux_split
from ripple_flwr.embedding import SpectralEmbedder
from ripple_flwr.synthetic import BankSettings, build_bank


def ms_per_client(images: np.ndarray, n: int, repeats: int, rng: np.random.Generator) -> float:
    emb = SpectralEmbedder(images.shape[1:])
    clients = [images[rng.choice(len(images), n, replace=False)] for _ in range(repeats)]
    emb.embed(clients[0])  # warm-up: filters, FFT plans
    times = []
    for c in clients:
        t = time.perf_counter()
        emb.embed(c)
        times.append(time.perf_counter() - t)
    return 1000 * float(np.median(times))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--bank-clients", type=int, default=3000)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    mnist = load_dataset("mnist-5k")
    # No 3-channel data set ships offline; timing does not depend on pixel values.
    colour = rng.random((2000, 3, 32, 32), dtype=np.float32)
    out = {
        "ms_per_client_3x32x32": ms_per_client(colour, 200, args.repeats, rng),
        "ms_per_client_1x28x28": ms_per_client(mnist.images, 200, args.repeats, rng),
    }
    aux, _ = server_aux_split(mnist.labels, 1000, 0)
    emb = SpectralEmbedder((1, 28, 28))
    settings = BankSettings(num_clients=args.bank_clients, client_size=200)
    build_bank(emb, mnist.images[aux], mnist.labels[aux], 10, BankSettings(num_clients=64))
    t = time.perf_counter()
    build_bank(emb, mnist.images[aux], mnist.labels[aux], 10, settings)
    out["synthetic_clients_per_s"] = args.bank_clients / (time.perf_counter() - t)
    out.update(
        {
            "device": str(emb.device),
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
        }
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
