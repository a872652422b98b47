"""How long the table and map commands take to refuse a bad command line (issue 45: < 10 s).

Each case runs the installed command in a fresh process from the repository root (where
``paper/`` is), times it to its exit, and records its exit status, whether its refusal
is one line, and whether Ray was started (a ``ray`` session folder made during the run).
Prints one JSON line:

    python benchmarks/refusals.py --json docs/results/refusals.json
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "set overrides a row's method": ["ripple-tables", "table1", "--methods", "fedavg"]
    + ["--set", "method=local"],
    "rounds 0": ["ripple-tables", "table1", "--rounds", "0"],
    "rounds -1": ["ripple-tables", "table1", "--rounds", "-1"],
    "unknown --set key": ["ripple-tables", "table1", "--set", "nosuch-key=1"],
    "unknown dataset": ["ripple-tables", "table1", "--dataset", "nosuch"],
    "missing checkpoint": ["ripple-tables", "table1", "--checkpoint", "/nonexistent/c.pt"],
    "map rounds -1": ["ripple-map", "--rounds", "-1"],
    "map eval-every 0": ["ripple-map", "--eval-every", "0"],
    "map set a cell's alpha": ["ripple-map", "--set", "alpha=0.5"],
}


def ray_sessions() -> set[str]:
    base = Path(tempfile.gettempdir()) / "ray"
    return {p.name for p in base.glob("session_*")} if base.is_dir() else set()


def one(argv: list[str], out: Path) -> dict:
    before = ray_sessions()
    t0 = time.perf_counter()
    done = subprocess.run(
        [*argv, "--out", str(out), "--no-progress"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - t0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return {
        "seconds": round(seconds, 2),
        "exit": done.returncode,
        "stderr_lines": len(lines),
        "last_line": lines[-1] if lines else "",
        "ray_started": bool(ray_sessions() - before),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="", help="also write the line here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cases = {name: one(cmd, Path(tmp) / str(i)) for i, (name, cmd) in enumerate(CASES.items())}
    worst = max(c["seconds"] for c in cases.values())
    line = json.dumps(
        {
            "cases": cases,
            "slowest_seconds": worst,
            "all_exit_2": all(c["exit"] == 2 for c in cases.values()),
            "any_ray": any(c["ray_started"] for c in cases.values()),
            "machine": {"node": platform.node(), "cpus": __import__("os").cpu_count()},
        }
    )
    print(line)
    if args.json:
        Path(args.json).write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
