"""Synthetic clients for pre-training the router (spec section 3, Algorithm 1 lines 3-8).

A synthetic client draws a mixture y ~ Dir(alpha 1_K), takes exact counts
(largest remainder of n_syn * y) of images of each component from the
server's auxiliary set D_aux, and is embedded exactly as a real client is.
The target is the proportion actually drawn. A *bank* of such clients is
built once (batched prototypes and scattering), reused across epochs, and
cached on disk under a key of everything it depends on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ripple_flwr.data.partition import largest_remainder_counts
from ripple_flwr.settings import machine_cache_root
from ripple_flwr.wst.embedder import CPU_BATCH_CLIENTS, SpectralEmbedder
from ripple_flwr.wst.threads import map_on_cpu_threads

log = logging.getLogger(__name__)

BANK_FORMAT_VERSION = 2
ALPHA_DISTRIBUTIONS = ("uniform", "log-uniform", "mixed")
# Clients drawn per call of the sampler (~n_syn * D * 4 bytes of images each): fixes
# the random stream, so it must not depend on the device.
_GATHER_BYTES = 128 * 2**20
# Gathered images per embedding batch on a GPU: large enough to keep it busy.
_DEVICE_BATCH_BYTES = 2**30


@dataclass(frozen=True)
class BankSettings:
    """How synthetic clients are drawn.

    ``alpha_dist`` is ``"uniform"`` (the paper: alpha ~ U(low, high)),
    ``"log-uniform"`` (makes near-one-hot mixtures common, as Dir(0.1)
    clients are) or ``"mixed"`` (each client flips a coin between the two;
    the best of both on real Dir(0.1) and Dir(1.0) clients in our runs).
    """

    num_clients: int = 22_000
    client_size: int = 200
    alpha_low: float = 0.05
    alpha_high: float = 5.0
    alpha_dist: str = "mixed"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_clients < 1:
            raise ValueError(f"bank size must be >= 1, got {self.num_clients}")
        if self.client_size < 2:
            raise ValueError(f"n_syn (synthetic client size) must be >= 2, got {self.client_size}")
        if not 0 < self.alpha_low <= self.alpha_high:
            raise ValueError(
                f"need 0 < alpha-low <= alpha-high, got {self.alpha_low}, {self.alpha_high}"
            )
        if self.alpha_dist not in ALPHA_DISTRIBUTIONS:
            raise ValueError(
                f"alpha distribution must be one of {ALPHA_DISTRIBUTIONS}, got {self.alpha_dist!r}"
            )


@dataclass
class SyntheticBank:
    """Embeddings ``(N, P)`` and the mixtures actually drawn ``(N, K)``."""

    embeddings: np.ndarray
    targets: np.ndarray
    means: np.ndarray | None = None  # (N, D) client mean images, for the mean-unmixing reference

    def __len__(self) -> int:
        return len(self.embeddings)


def draw_mixtures(
    num_clients: int, num_components: int, settings: BankSettings, rng: np.random.Generator
) -> np.ndarray:
    """y ~ Dir(alpha 1_K) with alpha drawn per client from the configured range."""
    lo, hi = settings.alpha_low, settings.alpha_high
    uniform = rng.uniform(lo, hi, size=num_clients)
    log_uniform = np.exp(rng.uniform(np.log(lo), np.log(hi), size=num_clients))
    if settings.alpha_dist == "uniform":
        alpha = uniform
    elif settings.alpha_dist == "log-uniform":
        alpha = log_uniform
    else:
        alpha = np.where(rng.random(num_clients) < 0.5, uniform, log_uniform)
    # Gamma draws with tiny alpha underflow to exactly 0 for every component;
    # renormalise from the largest draw (one-hot) in that case.
    g = rng.gamma(np.repeat(alpha[:, None], num_components, axis=1))
    empty = g.sum(axis=1) <= 0
    if np.any(empty):
        g[empty, rng.integers(0, num_components, size=int(empty.sum()))] = 1.0
    return g / g.sum(axis=1, keepdims=True)


def sample_client_indices(
    counts: np.ndarray, by_component: list[np.ndarray], rng: np.random.Generator
) -> np.ndarray:
    """Row indices ``(B, n)`` of B synthetic clients with ``counts[b, k]`` rows of component k.

    Rows are distinct within a client while the auxiliary set has enough of
    a component; beyond that, the extra rows are drawn with replacement.
    Vectorised over clients: one random key matrix per component.
    """
    counts = np.atleast_2d(counts)
    b = len(counts)
    sizes = counts.sum(axis=1)
    if np.any(sizes != sizes[0]):
        raise ValueError("all clients of one batch must have the same size")
    out = np.empty((b, int(sizes[0])), dtype=np.int64)
    offset = np.zeros(b, dtype=np.int64)
    for k, pool in enumerate(by_component):
        c = counts[:, k]
        c_max = int(c.max())
        if c_max == 0:
            continue
        if len(pool) == 0:
            raise ValueError(f"the auxiliary set has no image of component {k}; enlarge aux-size")
        take = min(c_max, len(pool))
        picks = np.argsort(rng.random((b, len(pool))), axis=1)[:, :take]
        if c_max > len(pool):
            extra = rng.integers(0, len(pool), size=(b, c_max - len(pool)))
            picks = np.concatenate([picks, extra], axis=1)
        rows, cols = np.nonzero(np.arange(c_max)[None, :] < c[:, None])
        out[rows, offset[rows] + cols] = pool[picks[rows, cols]]
        offset += c
    return out


def build_bank(
    embedder: SpectralEmbedder,
    aux_images: np.ndarray,
    aux_components: np.ndarray,
    num_components: int,
    settings: BankSettings,
    *,
    keep_means: bool = False,
    progress: bool = False,
    workers: int | None = None,
    batch_clients: int | None = None,
) -> SyntheticBank:
    """Draw and embed ``settings.num_clients`` synthetic clients (no cache).

    All random draws happen first, in order, from one seeded generator, in
    chunks that do not depend on the device, so every device embeds the same
    clients. Then the embedding runs in batches of ``batch_clients``:

    - on a GPU, the auxiliary set is copied to the device once and each batch
      (about 1 GiB of gathered images) is gathered, embedded and kept there;
      the embeddings come back in one copy at the end, so the device never
      waits for the host between batches;
    - on a CPU, small batches (they stay in cache) run on ``workers`` threads
      with one torch thread each.

    A client's embedding does not depend on the batch it is in, so the bank
    is bit-identical whatever the number of workers.
    """
    rng = np.random.default_rng(settings.seed)
    flat = np.ascontiguousarray(aux_images.reshape(len(aux_images), -1), dtype=np.float32)
    by_component = [np.flatnonzero(aux_components == k) for k in range(num_components)]
    n, d = settings.num_clients, flat.shape[1]
    mixtures = draw_mixtures(n, num_components, settings, rng)
    counts = largest_remainder_counts(mixtures, settings.client_size)
    targets = (counts / settings.client_size).astype(np.float32)
    chunk = max(1, _GATHER_BYTES // (settings.client_size * d * 4))
    indices = np.concatenate(
        [
            sample_client_indices(counts[s : s + chunk], by_component, rng)
            for s in range(0, n, chunk)
        ]
    )
    bar = _progress(n, "synthetic clients", progress)
    try:
        if embedder.device.type == "cuda":
            embeddings, means = _embed_on_device(
                embedder, flat, indices, keep_means, batch_clients, bar
            )
        else:
            embeddings, means = _embed_on_cpu(
                embedder, flat, indices, keep_means, batch_clients, workers, bar
            )
    finally:
        bar.close()
    return SyntheticBank(embeddings=embeddings, targets=targets, means=means)


def _embed_on_device(
    embedder: SpectralEmbedder,
    flat: np.ndarray,
    indices: np.ndarray,
    keep_means: bool,
    batch_clients: int | None,
    bar,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Gather and embed large batches on the GPU; one copy back at the end."""
    dev = embedder.device
    n, size = indices.shape
    batch = batch_clients or max(1, _DEVICE_BATCH_BYTES // (size * flat.shape[1] * 4))
    source = torch.from_numpy(flat).to(dev)
    index = torch.from_numpy(indices).to(dev)
    out = torch.empty((n, embedder.output_dim), dtype=torch.float32, device=dev)
    means = torch.empty((n, flat.shape[1]), dtype=torch.float32, device=dev) if keep_means else None
    for lo in range(0, n, batch):
        clients = source[index[lo : lo + batch]]
        out[lo : lo + len(clients)] = embedder.embed_batch_tensor(clients)
        if means is not None:
            means[lo : lo + len(clients)] = clients.mean(dim=1)
        bar.update(len(clients))
    embeddings = SpectralEmbedder._finite(out.cpu().numpy())
    return embeddings, None if means is None else means.cpu().numpy()


def _embed_on_cpu(
    embedder: SpectralEmbedder,
    flat: np.ndarray,
    indices: np.ndarray,
    keep_means: bool,
    batch_clients: int | None,
    workers: int | None,
    bar,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Small batches on worker threads, one torch and one BLAS thread each (no oversubscription)."""
    n = len(indices)
    batch = batch_clients or CPU_BATCH_CLIENTS
    starts = list(range(0, n, batch))
    embeddings = np.empty((n, embedder.output_dim), dtype=np.float32)
    means = np.empty((n, flat.shape[1]), dtype=np.float32) if keep_means else None

    def work(lo: int) -> int:
        clients = torch.from_numpy(flat[indices[lo : lo + batch]])  # a fresh copy
        if means is not None:
            means[lo : lo + len(clients)] = clients.mean(dim=1).numpy()
        embeddings[lo : lo + len(clients)] = embedder.embed_batch(clients, overwrite=True)
        return len(clients)

    for done in map_on_cpu_threads(work, starts, workers):
        bar.update(done)
    return embeddings, means


def bank_key(
    embedder: SpectralEmbedder,
    aux_images: np.ndarray,
    aux_components: np.ndarray,
    num_components: int,
    settings: BankSettings,
    keep_means: bool = False,
) -> str:
    """A hash of everything the bank depends on: data, embedding and sampling settings.

    The embedding settings include the images' shape and, when the embedder
    resizes them, the shape it embeds at, so a bank built at one embed size
    is never reused at another.
    """
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(aux_images, dtype=np.float32).tobytes())
    h.update(np.ascontiguousarray(aux_components, dtype=np.int64).tobytes())
    meta = {
        "version": BANK_FORMAT_VERSION,
        "image_shape": list(embedder.image_shape),
        "J": embedder.J,
        "L": embedder.L,
        "prototype": asdict(embedder.prototype_settings),
        "num_components": num_components,
        "settings": asdict(settings),
        "keep_means": keep_means,
    }
    embed_shape = tuple(embedder.embed_shape)
    if embed_shape != tuple(embedder.image_shape):
        # Embedded at another size than the images': the size and the filter are part of
        # the key. Absent when no resize happens, so keys of unresized banks are unchanged
        # (their embeddings are bit-identical to those of an embedder without embed_size).
        meta["embed_shape"] = list(embed_shape)
        meta["resize"] = "bilinear-antialias"
    h.update(json.dumps(meta, sort_keys=True).encode())
    return h.hexdigest()[:24]


def default_cache_dir() -> Path:
    """``$RIPPLE_CACHE_DIR`` or ``~/.cache/ripple-flwr``."""
    return machine_cache_root()


def cached_bank(
    embedder: SpectralEmbedder,
    aux_images: np.ndarray,
    aux_components: np.ndarray,
    num_components: int,
    settings: BankSettings,
    *,
    cache_dir: str | Path | None = None,
    keep_means: bool = False,
    progress: bool = False,
) -> tuple[SyntheticBank, bool]:
    """The bank from ``cache_dir`` when its key matches, else built and saved.

    Returns the bank and whether it came from the cache. ``cache_dir=""``
    disables the cache.
    """
    key = bank_key(embedder, aux_images, aux_components, num_components, settings, keep_means)
    directory = default_cache_dir() / "banks" if cache_dir is None else Path(cache_dir)
    path = directory / f"bank-{key}.npz" if str(cache_dir) != "" else None
    if path is not None and path.exists():
        try:
            with np.load(path, allow_pickle=False) as f:
                bank = SyntheticBank(
                    embeddings=f["embeddings"],
                    targets=f["targets"],
                    means=f["means"] if "means" in f.files else None,
                )
            log.info("synthetic bank loaded from cache %s", path)
            return bank, True
        except (OSError, ValueError, KeyError) as err:
            log.warning("ignoring unreadable bank cache %s (%s); rebuilding", path, err)
    t0 = time.perf_counter()
    bank = build_bank(
        embedder,
        aux_images,
        aux_components,
        num_components,
        settings,
        keep_means=keep_means,
        progress=progress,
    )
    log.info("built %d synthetic clients in %.1f s", len(bank), time.perf_counter() - t0)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        arrays = {"embeddings": bank.embeddings, "targets": bank.targets}
        if bank.means is not None:
            arrays["means"] = bank.means
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
    return bank, False


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, desc: str, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="client")
