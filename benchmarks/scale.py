"""Ten thousand clients on one machine: wall time per phase and peak memory of the whole run.

Runs the real ServerApp (``run_server``) over the in-process grid
(``ripple_flwr.testing.inprocess.InProcessGrid``: every message goes straight
to the real client handlers, one process, no Ray), Fashion-MNIST split into
``--clients`` Dir(alpha) clients of ``--images`` images each, through the
one-shot query round (every client embeds its images; the router reads all),
``--rounds`` training rounds and one evaluation (``eval-every`` = the rounds,
``--eval-fraction`` of the clients scored), and prints ONE JSON line:

- ``query_round_s``: the strategy's ``prepare`` (the node wait, the query
  round, the router over every summary); ``query_round_ledger_s`` is the
  query round alone as the results file records it;
- ``round_s``: a training round's wall time (``configure_train`` to
  ``aggregate_train``), mean over rounds (``rounds_s``: each);
- ``evaluation_s``: the evaluation, from ``configure_evaluate`` (building the
  sampled clients' models) to ``aggregate_evaluate``;
- ``peak_memory_gb``: resident memory of this process and all its children,
  sampled every 0.2 s from ``/proc`` (``benchmarks/memory.py``), and per phase;
- ``data_s``, ``pretrain_s`` (the router, cached on disk after the first run),
  ``results_s`` (results file, picture, saved run), ``total_s``; the settings.

``benchmarks/scale_flwr.py`` runs the same federation under Flower's own
simulation (``flwr run``, Ray) where that fits.

    python benchmarks/scale.py --clients 10000 --images 5 --eval-fraction 0.1 \\
        [--rounds 3] [--profile scale.prof] [--out docs/results/scale.json]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from memory import TreeMemory  # noqa: E402
from runs import write_json_line  # noqa: E402

import ripple_flwr.app.server.run as server  # noqa: E402
from ripple_flwr.runs.outputs import OUTPUT_DIR_ENV  # noqa: E402
from ripple_flwr.settings import CACHE_DIR_ENV  # noqa: E402
from ripple_flwr.testing.inprocess import InProcessGrid  # noqa: E402


class PhaseClock:
    """Times the strategy's hooks and tells the memory sampler which phase runs."""

    def __init__(self, memory: TreeMemory) -> None:
        self.memory = memory
        self.spans: dict[str, list[float]] = {"query": [], "round": [], "evaluation": []}
        self.last_exit = 0.0
        self._open: dict[str, float] = {}

    def enter(self, phase: str) -> None:
        self.memory.mark(phase)
        self._open[phase] = time.perf_counter()

    def leave(self, phase: str) -> None:
        self.last_exit = time.perf_counter()
        self.spans[phase].append(self.last_exit - self._open.pop(phase))
        self.memory.mark("server")

    def wrap(self, strategy: Any, name: str, phase: str, opens: bool, closes: bool) -> None:
        """Replace ``strategy.name`` by itself timed (on this instance only)."""
        inner = getattr(strategy, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if opens:
                self.enter(phase)
            out = inner(*args, **kwargs)
            if closes and (phase != "evaluation" or phase in self._open):
                self.leave(phase)
            return out

        setattr(strategy, name, timed)

    def instrument(self, strategy: Any) -> None:
        self.wrap(strategy, "prepare", "query", True, True)
        self.wrap(strategy, "configure_train", "round", True, False)
        self.wrap(strategy, "aggregate_train", "round", False, True)
        inner = strategy.configure_evaluate

        def configure_evaluate(server_round, *args, **kwargs):  # only eval rounds are timed
            if strategy.is_eval_round(server_round):
                self.enter("evaluation")
            return inner(server_round, *args, **kwargs)

        strategy.configure_evaluate = configure_evaluate
        self.wrap(strategy, "aggregate_evaluate", "evaluation", False, True)


def run_config(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    return {
        "method": args.method,
        "dataset": args.dataset,
        "num-partitions": args.clients,
        "partition-size": args.images,
        "alpha": args.alpha,
        "clients-per-round": args.clients_per_round,
        "num-server-rounds": args.rounds,
        "eval-every": args.rounds,
        "eval-fraction": args.eval_fraction,
        "results-path": str(out / "scale.json"),
        "overwrite-results": True,
        "client-threads": 1,
    }


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=HERE.parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def measure(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One in-process run, timed by phase, its memory sampled throughout."""
    import torch

    torch.set_num_threads(1)
    memory = TreeMemory(limit_gb=args.abort_above_gb, on_limit=lambda m: abort(args, m, clock))
    clock = PhaseClock(memory)
    memory.start()
    build = server.build_engine

    def build_instrumented(*a: Any, **k: Any) -> Any:
        strategy = build(*a, **k)
        clock.instrument(strategy)
        return strategy

    server.build_engine = build_instrumented
    cfg = run_config(args, out)
    memory.mark("setup")
    t0 = time.perf_counter()
    profile = cProfile.Profile() if args.profile else None
    try:
        grid = InProcessGrid(cfg, keep_traffic=False)
        if profile is not None:
            profile.enable()
        path = server.run_server(grid, cfg)
    finally:
        if profile is not None:
            profile.disable()
            profile.dump_stats(args.profile)
        server.build_engine = build
    total = time.perf_counter() - t0
    results_s = time.perf_counter() - clock.last_exit
    by_phase = memory.stop()
    res = json.loads(path.read_text())
    return summary(args, res, clock, memory, by_phase, total, results_s, path)


def abort(args: argparse.Namespace, memory: TreeMemory, clock: PhaseClock) -> None:
    """Memory passed ``--abort-above-gb``: print where, and end the process now."""
    line = {
        "aborted": f"memory above {args.abort_above_gb} GB in phase {memory.phase!r}",
        "phases_done_s": {k: [round(x, 2) for x in v] for k, v in clock.spans.items()},
        "peak_memory_gb": memory.peak_gb,
        "memory_by_phase_gb": {k: round(v / 2**30, 3) for k, v in memory.peaks.items()},
        "clients": args.clients,
        "images_per_client": args.images,
        "eval_fraction": args.eval_fraction,
        "commit": commit(),
    }
    print(json.dumps(line), flush=True)
    os._exit(3)


def run_fields(args: argparse.Namespace, res: dict[str, Any]) -> dict[str, Any]:
    """The federation's settings and who each evaluation asked and scored (both summaries)."""
    return {
        "clients": args.clients,
        "images_per_client": args.images,
        "eval_fraction": args.eval_fraction,
        "evaluated": [e["expected"] for e in res["evaluations"]],
        "scored": [e["scored"] for e in res["evaluations"]],
        "rounds": args.rounds,
        "clients_per_round": args.clients_per_round,
        "method": args.method,
        "dataset": args.dataset,
    }


def summary(args, res, clock, memory, by_phase, total, results_s, path) -> dict[str, Any]:
    t = res["timings"]
    rounds = clock.spans["round"]
    return {
        "query_round_s": round(sum(clock.spans["query"]), 2),
        "round_s": round(sum(rounds) / max(len(rounds), 1), 3),
        "evaluation_s": round(sum(clock.spans["evaluation"]), 2),
        "peak_memory_gb": memory.peak_gb,
        "memory_by_phase_gb": by_phase,
        "rounds_s": [round(r, 3) for r in rounds],
        "query_round_ledger_s": round(t["query"], 2),
        "evaluation_ledger_s": round(t["evaluation"], 2),
        "data_s": round(t["data"], 2),
        "pretrain_s": round(t["pretrain_or_load"], 2),
        "results_s": round(results_s, 2),
        "total_s": round(total, 2),
        "results_bytes": path.stat().st_size,
        **run_fields(args, res),
        "alpha": args.alpha,
        "routing_l1": (res.get("routing") or {}).get("l1"),
        "final_accuracy": res["final_accuracy"],
        "grid": "in-process (real client handlers, one process, no Ray)",
        "cpus": os.cpu_count(),
        "commit": commit(),
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=10_000)
    p.add_argument("--images", type=int, default=5, help="images per client (train + test)")
    p.add_argument("--eval-fraction", type=float, default=0.1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--clients-per-round", type=int, default=10)
    p.add_argument("--method", default="ripple")
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--alpha", type=float, default=0.1)
    p.add_argument("--cache-dir", default="", help="default: $RIPPLE_CACHE_DIR or ~/.cache")
    p.add_argument(
        "--abort-above-gb", type=float, default=16.0, help="stop the run there (0: never)"
    )
    p.add_argument("--profile", default="", help="write a cProfile of the run here")
    p.add_argument("--out", default="", help="also write the JSON line to this file")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.cache_dir:  # this script is the server: the folder is its cache root
        os.environ[CACHE_DIR_ENV] = str(Path(args.cache_dir).expanduser())
    logging.getLogger("flwr").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ[OUTPUT_DIR_ENV] = tmp
        line = json.dumps(measure(args, Path(tmp)))
    print(line, flush=True)
    write_json_line(line, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
