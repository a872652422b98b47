"""Where a map run's time goes, and how far it is above its compute floor (issue 61).

For one map cell and a few rows, each row in a fresh process (as a map task starts):

- **the run**: the real map run, the config :func:`paper.hmap.run_config` builds (BASE
  protocol: 100 clients x 200 images, 10 a round, eval every 10 rounds, 50 new clients
  zero-shot), in this process through the app's Flower Message API
  (:func:`~ripple_flwr.experiments.one_process.run_one_process`, what a map task runs; no
  Ray inside a run), one torch thread as the map's ``--cpus-per-run 1``. Timers wrap the
  functions that do each kind of work and charge each its *exclusive* time (a timed
  function called inside another is charged to itself, not to both), so the categories
  add up to the run's wall.
- **the floor**: the same client work replayed in a plain torch loop in the same process,
  no Flower, no records: every local training the run did (the same client's training
  split, epochs, batch size, learning rate, momentum and shuffle seed, through
  :func:`~ripple_flwr.training.loops.train_local`, the loop the clients run), each round's
  trained models averaged, and every evaluation the run did (the same data, the same
  number of models per call, through
  :func:`~ripple_flwr.training.loops.evaluate_states`). The same forward and backward
  passes, on trained weights (the last model the run evaluated).

Prints the breakdown and wall / floor per row, and one JSON line (``--json`` writes it).

    python benchmarks/map_run_floor.py --rounds 20 [--cell label-skew-0.1] \\
        [--rows ripple-rec fedavg] [--seed 42] [--json docs/results/map_run_floor.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as a map task sets it

# The breakdown's categories, in the order printed; "other" is the wall less all of them.
CATEGORIES = {
    "train": "clients' local training (train_local)",
    "eval_clients": "evaluation, training clients (every eval round)",
    "eval_zero_shot": "evaluation, zero-shot (new clients' best-by-loss and score)",
    "messaging": "Flower messages: records <-> arrays, encode/decode, delivery",
    "client_model_io": "clients' model load/store (set_state, get_state)",
    "server_configure": "server: configure rounds (sampling, per-cluster messages)",
    "server_aggregate": "server: aggregation (incl. the per-cluster optimiser)",
    "server_evaluate": "server: aggregate evaluation metrics",
    "zero_shot_server": "server: onboarding new clients (routing, mixing)",
    "setup_data": "setup: data loading and partitioning",
    "setup_router": "setup: the router's pre-training or cache read",
    "setup_engine": "setup: engine and initial model",
    "setup_summary": "setup: clients' one-shot summaries (WST / mean / class blocks)",
    "results": "results: records, saved run, results file",
    "ray": "Ray (none inside a run: a map task is one process)",
    "other": "other (wall less the above)",
}


class Timers:
    """Exclusive time per category: a wrapped call's time less its wrapped callees'."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.stack: list[list] = []  # [label, children_seconds]

    def in_label(self, label: str) -> bool:
        return any(frame[0] == label for frame in self.stack)

    def wrap(self, fn, label, on_call=None):
        def wrapped(*args, **kwargs):
            name = label(self) if callable(label) else label
            frame = [name, 0.0]
            self.stack.append(frame)
            t0 = time.perf_counter()
            try:
                out = fn(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t0
                self.stack.pop()
                self.seconds[name] += dt - frame[1]
                self.calls[name] += 1
                if self.stack:
                    self.stack[-1][1] += dt
            if on_call is not None:
                on_call(args, kwargs, out)
            return out

        wrapped.__wrapped__ = fn
        return wrapped


def patch_everywhere(fn, wrapper) -> int:
    """Replace ``fn`` by ``wrapper`` in every loaded ripple_flwr module that holds it."""
    n = 0
    for name, mod in list(sys.modules.items()):
        if not name.startswith("ripple_flwr") or mod is None:
            continue
        for attr, val in list(vars(mod).items()):
            if val is fn:
                setattr(mod, attr, wrapper)
                n += 1
    return n


def run_config_of(cell: str, row: str, rounds: int, seed: int, out: Path) -> dict[str, Any]:
    from paper.hmap import run_config

    args = argparse.Namespace(rounds=rounds, eval_every=10, set=[])
    return run_config(args, out, cell, row, seed)


# -- one row, in its own process --------------------------------------------------------------
def one_row(cell: str, row: str, rounds: int, seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    import torch

    # What the run imports lazily, imported here so that the run's wall is a warm task's.
    import ripple_flwr.app.client.handlers as handlers
    import ripple_flwr.app.client.work as work
    import ripple_flwr.app.protocol.records as records
    import ripple_flwr.app.server.run as server_run
    import ripple_flwr.experiments.one_process as one_process
    import ripple_flwr.training.loops as loops
    import ripple_flwr.training.rules as rules
    from ripple_flwr.app.server.rounds import grid as round_grid
    from ripple_flwr.experiments.executor import _limit_threads
    from ripple_flwr.experiments.launch import prepare_server_env
    from ripple_flwr.methods.registry import get_method

    out = Path(tempfile.mkdtemp(prefix="map-floor-"))
    cfg = run_config_of(cell, row, rounds, seed, out)
    _ = get_method(cfg["method"]).method_class  # the method's server module, imported
    imports = time.perf_counter() - t0
    prepare_server_env(out)
    _limit_threads(1)  # the map's --cpus-per-run 1

    tm = Timers()
    trains: list[dict[str, Any]] = []
    evals: list[dict[str, Any]] = []
    current_round = [0]
    models: list = []
    trained: list = []

    def eval_label(t: Timers) -> str:
        return "eval_zero_shot" if t.in_label("zero_shot_server") else "eval_clients"

    def record_train(args, kwargs, _out):
        _rule, model, x, y, inputs = args[:5]
        if not models:
            models.append(copy.deepcopy(model))  # the clients' architecture, for the floor
        trains.append(
            {
                "round": current_round[0],
                "x": x,
                "y": y,
                "lr": float(args[0].optimiser_lr(inputs.lr)),
                "momentum": float(inputs.momentum),
                "epochs": int(kwargs["epochs"]),
                "batch_size": int(kwargs["batch_size"]) * int(args[0].batch_factor),
                "seed": int(kwargs["seed"]),
                "plain": args[0].penalty() is None
                and not args[0].has_correction()
                and args[0].step is None
                and not args[0].grad_clip,
            }
        )

    def record_eval(args, kwargs, _out):
        _model, states, x, y = args[:4]
        trained.extend(st for st in states if st is not None)
        del trained[:-1]  # the latest model the run evaluated: the floor's weights
        evals.append(
            {
                "x": x,
                "y": y,
                "states": len(states),
                "batch_size": int(kwargs.get("batch_size", 256)),
                "zero_shot": tm.in_label("zero_shot_server"),
            }
        )

    orig_train_client = work.train_client

    def train_client(*args, **kwargs):  # the round of the trainings inside it
        current_round[0] = int(kwargs["server_round"])
        return orig_train_client(*args, **kwargs)

    patches = [
        (loops.train_local, "train", None),
        (rules.train_with_rule, "client_model_io", record_train),  # its own time: rule hooks
        (loops.evaluate_states, eval_label, record_eval),
        (orig_train_client, "client_model_io", train_client),
        (work.evaluate_client, "client_model_io", None),
        (work.choose_candidate, "client_model_io", None),
        (work.client_summary, "setup_summary", None),
        (records.record_to_state, "messaging", None),
        (records.state_to_record, "messaging", None),
        (handlers.dispatch, "messaging", None),
        (one_process.OneProcessGrid.push_messages, "messaging", None),
        (round_grid.send_and_receive, "messaging", None),
        (server_run.resolve_run_data, "setup_data", None),
        (server_run.resolve_checkpoint, "setup_router", None),
        (server_run.initial_state, "setup_engine", None),
        (server_run.onboard_new_clients, "zero_shot_server", None),
        (server_run.save_for_onboarding, "results", None),
        (server_run.results_record, "results", None),
        (server_run.write_results, "results", None),
    ]
    for fn, label, hook in patches:
        if fn is orig_train_client:  # its "hook" is the function to time in its place
            wrapper = tm.wrap(hook, label)
        else:
            wrapper = tm.wrap(fn, label, hook)
        patch_everywhere(fn, wrapper)
        if fn is one_process.OneProcessGrid.push_messages:
            one_process.OneProcessGrid.push_messages = wrapper
    # The grid module's class wrapper (Flower's send_and_receive with timeouts and checks).
    for name in dir(round_grid):
        cls = getattr(round_grid, name)
        if isinstance(cls, type) and "send_and_receive" in vars(cls):
            cls.send_and_receive = tm.wrap(vars(cls)["send_and_receive"], "messaging")

    # The engine's four hooks (build_engine's instance): configure and aggregate.
    orig_build = server_run.build_engine

    def build_engine(*args, **kwargs):
        t = time.perf_counter()
        engine = orig_build(*args, **kwargs)
        tm.seconds["setup_engine"] += time.perf_counter() - t
        for meth, label in (
            ("configure_train", "server_configure"),
            ("configure_evaluate", "server_configure"),
            ("aggregate_train", "server_aggregate"),
            ("aggregate_evaluate", "server_evaluate"),
        ):
            setattr(engine, meth, tm.wrap(getattr(engine, meth), label))
        return engine

    server_run.build_engine = build_engine

    from ripple_flwr.experiments.one_process import run_one_process

    t0 = time.perf_counter()
    results = run_one_process(cfg)
    wall = time.perf_counter() - t0
    breakdown = {k: tm.seconds.get(k, 0.0) for k in CATEGORIES if k != "other"}
    breakdown["other"] = wall - sum(breakdown.values())
    for k in tm.seconds:
        if k not in CATEGORIES:
            breakdown["other"] += tm.seconds[k]

    floor = measure_floor(models[0], trained[-1] if trained else None, trains, evals)
    return {
        "row": row,
        "cell": cell,
        "rounds": rounds,
        "seed": seed,
        "imports_seconds": imports,
        "wall_seconds": wall,
        "breakdown_seconds": breakdown,
        "calls": dict(tm.calls),
        "floor": floor,
        "wall_over_floor": wall / floor["seconds"],
        "run_timings": results.get("timings"),
        "final_accuracy": results.get("final_accuracy"),
        "trainings": len(trains),
        "evaluations": {
            "calls": len(evals),
            "model_passes": sum(e["states"] for e in evals),
            "images": sum(e["states"] * len(e["y"]) for e in evals),
        },
        "torch_threads": torch.get_num_threads(),
    }


def measure_floor(model, weights, trains, evals) -> dict[str, Any]:
    """The same training and evaluations in a plain torch loop, timed."""
    import torch

    from ripple_flwr.training import loops
    from ripple_flwr.training.models import get_state, set_state

    # The functions themselves, not the run's timed wrappers.
    train_local = getattr(loops.train_local, "__wrapped__", loops.train_local)
    evaluate_states = getattr(loops.evaluate_states, "__wrapped__", loops.evaluate_states)

    if not all(t["plain"] for t in trains):
        raise SystemExit("the floor replays plain SGD only; this row's rule hooks in more")
    start = weights if weights is not None else get_state(model)  # trained weights, as the run
    by_round: dict[int, list[dict]] = defaultdict(list)
    for t in trains:
        by_round[t["round"]].append(t)
    t0 = time.perf_counter()
    train_s = 0.0
    for rnd in sorted(by_round):
        total, weight = None, 0
        for t in by_round[rnd]:
            a = time.perf_counter()
            set_state(model, start)
            train_local(
                model,
                t["x"],
                t["y"],
                epochs=t["epochs"],
                lr=t["lr"],
                momentum=t["momentum"],
                batch_size=t["batch_size"],
                seed=t["seed"],
            )
            train_s += time.perf_counter() - a
            with torch.no_grad():  # FedAvg's weighted mean, in torch
                n = len(t["y"])
                params = [p.detach().clone() * n for p in model.state_dict().values()]
                if total is not None:
                    params = [s + p for s, p in zip(total, params, strict=True)]
                total = params
                weight += n
        _ = [s / weight for s in total]
    rounds_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    for e in evals:
        evaluate_states(model, [start] * e["states"], e["x"], e["y"], batch_size=e["batch_size"])
    eval_s = time.perf_counter() - t1
    return {
        "seconds": rounds_s + eval_s,
        "train_seconds": train_s,
        "average_seconds": rounds_s - train_s,
        "eval_seconds": eval_s,
    }


# -- the parent: one process per row ----------------------------------------------------------
def table(rows: list[dict[str, Any]]) -> str:
    """The breakdown and the floor, one column a row (docs/benchmarks.md renders the same)."""
    from paper.evidence_bench import floor_table

    return floor_table(rows, CATEGORIES)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cell", default="label-skew-0.1")
    p.add_argument("--rows", nargs="+", default=["ripple-rec", "fedavg"])
    p.add_argument("--rounds", type=int, default=100, help="rounds of each run (100; 20 quick)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--json", default="", help="also write the JSON line here")
    p.add_argument("--one", default="", help=argparse.SUPPRESS)  # the child: one row
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(one_row(args.cell, args.one, args.rounds, args.seed)))
        return 0
    rows = []
    for row in args.rows:
        cmd = [sys.executable, __file__, "--one", row, "--cell", args.cell]
        cmd += ["--rounds", str(args.rounds), "--seed", str(args.seed)]
        load_before = os.getloadavg()
        done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
        rec = json.loads(done.stdout.strip().splitlines()[-1])
        rec["load_before"] = [round(v, 2) for v in load_before]
        rec["load_after"] = [round(v, 2) for v in os.getloadavg()]
        rows.append(rec)
        print(
            f"{row}: wall {rec['wall_seconds']:.1f} s, floor {rec['floor']['seconds']:.1f} s, "
            f"wall/floor {rec['wall_over_floor']:.2f} (load {rec['load_before']})",
            file=sys.stderr,
        )
    md = table(rows)
    print(md, file=sys.stderr)
    line = json.dumps(
        {
            "benchmark": "map_run_floor",
            "cell": args.cell,
            "rounds": args.rounds,
            "seed": args.seed,
            "categories": CATEGORIES,
            "rows": rows,
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "loaded": "see each row's load_before/load_after (1, 5, 15 min load averages)",
            },
        }
    )
    print(line)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
