"""Embedding speed on this machine (CPU or GPU): one JSON line.

- ms_per_client_{C}x{H}x{W}: median wall time to embed one client of n=200
  images (prototype + scattering, result back on the host), after a warm-up.
  1x28x28 clients are mnist-5k digits; 3x32x32 clients are mnist-5k digits
  padded to 32x32 in three channels (gains and one-pixel shifts differ per
  channel), so their spectrum is that of real images. ``_noise`` is uniform
  noise: a flat spectrum, the worst case, where every client falls back to
  the full eigen-decomposition.
- synthetic_clients_per_s (1x28x28) and synthetic_clients_per_s_3x32x32:
  bank builder throughput (n_syn=200, mnist-5k D_aux of 1,000 images), the
  rate pre-training builds its bank at.
- embed_many_clients_per_s: 256 real clients through ``embed_many``.
- breakdown_ms_per_client: where a batch's time goes (centring + Gram,
  top-20 eigenpairs, the full eigh they replace, the rest of the prototype,
  scattering, host<->device copies), timed with device synchronisation.
- parity (``--parity``, with a GPU): relative max difference between CPU and
  CUDA embeddings of the same clients.

    python benchmarks/embedding.py [--device auto|cpu|cuda] [--parity] [--bank-clients 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch

from ripple_flwr.data import load_dataset, server_aux_split
from ripple_flwr.router.synthetic import BankSettings, build_bank
from ripple_flwr.wst.embedder import PrototypeSettings, SpectralEmbedder
from ripple_flwr.wst.subspace import top_eigenpairs


def colour_digits(images: np.ndarray) -> np.ndarray:
    """(n, 1, 28, 28) digits -> (n, 3, 32, 32): padded, per-channel gain and shift."""
    pad = np.pad(images[:, 0], ((0, 0), (2, 2), (2, 2)))
    chans = [pad, 0.8 * np.roll(pad, 1, axis=2), 0.6 * np.roll(pad, 1, axis=1)]
    return np.stack(chans, axis=1).astype(np.float32)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ms_per_client(emb: SpectralEmbedder, images: np.ndarray, repeats: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    clients = [images[rng.choice(len(images), 200, replace=False)] for _ in range(repeats)]
    emb.embed(clients[0])  # warm-up: filters, FFT plans
    times = []
    for c in clients:
        t = time.perf_counter()
        emb.embed(c)
        times.append(time.perf_counter() - t)
    return 1000 * float(np.median(times))


def bank_rate(emb: SpectralEmbedder, images: np.ndarray, labels: np.ndarray, n: int) -> float:
    aux, _ = server_aux_split(labels, 1000, 0)
    build_bank(emb, images[aux], labels[aux], 10, BankSettings(num_clients=64))  # warm-up
    _sync(emb.device)
    t = time.perf_counter()
    build_bank(emb, images[aux], labels[aux], 10, BankSettings(num_clients=n))
    return n / (time.perf_counter() - t)


def breakdown(emb: SpectralEmbedder, images: np.ndarray, batch: int, seed: int) -> dict:
    """Per-client milliseconds of each stage of ``embed_batch`` on a batch of clients."""
    dev = emb.device
    rng = np.random.default_rng(seed)
    host = torch.from_numpy(
        images[rng.integers(0, len(images), (batch, 200))].reshape(batch, 200, -1)
    )
    m = emb.prototype_settings.svd_rank

    def timed(fn, reps: int = 3):
        out = fn()  # warm-up
        _sync(dev)
        t = time.perf_counter()
        for _ in range(reps):
            out = fn()
        _sync(dev)
        return out, 1000 * (time.perf_counter() - t) / reps / batch

    x, t_h2d = timed(lambda: host.to(dev))
    (xc, gram), t_gram = timed(lambda: _centre_gram(x))
    _, t_top = timed(lambda: top_eigenpairs(gram, m))
    _, t_full = timed(lambda: torch.linalg.eigh(gram), reps=1)
    protos, t_proto = timed(lambda: emb.prototypes(x))
    out, t_scat = timed(lambda: emb.scatter_tensor(protos))
    _, t_d2h = timed(lambda: out.cpu())
    return {
        "batch_clients": batch,
        "host_to_device": t_h2d,
        "centre_and_gram": t_gram,
        "top20_eigenpairs": t_top,
        "full_eigh_replaced": t_full,
        "prototype_total": t_proto,
        "prototype_rest": t_proto - t_gram - t_top,
        "scattering": t_scat,
        "device_to_host": t_d2h,
    }


def _centre_gram(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xc = x - x.mean(dim=1, keepdim=True)
    return xc, xc @ xc.transpose(1, 2)


def parity(shape: tuple[int, int, int], images: np.ndarray, seed: int) -> dict:
    """Relative max difference of CPU and CUDA embeddings of 64 clients."""
    rng = np.random.default_rng(seed)
    clients = images[rng.integers(0, len(images), (64, 200))]
    cpu = SpectralEmbedder(shape, device="cpu").embed_many(list(clients))
    gpu = SpectralEmbedder(shape, device="cuda").embed_many(list(clients))
    rel = np.abs(cpu - gpu).max(axis=1) / np.abs(cpu).max(axis=1)
    return {"max": float(rel.max()), "median": float(np.median(rel))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--bank-clients", type=int, default=3000)
    p.add_argument("--breakdown-batch", type=int, default=None, help="default 32 CPU, 1024 GPU")
    p.add_argument("--parity", action="store_true", help="CPU vs CUDA embeddings (needs a GPU)")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    mnist = load_dataset("mnist-5k")
    colour = colour_digits(mnist.images)
    noise = rng.random((2000, 3, 32, 32), dtype=np.float32)
    mono = SpectralEmbedder((1, 28, 28), device=args.device)
    rgb = SpectralEmbedder((3, 32, 32), device=args.device)
    dev = mono.device
    batch = args.breakdown_batch or (1024 if dev.type == "cuda" else 32)
    out: dict = {
        "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "ms_per_client_1x28x28": ms_per_client(mono, mnist.images, args.repeats, 1),
        "ms_per_client_3x32x32": ms_per_client(rgb, colour, args.repeats, 2),
        "ms_per_client_3x32x32_noise": ms_per_client(rgb, noise, args.repeats, 3),
    }
    clients = list(mnist.images[rng.integers(0, 5000, (256, 200))])
    mono.embed_many(clients[:8])
    _sync(dev)
    t = time.perf_counter()
    mono.embed_many(clients)
    out["embed_many_clients_per_s"] = 256 / (time.perf_counter() - t)
    out["synthetic_clients_per_s"] = bank_rate(mono, mnist.images, mnist.labels, args.bank_clients)
    out["synthetic_clients_per_s_3x32x32"] = bank_rate(rgb, colour, mnist.labels, args.bank_clients)
    out["breakdown_ms_per_client_1x28x28"] = breakdown(mono, mnist.images, batch, 4)
    out["breakdown_ms_per_client_3x32x32"] = breakdown(rgb, colour, batch, 5)
    if args.parity and torch.cuda.is_available():
        out["parity_rel_1x28x28"] = parity((1, 28, 28), mnist.images, 6)
        out["parity_rel_3x32x32"] = parity((3, 32, 32), colour, 7)
    out["prototype_rank"] = PrototypeSettings().svd_rank
    print(json.dumps(out))


if __name__ == "__main__":
    main()
