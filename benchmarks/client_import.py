"""How long a fresh ClientApp process takes to import ``client_app`` (Flower starts one per
message of a deployed run), and which of the app's modules it loads.

Prints ONE JSON line: the median (and min, max) wall seconds of ``import client_app`` in
fresh interpreters, the number of ``ripple_flwr`` modules loaded, whether any server-side
module was; with ``--against DIR`` (another checkout, e.g. ``git worktree add /tmp/old
<commit>``) the same for it, alternating runs, and the ratio this / that. It also times
the floor under both: ``import torch, flwr.clientapp`` alone, what every message of any
version needs (training, evaluation and the WST embedding all run in torch), and that
floor's ratio to the other checkout.

    python benchmarks/client_import.py [--runs 7] [--against /tmp/old] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = (
    "import sys; sys.path.insert(0, {root!r}); import client_app, ripple_flwr;"
    "assert ripple_flwr.__file__.startswith({root!r}), ripple_flwr.__file__;"
    "mods = [m for m in sys.modules if m.startswith('ripple_flwr')];"
    "print(len(mods), sum(m.startswith('ripple_flwr.app.server') for m in mods))"
)


FLOOR = "import torch, flwr.clientapp; print(0, 0)"


def one_run(root: Path | None) -> tuple[float, int, int]:
    """Wall seconds of one fresh ``import client_app`` from ``root``; modules loaded.

    ``root`` None: the floor (torch and Flower's ClientApp alone).
    """
    code = FLOOR if root is None else PROBE.format(root=str(root))
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root or ROOT
    )
    seconds = time.perf_counter() - t0
    mods, server = (int(v) for v in out.stdout.split())
    return seconds, mods, server


def summary(runs: list[tuple[float, int, int]]) -> dict:
    """Median, min and max seconds, and the modules of the last run."""
    secs = [r[0] for r in runs]
    return {
        "median_s": round(statistics.median(secs), 3),
        "min_s": round(min(secs), 3),
        "max_s": round(max(secs), 3),
        "ripple_modules": runs[-1][1],
        "server_modules": runs[-1][2],
    }


def commit_of(root: Path) -> str | None:
    """The checkout's commit (``None`` outside git)."""
    out = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="counted runs (after one warm-up)")
    parser.add_argument("--against", type=Path, help="another checkout to compare with")
    parser.add_argument("--json", type=Path, help="also write the line here")
    args = parser.parse_args(argv)
    roots = [ROOT, None] + ([args.against.resolve()] if args.against else [])
    for root in roots:
        one_run(root)  # warm-up: the file cache
    runs: dict[Path | None, list] = {root: [] for root in roots}
    for _ in range(args.runs):
        for root in roots:  # alternating, so a drift in the machine's speed hits all
            runs[root].append(one_run(root))
    line = {
        "this": {**summary(runs[ROOT]), "commit": commit_of(ROOT)},
        "floor": {k: v for k, v in summary(runs[None]).items() if k.endswith("_s")},
        "runs": args.runs,
    }
    if args.against:
        other = line["against"] = {
            **summary(runs[roots[2]]),
            "checkout": str(args.against),
            "commit": commit_of(args.against),
        }
        line["ratio_this_over_against"] = round(line["this"]["median_s"] / other["median_s"], 3)
        line["ratio_floor_over_against"] = round(line["floor"]["median_s"] / other["median_s"], 3)
    text = json.dumps(line)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
