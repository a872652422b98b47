"""Resume files written by another commit load here and continue as that commit would.

Run ``--write DIR`` with the other commit's checkout on PYTHONPATH (a 3-round run of every
method, a checkpoint every round), then ``--resume DIR`` with this one: each file is
resumed to round 4 and compared with a fresh 4-round run (``--reference DIR2``: with the
resumed results of the other commit instead, for methods whose clients keep state a
one-process restart loses, SCAFFOLD and FedDyn). RIPPLE_OUTPUT_DIR must allow DIR.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ripple_flwr.experiments.one_process import run_one_process
from ripple_flwr.methods.registry import METHODS


def config(name: str, rounds: int) -> dict:
    return {
        "method": name,
        "num-partitions": 6,
        "partition-size": 60,
        "aux-size": 100,
        "clients-per-round": 5 if name == "krum" else 3,
        "num-server-rounds": rounds,
        "eval-every": 1,
    }


def fingerprint(res: dict) -> tuple:
    return ([r["sampled"] for r in res["rounds"]], res["train_loss_per_round"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", type=Path, help="write a resume file of every method here")
    p.add_argument("--resume", type=Path, help="resume every file here to round 4")
    p.add_argument("--reference", type=Path, help="the other commit's --resume output")
    args = p.parse_args()
    if args.write:
        for name in METHODS:
            if name != "ripple":  # needs a router checkpoint; the oracle is the same class
                cfg = {**config(name, 3), "checkpoint-every": 1}
                run_one_process({**cfg, "results-path": str(args.write / f"{name}.json")})
        return 0
    same = {}
    for f in sorted(args.resume.glob("*.resume.npz")):
        name = f.name.split(".")[0]
        out = args.resume / f"{name}-resumed.json"
        resumed = run_one_process({**config(name, 4), "resume": str(f), "results-path": str(out)})
        if args.reference:
            ref = json.loads((args.reference / out.name).read_text())
        else:
            ref = run_one_process(
                {**config(name, 4), "results-path": str(args.resume / f"{name}-fresh.json")}
            )
        same[name] = fingerprint(resumed) == fingerprint(ref)
    print(json.dumps({"resumed_as_reference": same, "all": all(same.values())}))
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
