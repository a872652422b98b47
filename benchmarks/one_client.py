"""Where one client's embedding time goes (CPU or GPU): one JSON line.

For 1x28x28 and 3x32x32 clients of 200 images (as in ``embedding.py``):

- ``embed_ms``: median wall time of ``SpectralEmbedder.embed`` on a warm
  embedder (on a GPU: the CUDA-graph replay, built on the second call of a
  size); ``embed_first_ms``: the first call of a fresh embedder (eager);
  ``graph_build_ms``: the call that captures the graphs (GPU).
- ``eager_ms``: the eager path (graphs off), and ``eager_stages_ms``: its
  stages timed with device synchronisation: validation and canonical row
  order, host-to-device copy, centring and Gram matrix, top eigenpairs,
  the rest of the prototype, scattering, device-to-host copy; on a GPU,
  ``graph_stages_ms``: the steps of a graph replay.
- on a GPU, ``eigen_on_device_ms`` (the subspace iteration and its
  eigen-solve left on the GPU) beside the host solve the eager path uses,
  ``host_embed_ms`` (the same client on this machine's CPU, one thread),
  and ``graph_vs_eager_rel`` (relative max difference of the two paths).
- ``one_cpu_thread_us``: entering and leaving the one-thread section.

    python benchmarks/one_client.py [--device auto|cpu|cuda] [--repeats 30]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from embedding import colour_digits  # noqa: E402

from ripple_flwr.data import load_dataset  # noqa: E402
from ripple_flwr.wst import prototype as P  # noqa: E402
from ripple_flwr.wst import subspace  # noqa: E402
from ripple_flwr.wst.embedder import SpectralEmbedder  # noqa: E402
from ripple_flwr.wst.threads import one_cpu_thread  # noqa: E402


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _median_ms(fn, clients: list[np.ndarray], dev: torch.device) -> float:
    times = []
    for c in clients:
        _sync(dev)
        t = time.perf_counter()
        fn(c)
        _sync(dev)
        times.append(time.perf_counter() - t)
    return 1000 * float(np.median(times))


def eager_stages(emb: SpectralEmbedder, clients: list[np.ndarray]) -> dict[str, float]:
    """Median ms of each stage of the eager single-client path."""
    dev, m = emb.device, emb.prototype_settings.svd_rank
    names = ("rows", "to_device", "centre_gram", "top_eigenpairs", "prototype_rest", "scatter")
    names += ("to_host",)
    rows_ms: list[list[float]] = []
    with one_cpu_thread(dev):
        for images in clients:
            marks = [time.perf_counter()]

            def mark(marks: list[float] = marks) -> None:
                _sync(dev)
                marks.append(time.perf_counter())

            rows = emb._ordered_rows(emb._check_client(images))
            mark()
            x = torch.from_numpy(rows)[None].to(dev)
            mark()
            mu, xc, gram = P.centre(x, overwrite=True)  # as embed() does: its own copy
            mark()
            top, vecs = subspace.top_eigenpairs(gram, m)
            mark()
            proto = P.prototype_from_pairs(mu, xc, top, vecs)
            mark()
            out = emb.scatter_tensor(proto.reshape(1, *emb.image_shape))
            mark()
            out.cpu().numpy()
            mark()
            rows_ms.append([1000 * (b - a) for a, b in zip(marks, marks[1:], strict=False)])
    med = np.median(np.array(rows_ms), axis=0)
    return {name: float(v) for name, v in zip(names, med, strict=True)}


def graph_stages(emb: SpectralEmbedder, clients: list[np.ndarray]) -> dict[str, float]:
    """Median ms of each step of a CUDA-graph replay (the steps of ``OneClientGraph.embed``)."""
    graph = emb._graphs[200]
    dev = emb.device
    rows_ms: list[list[float]] = []
    for images in clients:
        t = [time.perf_counter()]
        flat = np.ascontiguousarray(emb._check_client(images))
        order = P.canonical_order(flat)
        t.append(time.perf_counter())
        np.copyto(graph._host_x.numpy(), flat)
        graph._host_order.numpy()[:] = order
        graph._raw.copy_(graph._host_x[None], non_blocking=True)
        graph._order.copy_(graph._host_order, non_blocking=True)
        graph._graph_a.replay()
        graph._host_h.copy_(graph._h)
        t.append(time.perf_counter())
        graph._solve_on_host(graph._host_h)
        _sync(dev)
        t.append(time.perf_counter())
        graph._graph_b.replay()
        bool(graph._bad)
        graph._out.cpu().numpy()
        t.append(time.perf_counter())
        rows_ms.append([1000 * (b - a) for a, b in zip(t, t[1:], strict=False)])
    names = ("check_and_order", "copy_in_and_graph_a", "host_eigen_solve", "graph_b_and_copy_out")
    med = np.median(np.array(rows_ms), axis=0)
    return {name: float(v) for name, v in zip(names, med, strict=True)}


def eigen_on_device_ms(emb: SpectralEmbedder, clients: list[np.ndarray]) -> float:
    """The top eigenpairs of one client left entirely on the GPU (no host solve)."""
    saved = subspace._HOST_EIGEN_MAX_CLIENTS
    subspace._HOST_EIGEN_MAX_CLIENTS = 0
    try:
        rows = [emb._ordered_rows(emb._check_client(c)) for c in clients]
        grams = [P.centre(torch.from_numpy(r)[None].to(emb.device))[2] for r in rows]
        it = iter(grams)
        return _median_ms(lambda _: subspace.top_eigenpairs(next(it), 20), clients, emb.device)
    finally:
        subspace._HOST_EIGEN_MAX_CLIENTS = saved


def one_shape(shape: tuple[int, int, int], images: np.ndarray, args, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    clients = [images[rng.choice(len(images), 200, replace=False)] for _ in range(args.repeats)]
    dev = torch.device(args.device)
    out: dict = {}
    emb = SpectralEmbedder(shape, device=str(dev))
    t = time.perf_counter()
    first = emb.embed(clients[0])
    _sync(dev)
    out["embed_first_ms"] = 1000 * (time.perf_counter() - t)
    t = time.perf_counter()
    emb.embed(clients[0])
    _sync(dev)
    out["graph_build_ms" if dev.type == "cuda" else "embed_second_ms"] = 1000 * (
        time.perf_counter() - t
    )
    out["embed_ms"] = _median_ms(emb.embed, clients, dev)
    out["graphs_used"] = bool(emb._graphs)
    if emb._graphs:
        out["graph_stages_ms"] = graph_stages(emb, clients)
    replay = emb.embed(clients[0])
    eager = SpectralEmbedder(shape, device=str(dev))
    eager._graphs_failed = True  # the eager path only
    eager.embed(clients[0])
    out["eager_ms"] = _median_ms(eager.embed, clients, dev)
    out["eager_stages_ms"] = eager_stages(eager, clients)
    if dev.type == "cuda":
        out["graph_vs_eager_rel"] = float(np.abs(replay - first).max() / np.abs(first).max())
        out["eigen_on_device_ms"] = eigen_on_device_ms(eager, clients)
        host = SpectralEmbedder(shape, device="cpu")
        host.embed(clients[0])
        out["host_embed_ms"] = _median_ms(host.embed, clients, torch.device("cpu"))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--repeats", type=int, default=30)
    args = p.parse_args()
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    mnist = load_dataset("mnist-5k")
    line: dict = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }

    def enter_leave() -> None:
        with one_cpu_thread("cpu"):
            pass

    enter_leave()
    cpu = torch.device("cpu")
    line["one_cpu_thread_us"] = 1000 * _median_ms(lambda _: enter_leave(), [None] * 200, cpu)
    h = torch.randn(1, 48, 48, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    h = h @ h.transpose(1, 2)

    def one_thread_eigh() -> None:
        with one_cpu_thread("cpu"):
            torch.linalg.eigh(h)

    line["host_eigh_48_us"] = {
        "torch": 1000 * _median_ms(lambda _: torch.linalg.eigh(h), [None] * 200, cpu),
        "torch_one_thread": 1000 * _median_ms(lambda _: one_thread_eigh(), [None] * 200, cpu),
        "numpy": 1000 * _median_ms(lambda _: np.linalg.eigh(h.numpy()), [None] * 200, cpu),
    }
    line["1x28x28"] = one_shape((1, 28, 28), mnist.images, args, 1)
    line["3x32x32"] = one_shape((3, 32, 32), colour_digits(mnist.images), args, 2)
    print(json.dumps(line))


if __name__ == "__main__":
    main()
