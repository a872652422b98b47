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

from ripple_flwr.app.server.run import run_server  # noqa: E402
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
    ("capped-sizes", "fedavg", "capped-sizes", (BAD,), {}),
    (
        "capped-sizes-by-examples",
        "fedavg",
        "capped-sizes",
        (BAD,),
        {"headline-weighting": "examples"},
    ),
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
    """Whether the run named a culprit: dropped, left out, capped, not scored, not routed,
    or an aggregate refused."""
    bad = set(culprits)
    hits = [d["partition"] for r in res["rounds"] for d in r["dropped"]]
    hits += [f["partition"] for e in res["evaluations"] for f in e.get("failed", [])]
    hits += [int(p) for p in res["clients"].get("sizes_capped", {})]
    hits += [int(p) for p in res["clients"].get("sizes_corrected", {})]
    hits += [d["partition"] for d in (res.get("routing") or {}).get("out_of_domain", [])]
    left_out = bool(res["clients"].get("left_out"))  # by node id: no honest node is, clean
    refused = any(r.get("refused") for r in res["rounds"])
    return bool(bad & set(hits)) or left_out or refused


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
        "_evaluations": res["evaluations"][-3:],  # the clean run's, for any set of culprits
    }


def close_to(row: dict, ref: dict | None) -> bool:
    """Honest accuracy and model norm within TOLERANCE of ``ref``'s (norm: when both have one)."""
    if ref is None:
        return False
    for key, tol in (("honest_accuracy", "accuracy"), ("model_norm", "model_norm")):
        if ref.get(key) is None:
            continue  # the oracle saves no run to take a norm of
        value = row.get(key)
        if value is None or not math.isfinite(value):
            return False
        scale = 1.0 if tol == "accuracy" else ref[key]
        if abs(value - ref[key]) > TOLERANCE[tol] * scale:
            return False
    return True


def classify(row: dict, clean: dict | None, absent: dict | None) -> str:
    """refused: named, and the run as good as the clean one or the one without the culprits'
    training (the best dropping can do); survived: not named, as good as clean; a silent
    corruption: not named and worse; refused but harmed: named and worse."""
    if "outcome" in row:
        return row["outcome"]
    headline = row["headline_accuracy"]
    lifted = (
        clean is not None
        and headline is not None
        and math.isfinite(headline)
        and headline > clean["headline_accuracy"] + 2 * TOLERANCE["accuracy"]
    )
    if row["named"]:
        ok = (close_to(row, clean) or close_to(row, absent)) and not lifted
        return "refused" if ok else "refused but harmed"
    ok = close_to(row, clean) and not lifted
    return "survived" if ok else "silent corruption"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--out", default="", help="also write the JSON line to this file")
    args = p.parse_args(argv)
    logging.getLogger("flwr").setLevel(logging.ERROR)
    import torch

    torch.set_num_threads(1)
    signal.signal(signal.SIGALRM, _hang)
    rows, baselines = [], {}
    absent = sorted({(m, c) for _, m, f, c, _ in CASES if f is not None})
    with tempfile.TemporaryDirectory() as tmp:
        for method, culprits in absent:
            case = f"absent-{'-'.join(map(str, culprits))}"
            baselines[method, culprits] = one(case, method, "absent", culprits, {}, args, Path(tmp))
            print(json.dumps(baselines[method, culprits])[:300], file=sys.stderr, flush=True)
        for case, method, fault, culprits, extra in CASES:
            rows.append(one(case, method, fault, culprits, extra, args, Path(tmp)))
            print(json.dumps(rows[-1])[:300], file=sys.stderr, flush=True)
    clean = {r["method"]: r for r in rows if r["case"] == "clean"}
    attacks = [r for r in rows if r["case"] != "clean"]
    for r in attacks:
        base, gone = clean.get(r["method"]), baselines.get((r["method"], tuple(r["culprits"])))
        if base is not None:  # the clean run's accuracy over the same honest clients
            evals = {"evaluations": base["_evaluations"]}
            base = {**base, "honest_accuracy": honest_accuracy(evals, tuple(r["culprits"]))}
        r["outcome"] = classify(r, base, gone)
        for name, ref in (("clean", base), ("absent", gone)):
            if ref is not None:
                r[f"{name}_honest_accuracy"] = ref.get("honest_accuracy")
                r[f"{name}_model_norm"] = ref.get("model_norm")
    for r in [*rows, *baselines.values()]:
        r.pop("_evaluations", None)
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
    line = json.dumps(
        {
            "rounds": args.rounds,
            "tolerance": TOLERANCE,
            "tally": tally,
            "cases": rows,
            "absent_baselines": list(baselines.values()),
        }
    )
    print(line)
    write_json_line(line, args.out)
    return 0


def _hang(signum, frame):
    raise TimeoutError(f"case ran past {HANG_SECONDS} s")


if __name__ == "__main__":
    raise SystemExit(main())
