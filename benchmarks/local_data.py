"""Node-local data: reading an ImageFolder, and embedding one client of it. JSON lines.

- ``local_imagefolder_read`` (one line per ``--workers`` value): a folder of
  ``--images`` JPEGs (quality 90) of ``--size`` x ``--size`` RGB in 10 class
  folders, written to a temporary directory (deleted afterwards) and read back
  with :func:`ripple_flwr.data.local.read_local_images` at native size, in a
  fresh process per measurement (multiprocessing "spawn"), the files warm in
  the page cache; ``--read-repeats`` reads per thread count, interleaved across
  the counts (the machine may be shared), ``seconds`` their median and
  ``images_per_s`` images / that median (``seconds_all``: every read);
  ``cpu_per_wall``: the process's CPU time over wall time (median), how many
  cores the decoding threads kept busy (PIL releases the GIL while it decodes).
  ``peak_rss_mb`` is the reading process's peak resident memory, ``VmHWM`` of
  ``/proc/self/status`` (the interpreter, numpy, PIL, the decoded uint8 array
  and the decoders' buffers), the largest over the repeats; ``baseline_rss_mb``
  its RSS just before the read, ``array_mb`` the array. (``resource.getrusage``'s
  ``ru_maxrss`` is not used: Linux carries it over from the parent across
  fork + exec, so a spawned child reports at least its parent's peak.)
  ``--source smooth`` (default): random low-frequency colour images with a
  little noise (JPEGs of photo-like size); ``fashion-mnist``: its digits
  upscaled and tinted (needs the Debian ``dataset-fashion-mnist`` files).
- ``embed_client_64x64x3``: median wall time (after a warm-up) of
  ``SpectralEmbedder((3, 64, 64), J=3, L=8, prototype=PrototypeSettings(20, None),
  device="cpu").embed`` on a client of n=130 images of that folder resized to
  64x64 (uint8 -> float in [0, 1]); ``P`` is the embedding's length.

    PYTHONPATH=. python benchmarks/local_data.py [--images 5000] [--size 224] \
        [--workers 1,0] [--read-repeats 3] [--repeats 10] [--source smooth|fashion-mnist]

``--workers`` lists thread counts; 0 stands for the default, min(8, cpu_count()).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ripple_flwr.data.images import convert_image, open_image, to_unit_float  # noqa: E402
from ripple_flwr.data.local import default_workers, read_local_images  # noqa: E402

NUM_CLASSES = 10


def _fashion_mnist(n: int) -> np.ndarray:
    from ripple_flwr.data.loaders import load_fashion_mnist

    digits = load_fashion_mnist().images[:n, 0]
    return np.rint(digits * 255).astype(np.uint8)


def _picture(i: int, size: int, digits: np.ndarray | None) -> np.ndarray:
    """One ``(size, size, 3)`` uint8 picture, the same for the same ``i``."""
    from PIL import Image

    rng = np.random.default_rng(i)
    if digits is None:
        base = rng.integers(0, 256, size=(14, 14, 3), dtype=np.uint8)
    else:
        tint = rng.uniform(0.5, 1.0, size=3)
        base = np.rint(digits[i % len(digits), :, :, None] * tint).astype(np.uint8)
    img = Image.fromarray(base).resize((size, size), Image.Resampling.BICUBIC)
    noise = rng.integers(-8, 9, size=(size, size, 3))
    return np.clip(np.asarray(img, dtype=np.int16) + noise, 0, 255).astype(np.uint8)


def write_folder(root: Path, n: int, size: int, source: str, workers: int) -> float:
    """``n`` JPEGs in ``NUM_CLASSES`` class folders; returns their mean size in kB."""
    from PIL import Image

    digits = _fashion_mnist(n) if source == "fashion-mnist" else None
    for k in range(NUM_CLASSES):
        (root / f"class_{k:02d}").mkdir(parents=True)

    def write(i: int) -> int:
        path = root / f"class_{i % NUM_CLASSES:02d}" / f"img_{i:06d}.jpg"
        Image.fromarray(_picture(i, size, digits)).save(path, quality=90)
        return path.stat().st_size

    with ThreadPoolExecutor(workers) as pool:
        sizes = list(pool.map(write, range(n)))
    return float(np.mean(sizes)) / 1024


def _status_mb(key: str) -> float:
    """``VmRSS`` or ``VmHWM`` (peak RSS) of this process, from ``/proc/self/status``."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"{key} not in /proc/self/status")


def _read_once(root: str, workers: int, queue: multiprocessing.Queue) -> None:
    """In a fresh process: read the folder, report time and memory."""
    baseline = _status_mb("VmRSS")
    cpu, t = time.process_time(), time.perf_counter()
    local = read_local_images(root, workers=workers)
    seconds = time.perf_counter() - t
    queue.put(
        {
            "seconds": seconds,
            "cpu_seconds": time.process_time() - cpu,
            "peak_rss_mb": _status_mb("VmHWM"),
            "baseline_rss_mb": baseline,
            "array_mb": local.images.nbytes / 2**20,
            "shape": list(local.images.shape),
        }
    )


def measure_read(root: Path, workers: int) -> dict:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_read_once, args=(str(root), workers, queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result


def embed_seconds(root: Path, n: int, repeats: int) -> tuple[float, int]:
    """Median seconds to embed one 3x64x64 client of ``n`` images of the folder, and P."""
    from ripple_flwr.wst.embedder import PrototypeSettings, SpectralEmbedder

    files = sorted(root.rglob("*.jpg"))
    rng = np.random.default_rng(0)
    emb = SpectralEmbedder(
        (3, 64, 64), J=3, L=8, prototype=PrototypeSettings(20, None), device="cpu"
    )
    pixels = np.stack([convert_image(open_image(str(f)), 3, 64) for f in files[: 4 * n]])
    clients = [to_unit_float(pixels[rng.choice(len(pixels), n, replace=False)]) for _ in range(3)]
    emb.embed(clients[0])  # warm-up: filters, FFT plans
    times = []
    for r in range(repeats):
        t = time.perf_counter()
        z = emb.embed(clients[r % len(clients)])
        times.append(time.perf_counter() - t)
    return float(np.median(times)), int(np.asarray(z).size)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--images", type=int, default=5000)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--workers", default="1,0", help="comma-separated; 0 = default")
    p.add_argument("--read-repeats", type=int, default=3, help="reads per thread count")
    p.add_argument("--repeats", type=int, default=10, help="embedding repeats (median)")
    p.add_argument("--client-size", type=int, default=130)
    p.add_argument("--source", choices=("smooth", "fashion-mnist"), default="smooth")
    p.add_argument("--tmp", default=None, help="parent of the temporary folder")
    args = p.parse_args()
    import PIL

    machine = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "pil": PIL.__version__,
        "platform": platform.platform(),
    }
    tmp = Path(tempfile.mkdtemp(prefix="ripple-local-bench-", dir=args.tmp))
    try:
        root = tmp / "silo"
        t = time.perf_counter()
        jpeg_kb = write_folder(root, args.images, args.size, args.source, default_workers())
        write_s = time.perf_counter() - t
        counts = [int(x) or default_workers() for x in args.workers.split(",")]
        runs: dict[int, list[dict]] = {w: [] for w in counts}
        for _ in range(args.read_repeats):
            for w in counts:
                runs[w].append(measure_read(root, w))
        for workers, reads in runs.items():
            seconds = float(np.median([r["seconds"] for r in reads]))
            line = {
                "benchmark": "local_imagefolder_read",
                "images": args.images,
                "size": args.size,
                "images_per_s": round(args.images / seconds, 1),
                "peak_rss_mb": round(max(r["peak_rss_mb"] for r in reads), 1),
                "workers": workers,
                "seconds": round(seconds, 3),
                "seconds_all": [round(r["seconds"], 3) for r in reads],
                "cpu_per_wall": round(
                    float(np.median([r["cpu_seconds"] / r["seconds"] for r in reads])), 2
                ),
                "baseline_rss_mb": round(reads[0]["baseline_rss_mb"], 1),
                "array_mb": round(reads[0]["array_mb"], 1),
                "memory": "VmHWM (peak RSS) of a fresh process that imports and reads",
                "source": args.source,
                "jpeg_kb": round(jpeg_kb, 1),
                "write_seconds": round(write_s, 2),
                **machine,
            }
            print(json.dumps(line), flush=True)
        seconds, dim = embed_seconds(root, args.client_size, args.repeats)
        import torch

        line = {
            "benchmark": "embed_client_64x64x3",
            "n": args.client_size,
            "seconds_per_client": round(seconds, 4),
            "P": dim,
            "repeats": args.repeats,
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            **machine,
        }
        print(json.dumps(line), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
