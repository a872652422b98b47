"""Sweep throughput: the same 8 small runs serially (--jobs 1) and as Ray tasks (--jobs N).

FedAvg and Ripple on 20 Fashion-MNIST clients, alpha 0.1 and 1.0, 30 rounds,
seeds 0 and 1 (8 runs). Each sweep is the whole ``ripple-sweep`` command,
timed from outside (start-up, Ray's start and stop included). First a
warm-up sweep fills a fresh router cache, so neither timed sweep pre-trains.
Prints one JSON line: both walls and ``sweep_throughput_ratio`` (serial wall
over parallel wall), each task's start-up to its first round, the peak
memory of all processes of each sweep (the command, Ray's, its workers'),
and Table 1's wall time at ``--jobs`` estimated from its kept run summaries.

    python benchmarks/sweep_throughput.py --jobs 2 --json docs/results/sweep_throughput.json
    python benchmarks/sweep_throughput.py --gpus-per-run 0.25   # on a GPU machine
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ripple_flwr.experiments.runner import write_json_line  # noqa: E402
from ripple_flwr.experiments.stamp import machine_stamp  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GRID = ["method=fedavg,ripple", "alpha=0.1,1.0"]
SETTINGS = {
    "dataset": "fashion-mnist",
    "num-partitions": 20,
    "clients-per-round": 10,
    "num-server-rounds": 30,
    "eval-every": 10,
}
TABLE1_KEPT = ROOT / "docs/results/runs/table1-fashion-mnist"


def _rss_of(marker: bytes) -> int:
    """Total resident memory (bytes) of the live processes whose environment holds ``marker``."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker not in (entry / "environ").read_bytes():
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:  # gone, or not ours to read
            pass
    return total


def timed_sweep(argv: list[str], env: dict[str, str]) -> dict:
    """Run ``ripple-sweep argv``; its wall, its JSON line and its peak memory (all processes)."""
    mark = f"RIPPLE_BENCH_MARK={uuid.uuid4().hex}"
    env = {**env, mark.split("=")[0]: mark.split("=")[1]}
    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            peak[0] = max(peak[0], _rss_of(mark.encode() + b"\0"))

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ripple_flwr.experiments.sweep", *argv],
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    stop.set()
    watcher.join()
    if done.returncode != 0:
        raise SystemExit(f"sweep failed ({done.returncode}):\n{done.stderr[-3000:]}")
    line = json.loads(done.stdout.strip().splitlines()[-1])
    return {"wall_seconds": wall, "peak_rss_bytes": peak[0], "line": line}


def table1_estimate(jobs: int, slowdown: float) -> dict:
    """Table 1's runs (kept summaries' wall times, one run at a time) spread over ``jobs``."""
    walls = [
        json.loads(p.read_text()).get("wall_seconds") for p in sorted(TABLE1_KEPT.glob("*.json"))
    ]
    walls = [w for w in walls if w]
    serial = sum(walls)
    return {
        "runs_with_a_wall": len(walls),
        "serial_hours": serial / 3600,
        "jobs": jobs,
        "per_run_slowdown_when_parallel": slowdown,
        # No run is split: the batch ends with its longest run at the earliest.
        "estimated_hours": max(serial * slowdown / jobs, max(walls) * slowdown) / 3600,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--gpus-per-run", type=float, default=0.0)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--rounds", type=int, default=SETTINGS["num-server-rounds"])
    p.add_argument("--json", default="", help="also write the JSON line to this file")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="ripple-sweep-bench-"))
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "RAY_USAGE_STATS_ENABLED": "0"}
    env["RIPPLE_CACHE_DIR"] = str(work / "cache")  # a fresh router cache, filled by the warm-up
    settings = {**SETTINGS, "num-server-rounds": args.rounds}
    common = ["--grid", *GRID, "--seeds", *map(str, args.seeds), "--no-progress"]
    common += [w for k, v in settings.items() for w in ("--set", f"{k}={v}")]
    timed_sweep([*common, "--out", str(work / "warm"), "--jobs", "1"], env)
    serial = timed_sweep([*common, "--out", str(work / "serial"), "--jobs", "1"], env)
    parallel_flags = ["--jobs", str(args.jobs)]
    if args.gpus_per_run:
        parallel_flags += ["--gpus-per-run", str(args.gpus_per_run)]
    parallel = timed_sweep([*common, "--out", str(work / "parallel"), *parallel_flags], env)
    s_runs, p_runs = serial["line"]["ran"], parallel["line"]["ran"]
    slowdown = sum(r["seconds"] for r in p_runs) / sum(r["seconds"] for r in s_runs)
    line = {
        "benchmark": "sweep_throughput",
        "runs": len(s_runs),
        "grid": GRID,
        "settings": settings,
        "seeds": args.seeds,
        "jobs": args.jobs,
        "gpus_per_run": args.gpus_per_run,
        "serial_wall_seconds": serial["wall_seconds"],
        "parallel_wall_seconds": parallel["wall_seconds"],
        "sweep_throughput_ratio": serial["wall_seconds"] / parallel["wall_seconds"],
        "run_seconds_serial": [r["seconds"] for r in s_runs],
        "run_seconds_parallel": [r["seconds"] for r in p_runs],
        "to_first_round_serial": [r["to_first_round"] for r in s_runs],
        "to_first_round_parallel": [r["to_first_round"] for r in p_runs],
        "peak_rss_bytes_serial": serial["peak_rss_bytes"],
        "peak_rss_bytes_parallel": parallel["peak_rss_bytes"],
        "table1_at_jobs": table1_estimate(args.jobs, slowdown),
        "machine": machine_stamp(),
    }
    text = json.dumps(line)
    print(text)
    write_json_line(text, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
