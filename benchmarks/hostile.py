"""One misbehaving client against a clean run: what happens to the run and to honest clients.

Runs a small federation in-process (the real ClientApp, no Ray) once clean
and once per case with partition 1 misbehaving (:mod:`ripple_flwr.testing.faults`),
and prints ONE JSON line: per case, whether the run completed, the headline
personalised accuracy and its coverage, the honest clients' accuracy (every
client but the culprit, from the per-client evaluation records), the clean
run's honest accuracy, and who was dropped and why.

    python benchmarks/hostile.py [--rounds 10] [--out docs/results/hostile.json]

Run from an older checkout (``PYTHONPATH=<old checkout>``, with this file's
``ripple_flwr/testing/faults.py`` copied in) it gives the "before" column.
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
if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from runs import write_json_line  # noqa: E402

from ripple_flwr.app.server import run_server  # noqa: E402
from ripple_flwr.testing import faults  # noqa: E402
from ripple_flwr.testing.inprocess import InProcessGrid  # noqa: E402

BAD = 1
CASES = [
    ("clean", "oracle", None),
    ("huge-weights", "oracle", "huge-weights"),
    ("scaled-weights", "oracle", "scaled-weights"),
    ("clean", "fedavg", None),
    ("huge-weights", "fedavg", "huge-weights"),
    ("inflated-count", "fedavg", "inflated-count"),
    ("fake-evaluation", "fedavg", "fake-evaluation"),
    ("killed", "fedavg", "killed"),
]


def honest_accuracy(res: dict) -> float:
    """Sample-weighted accuracy of every client but the culprit, mean of the last 3 evaluations."""
    vals = []
    for ev in res["evaluations"][-3:]:
        cs = [c for c in ev["clients"] if c["partition"] != BAD]
        if cs:
            vals.append(
                np.average([c["accuracy"] for c in cs], weights=[c["num_examples"] for c in cs])
            )
    return float(np.mean(vals)) if vals else float("nan")


def one(case: str, method: str, fault: str | None, args, out: Path) -> dict:
    cfg = {
        "method": method,
        "dataset": "mnist-5k",
        "num-partitions": 10,
        "clients-per-round": 10,
        "num-components": 4,
        "num-server-rounds": args.rounds,
        "eval-every": 1,
        "round-timeout": 30.0,
        "seed": 0,
        "results-path": str(out / f"{method}-{case}.json"),
    }
    os.environ["RIPPLE_OUTPUT_DIR"] = str(out.resolve())  # this script is the server
    bad = None if fault is None else {BAD: faults.FAULTS[fault]()}
    grid = InProcessGrid(cfg, faults=bad, keep_traffic=False)
    try:
        res = json.loads(run_server(grid, cfg).read_text())
    except Exception as err:  # the "before" code may die: that is the finding
        return {
            "case": case,
            "method": method,
            "completed": False,
            "error": f"{type(err).__name__}: {str(err)[:200]}",
        }
    dropped = [d for r in res["rounds"] for d in r["dropped"]]
    last = res["evaluations"][-1]
    return {
        "case": case,
        "method": method,
        "completed": True,
        "headline_accuracy": res["final_accuracy"],
        "coverage": res.get("final_accuracy_coverage"),
        "honest_accuracy": honest_accuracy(res),
        "replies_dropped": len(dropped),
        "dropped_partitions": sorted({d["partition"] for d in dropped}),
        "first_drop_reason": dropped[0]["reason"] if dropped else None,
        "last_evaluation_failed": last.get("failed", []),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--out", default="", help="also write the JSON line to this file")
    args = p.parse_args(argv)
    logging.getLogger("flwr").setLevel(logging.ERROR)
    import torch

    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case, method, fault in CASES:
            rows.append(one(case, method, fault, args, Path(tmp)))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    clean = {r["method"]: r.get("honest_accuracy") for r in rows if r["case"] == "clean"}
    for r in rows:
        r["clean_honest_accuracy"] = clean.get(r["method"])
    line = json.dumps({"rounds": args.rounds, "bad_partition": BAD, "cases": rows})
    print(line)
    write_json_line(line, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
