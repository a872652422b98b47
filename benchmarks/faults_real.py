"""Faults with real processes, measured: the fault cases' times to recover and resume's cost.

1. Runs ``tests/processes/test_faults_real.py`` (a loopback SuperLink and two SuperNodes, broken
   four ways) and reads back each case's outcome and time to recover.
2. On a fresh deployment of the same kind, runs one tiny fedavg run of ``--rounds`` rounds
   with ``checkpoint-every = 0`` and one with ``checkpoint-every = 1`` (each ``--repeats``
   times, alternating) and reports the difference: wall time from submission to the
   results file, the server's own time per round (``server_seconds``), the checkpoint's size.

Prints one JSON line (and writes it to ``--out`` if given). Needs no benchmark data set
(mnist-5k ships with a package). About 5-7 minutes on 2 CPU cores.

    python benchmarks/faults_real.py [--rounds 10] [--repeats 1] [--skip-tests]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT / "tests"), str(HERE)]

for key, value in {
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "OMP_WAIT_POLICY": "PASSIVE",
}.items():
    os.environ.setdefault(key, value)

from fault_deployment import Deployment, run_config, wait_until_done  # noqa: E402
from runs import write_json_line  # noqa: E402
from scale import commit  # noqa: E402


def fault_cases(tmp: Path) -> tuple[list[dict], float, int]:
    report = tmp / "faults.json"
    env = {**os.environ, "RF_FAULTS_REPORT": str(report)}
    t0 = time.monotonic()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/processes/test_faults_real.py",
            "-n",
            "0",
            "-s",
            "--durations=0",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - t0
    sys.stderr.write(out.stdout[-4000:] + out.stderr[-2000:])
    cases = json.loads(report.read_text()) if report.exists() else []
    return cases, seconds, out.returncode


def overhead(tmp: Path, rounds: int, repeats: int) -> dict:
    os.environ["RIPPLE_OUTPUT_DIR"] = str(tmp)
    ray_tmp = Path(tempfile.mkdtemp(prefix="rf-ovh-", dir="/tmp"))
    dep = Deployment(tmp / "deployment", ray_tmp, nodes=2).start()
    runs: dict[int, list[dict]] = {0: [], 1: []}
    try:
        cache = tmp / "cache"
        warm = tmp / "warm" / "results.json"  # builds the federation cache once
        dep.submit(run_config(warm, cache, **{"num-server-rounds": 1, "checkpoint-every": 0}))
        wait_until_done(dep, warm, 300)
        for rep in range(repeats):
            for every in (0, 1):
                results = tmp / f"ckpt{every}-{rep}" / "results.json"
                cfg = run_config(
                    results,
                    cache,
                    **{
                        "num-server-rounds": rounds,
                        "eval-every": rounds,
                        "checkpoint-every": every,
                    },
                )
                t0 = time.monotonic()
                dep.submit(cfg)
                status = wait_until_done(dep, results, 600)
                wall = time.monotonic() - t0
                assert status["status"] == "completed", status
                res = json.loads(results.read_text())
                ckpt = results.with_suffix(".resume.npz")
                runs[every].append(
                    {
                        "wall_s": round(wall, 2),
                        "server_s_per_round": sum(r["server_seconds"] for r in res["rounds"])
                        / rounds,
                        "rounds_wall_s": res["timings"]["rounds"],
                        "checkpoint_bytes": ckpt.stat().st_size if ckpt.exists() else 0,
                    }
                )
    finally:
        late = dep.stop()
        shutil.rmtree(ray_tmp, ignore_errors=True)

    def mean(every: int, key: str) -> float:
        return sum(r[key] for r in runs[every]) / len(runs[every])

    return {
        "rounds": rounds,
        "repeats": repeats,
        "runs": runs,
        "wall_s": {
            "checkpoint_every_0": mean(0, "wall_s"),
            "checkpoint_every_1": mean(1, "wall_s"),
        },
        "overhead_wall_s_per_checkpoint": (mean(1, "wall_s") - mean(0, "wall_s")) / rounds,
        "overhead_rounds_s_per_checkpoint": (mean(1, "rounds_wall_s") - mean(0, "rounds_wall_s"))
        / rounds,
        "server_s_per_round": {
            "checkpoint_every_0": mean(0, "server_s_per_round"),
            "checkpoint_every_1": mean(1, "server_s_per_round"),
        },
        "checkpoint_bytes": mean(1, "checkpoint_bytes"),
        "processes_killed_late": late,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--skip-tests", action="store_true", help="only the resume overhead")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="faults-real-"))
    try:
        cases, tests_s, rc = ([], 0.0, 0) if args.skip_tests else fault_cases(tmp)
        line = json.dumps(
            {
                "benchmark": "faults_real",
                "commit": commit(),
                "cpus": os.cpu_count(),
                "fault_cases": cases,
                "fault_tests_seconds": round(tests_s, 1),
                "fault_tests_exit_code": rc,
                "resume_overhead": overhead(tmp, args.rounds, args.repeats),
            }
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(line)
    write_json_line(line, args.out)


if __name__ == "__main__":
    main()
