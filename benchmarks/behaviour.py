"""The seeded default run, in one process: what must not change when the code is reorganised.

Runs ``pyproject.toml``'s run config (the default ``flwr run .``: Flower's default
simulation has 2 SuperNodes, which ``num-partitions = 0`` takes) with the real client handlers and
prints ONE JSON line of what a refactor must leave bit for bit: the per-evaluation
accuracies, the final accuracy, the routing weights' error and the bytes of every round.
Run it on two commits and compare the lines (``--compare A.json B.json`` names every
difference):

    python benchmarks/behaviour.py --json before.json     # on the old commit
    python benchmarks/behaviour.py --json after.json      # on the new one
    python benchmarks/behaviour.py --compare before.json after.json

``--methods all`` (or names) instead runs every registered method for ``--rounds`` rounds
on a small federation (mnist-5k, ``--partitions`` clients, two new clients onboarded
zero-shot) and prints one line with every method's fingerprint, by method:

    python benchmarks/behaviour.py --methods all --json before.json   # likewise, then compare
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import tomllib
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ROOT = Path(__file__).resolve().parents[1]
KEPT = ("final_accuracy", "bytes_per_round", "routing", "evaluations", "rounds")


def default_config() -> dict:
    """``[tool.flwr.app.config]``, as a bare ``flwr run .`` sends it."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]


def node_configs(nodes: int) -> list[dict]:
    """The node configs of Flower's simulation with ``nodes`` SuperNodes."""
    return [{"partition-id": i, "num-partitions": nodes} for i in range(nodes)]


def fingerprint(results: dict) -> dict:
    """What must not change: accuracies, routing, bytes (timings and paths left out)."""
    out = {k: results[k] for k in KEPT if k in results}
    out["evaluations"] = [
        {k: v for k, v in e.items() if "second" not in k and "time" not in k}
        for e in results.get("evaluations", [])
    ]
    out["rounds"] = [
        {k: v for k, v in r.items() if "second" not in k and "time" not in k}
        for r in results.get("rounds", [])
    ]
    return out


def small_config(method: str, rounds: int, partitions: int) -> dict:
    """A short seeded run of ``method`` on mnist-5k that still exercises every stage."""
    return {
        **default_config(),
        "method": method,
        "num-partitions": partitions,
        "clients-per-round": max(5, partitions // 2),  # Krum needs 2f + 3
        "new-clients": 2,
        "num-server-rounds": rounds,
        "eval-every": 1,
        "seed": 3,
    }


def method_fingerprints(methods: list[str], rounds: int, partitions: int) -> dict:
    """Each method's fingerprint, and its zero-shot record (the new clients' accuracy)."""
    from ripple_flwr.experiments.one_process import run_one_process

    out = {}
    nodes = [{"partition-id": i, "num-partitions": partitions + 2} for i in range(partitions + 2)]
    for method in methods:
        with tempfile.TemporaryDirectory() as folder:
            os.environ["RIPPLE_OUTPUT_DIR"] = folder
            results = run_one_process(small_config(method, rounds, partitions), nodes)
        out[method] = {
            **fingerprint(results),
            "zero_shot_accuracy": results.get("zero_shot_accuracy"),
            "num_models": results.get("num_models"),
        }
        print(f"{method}: {results['final_accuracy']:.4f}", file=sys.stderr, flush=True)
    return out


def compare(a: dict, b: dict, path: str = "") -> list[str]:
    """Every path where ``a`` and ``b`` differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            d for k in sorted(set(a) | set(b)) for d in compare(a.get(k), b.get(k), f"{path}.{k}")
        ]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in compare(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2, help="SuperNodes (Flower's default: 2)")
    parser.add_argument("--json", help="also write the line here")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two lines")
    parser.add_argument(
        "--methods", nargs="+", default=None, help="'all' or names: every method, small runs"
    )
    parser.add_argument("--rounds", type=int, default=3, help="with --methods (3)")
    parser.add_argument("--partitions", type=int, default=10, help="with --methods (10)")
    args = parser.parse_args(argv)
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        diffs = compare(a, b)
        print("identical" if not diffs else "\n".join(diffs))
        return 1 if diffs else 0
    from ripple_flwr.experiments.one_process import run_one_process

    if args.methods:
        from ripple_flwr.methods.registry import METHODS

        names = list(METHODS) if args.methods == ["all"] else args.methods
        line = json.dumps(method_fingerprints(names, args.rounds, args.partitions), sort_keys=True)
        print(line)
        if args.json:
            Path(args.json).write_text(line + "\n")
        return 0
    with tempfile.TemporaryDirectory() as out:
        os.environ["RIPPLE_OUTPUT_DIR"] = out
        results = run_one_process(default_config(), node_configs(args.nodes))
    line = json.dumps(fingerprint(results), sort_keys=True)
    print(line)
    if args.json:
        Path(args.json).write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
