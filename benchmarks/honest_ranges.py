"""What honest clients send, measured: the numbers the hostile-client bounds are set from.

Prints ONE JSON line:

- ``updates``: per run (method, alpha), over every reply of every round, the
  update norm relative to the model the client was sent (``MODEL_FLOOR`` in
  ``ripple_flwr/aggregation/robust.py`` drops nothing below it) and the radial
  step rho = <update, model> / ||model||^2 (``RESCALE_FLOOR`` and the
  10 x median rule): min, median, p95 and max, with the largest
  max / median ratio of one round;
- ``embeddings``: per federation, how far real clients' WST embeddings lie
  from the synthetic bank the router was trained on, in the bank's standard
  deviations (``DOMAIN_MAX_Z`` / ``DOMAIN_MAX_RMS`` in ``router/routers.py``).

    python benchmarks/honest_ranges.py [--rounds 10] [--out docs/results/honest_ranges.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from runs import write_json_line  # noqa: E402

import ripple_flwr.app.server.replies.defences as accepting  # noqa: E402
from ripple_flwr.aggregation.robust import state_norm  # noqa: E402
from ripple_flwr.app.run_config import parse_run_config  # noqa: E402
from ripple_flwr.app.server.run import run_server  # noqa: E402
from ripple_flwr.app.server.run_data import RunData  # noqa: E402
from ripple_flwr.app.server.setup import build_engine, initial_state, resolve_checkpoint  # noqa: E402
from ripple_flwr.data.cache import cached_federation  # noqa: E402
from ripple_flwr.testing.inprocess import InProcessGrid  # noqa: E402

UPDATE_RUNS = [("fedavg", 0.1), ("fedavg", 0.01), ("oracle", 0.01), ("ripple", 0.1)]
EMBEDDING_RUNS = [("mnist-5k", 0.1, 20), ("fashion-mnist", 0.01, 100)]


def stats(values: np.ndarray) -> dict[str, float]:
    return {
        "min": float(values.min()),
        "median": float(np.median(values)),
        "p95": float(np.quantile(values, 0.95)),
        "max": float(values.max()),
    }


def update_run(method: str, alpha: float, rounds: int, out: Path) -> dict:
    """Every reply's (relative norm, rho), recorded where the server measures them."""
    seen: list[tuple[int, float, float]] = []
    measure = accepting.update_stats

    def recording(sent, returned):
        norm, dot = measure(sent, returned)
        model = max(state_norm(sent), 1e-12)
        seen.append((len(seen), norm / model, dot / model**2))
        return norm, dot

    accepting.update_stats = recording
    try:
        cfg = {
            "method": method,
            "dataset": "mnist-5k",
            "num-partitions": 10,
            "clients-per-round": 10,
            "num-components": 4,
            "alpha": alpha,
            "num-server-rounds": rounds,
            "eval-every": rounds,
            "seed": 0,
            "results-path": str(out / f"{method}-{alpha}.json"),
        }
        run_server(InProcessGrid(cfg, keep_traffic=False), cfg)
    finally:
        accepting.update_stats = measure
    rel = np.array([r for _, r, _ in seen])
    rho = np.array([p for _, _, p in seen])
    per_round = rel[: len(rel) // 10 * 10].reshape(-1, 10)
    spread = float((per_round.max(1) / np.median(per_round, 1)).max())
    return {
        "method": method,
        "alpha": alpha,
        "replies": len(seen),
        "relative_update": stats(rel),
        "abs_radial_step": stats(np.abs(rho)),
        "largest_round_max_over_median": spread,
    }


def embedding_run(dataset: str, alpha: float, clients: int) -> dict:
    """Real clients' embeddings in the bank's standard deviations."""
    cfg = {"method": "ripple", "dataset": dataset, "num-partitions": clients, "alpha": alpha}
    settings = parse_run_config(cfg)
    data = RunData.of_federation(settings, cached_federation(settings))
    ckpt, _ = resolve_checkpoint(settings, data.image_shape, data.classes_hash)
    router = ckpt.router(settings.embedding.router)
    state = initial_state(settings, data.image_shape, data.num_classes)
    strategy = build_engine(settings, state, data, router)
    strategy.prepare(InProcessGrid(cfg, keep_traffic=False))
    phi = strategy.clients.features.astype(np.float64)
    mean = router.model.feature_mean.double().numpy()
    std = router.model.feature_std.double().numpy()
    z = np.abs((phi - mean) / std)
    return {
        "dataset": dataset,
        "alpha": alpha,
        "clients": clients,
        "max_abs_z": stats(z.max(axis=1)),
        "rms_z": stats(np.sqrt((z**2).mean(axis=1))),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--out", default="", help="also write the JSON line to this file")
    args = p.parse_args(argv)
    logging.getLogger("flwr").setLevel(logging.ERROR)
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RIPPLE_OUTPUT_DIR"] = tmp  # this script is the server
        updates = [update_run(m, a, args.rounds, Path(tmp)) for m, a in UPDATE_RUNS]
    embeddings = [embedding_run(*run) for run in EMBEDDING_RUNS]
    line = json.dumps({"rounds": args.rounds, "updates": updates, "embeddings": embeddings})
    print(line)
    write_json_line(line, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
