"""Misbehaving clients against a clean run: what happens to the run and to honest clients.

Runs a small federation in-process (the real ClientApp, no Ray) once clean
per method and once per case with partition 1 (or 3 of 10 colluding) misbehaving
(:mod:`ripple_flwr.testing.faults`), and prints ONE JSON line: the tally (cases,
refused, survived, silent corruptions, tracebacks, hangs) and per case whether
the run completed and named a culprit, the headline personalised accuracy and
its coverage, the honest clients' accuracy, the saved model's norm, and the
clean run's. A case is *refused* when a culprit is named and the honest
accuracy and model norm stay within TOLERANCE of the clean run; *survived*
when none is named but the run stays within it; a *silent corruption* when
none is named and it does not.

    python benchmarks/hostile.py [--rounds 10] [--out docs/results/hostile.json]

Run from an older checkout (``PYTHONPATH=<old checkout>``, with this file's
``ripple_flwr/testing/faults.py`` copied in) it gives the "before" column.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
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
from ripple_flwr.runs.saved_runs import load_run  # noqa: E402
from ripple_flwr.testing import faults  # noqa: E402
from ripple_flwr.testing.inprocess import InProcessGrid  # noqa: E402

BAD = 1
COLLUDING = (1, 4, 7)  # 3 of 10
# (case, method, fault, culprits, extra run config)
CASES = [
    ("clean", "fedavg", None, (), {}),
    ("clean", "oracle", None, (), {}),
    ("clean", "ripple", None, (), {}),
    ("clean", "scaffold", None, (), {}),
    ("huge-weights", "oracle", "huge-weights", (BAD,), {}),
    ("scaled-weights", "oracle", "scaled-weights", (BAD,), {}),
    ("huge-weights", "fedavg", "huge-weights", (BAD,), {}),
    ("doubled-weights", "fedavg", "doubled-weights", (BAD,), {}),
    ("doubled-weights-3-of-10", "fedavg", "doubled-weights", COLLUDING, {}),
    ("growing-weights", "fedavg", "growing-weights", (BAD,), {}),
    ("growing-weights-3-of-10", "fedavg", "growing-weights", COLLUDING, {}),
    ("doubled-weights", "ripple", "doubled-weights", (BAD,), {}),
    ("far-embedding", "ripple", "far-embedding", (BAD,), {}),
    ("inflated-count", "fedavg", "inflated-count", (BAD,), {}),
    ("fake-evaluation", "fedavg", "fake-evaluation", (BAD,), {}),
    ("query-sizes", "fedavg", "query-sizes", (BAD,), {}),
    ("killed", "fedavg", "killed", (BAD,), {}),
    ("huge-control", "scaffold", "huge-control", (BAD,), {}),
    ("huge-weights", "scaffold", "huge-weights", (BAD,), {}),
]
# A run that named no culprit "survived" when it stays this close to the clean run;
# further away it is a silent corruption.
TOLERANCE = {"accuracy": 0.05, "model_norm": 0.10}
HANG_SECONDS = 600


def honest_accuracy(res: dict, culprits=(BAD,)) -> float:
    """Sample-weighted accuracy of every client but the culprits, mean of the last 3 evaluations."""
    vals = []
    for ev in res["evaluations"][-3:]:
        cs = [c for c in ev["clients"] if c["partition"] not in culprits]
        if cs:
            vals.append(
                np.average([c["accuracy"] for c in cs], weights=[c["num_examples"] for c in cs])
            )
    return float(np.mean(vals)) if vals else float("nan")


def model_norm(results_path: Path) -> float | None:
    """The norm of the saved run's models (all of them, stacked)."""
    saved = results_path.with_suffix(".run.pt")
    if not saved.exists():
        return None
    states = load_run(saved).cluster_states
    return float(np.sqrt(sum(float((v.astype(np.float64) ** 2).sum()) for v in states.values())))


def named(res: dict, culprits: tuple[int, ...]) -> bool:
    """Whether the run named a culprit: dropped, left out, not scored, not routed, refused."""
    bad = set(culprits)
    hits = [d["partition"] for r in res["rounds"] for d in r["dropped"]]
    hits += [f["partition"] for e in res["evaluations"] for f in e.get("failed", [])]
    hits += [int(p) for p in res["clients"].get("sizes_capped", {})]
    hits += [d["partition"] for d in (res.get("routing") or {}).get("out_of_domain", [])]
    refused = any(r.get("refused") for r in res["rounds"])
    return bool(bad & set(hits)) or refused


def one(case: str, method: str, fault: str | None, culprits, extra: dict, args, out: Path) -> dict:
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
        **extra,
    }
    os.environ["RIPPLE_OUTPUT_DIR"] = str(out.resolve())  # this script is the server
    bad = None if fault is None else {p: faults.FAULTS[fault]() for p in culprits}
    grid = InProcessGrid(cfg, faults=bad, keep_traffic=False)
    row = {"case": case, "method": method, "culprits": list(culprits)}
    signal.alarm(HANG_SECONDS)
    try:
        res = json.loads(run_server(grid, cfg).read_text())
    except TimeoutError:
        return {**row, "outcome": "hang"}
    except Exception as err:  # the finding: a reply that crashes the server
        return {**row, "outcome": "traceback", "error": f"{type(err).__name__}: {str(err)[:200]}"}
    finally:
        signal.alarm(0)
    dropped = [d for r in res["rounds"] for d in r["dropped"]]
    return {
        **row,
        "completed": True,
        "named": named(res, culprits),
        "headline_accuracy": res["final_accuracy"],
        "coverage": res.get("final_accuracy_coverage"),
        "honest_accuracy": honest_accuracy(res, culprits),
        "model_norm": model_norm(Path(cfg["results-path"])),
        "replies_dropped": len(dropped),
        "dropped_partitions": sorted({d["partition"] for d in dropped}),
        "first_drop_reason": dropped[0]["reason"] if dropped else None,
        "refused_rounds": [r["round"] for r in res["rounds"] if r.get("refused")],
    }


def classify(row: dict, clean: dict | None) -> str:
    """refused (named, models sane), survived (unnamed, close to clean), silent corruption."""
    if "outcome" in row:
        return row["outcome"]
    if row["case"] == "clean":
        return "clean"
    close = clean is not None and all(
        row[k] is not None
        and math.isfinite(row[k])
        and abs(row[k] - clean[k]) <= TOLERANCE[key] * (1 if key == "accuracy" else clean[k])
        for k, key in (("honest_accuracy", "accuracy"), ("model_norm", "model_norm"))
        if clean[k] is not None  # the oracle saves no run to take a norm of
    )
    headline_ok = clean is not None and (
        row["headline_accuracy"] is None
        or not math.isfinite(row["headline_accuracy"])
        or row["headline_accuracy"] <= clean["headline_accuracy"] + TOLERANCE["accuracy"] * 2
    )
    if not (close and headline_ok):
        return "silent corruption" if not row["named"] else "refused but harmed"
    return "refused" if row["named"] else "survived"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--out", default="", help="also write the JSON line to this file")
    args = p.parse_args(argv)
    logging.getLogger("flwr").setLevel(logging.ERROR)
    import torch

    torch.set_num_threads(1)
    signal.signal(signal.SIGALRM, _hang)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case, method, fault, culprits, extra in CASES:
            rows.append(one(case, method, fault, culprits, extra, args, Path(tmp)))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    clean = {r["method"]: r for r in rows if r["case"] == "clean"}
    for r in rows:
        base = clean.get(r["method"])
        r["outcome"] = classify(r, base)
        if base is not None and r is not base:
            r["clean_honest_accuracy"] = base.get("honest_accuracy")
            r["clean_model_norm"] = base.get("model_norm")
    attacks = [r for r in rows if r["case"] != "clean"]
    tally = {"cases": len(attacks)}
    for outcome in (
        "refused",
        "survived",
        "silent corruption",
        "refused but harmed",
        "traceback",
        "hang",
    ):
        tally[outcome.replace(" ", "_")] = sum(r["outcome"] == outcome for r in attacks)
    line = json.dumps({"rounds": args.rounds, "tally": tally, "cases": rows})
    print(line)
    write_json_line(line, args.out)
    return 0


def _hang(signum, frame):
    raise TimeoutError(f"case ran past {HANG_SECONDS} s")


if __name__ == "__main__":
    raise SystemExit(main())
