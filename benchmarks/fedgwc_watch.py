"""The round at which FedGWC's convergence check first fires, from its own arithmetic alone.

FedGWC splits a cluster only after the moving mean of its interaction matrix's squared
change (starting at 1, rate ``m_c / K_c``) has stayed below ``fedgwc-eps`` for
``round(N / clients-per-round)`` rounds in a row. This runs exactly the port's per-round
arithmetic for the first cluster (``ripple_flwr/methods/fedgwc/interactions.py``:
``gaussian_rewards``, ``update_interactions``, ``moving_mse``, ``watch_rounds``; the gate
of ``FedGWCMethod.aggregate``), with the run's uniform sampler (``uniform_sample``), on
the map's protocol (``paper/hmap.py`` ``BASE``: 100 clients, 10 a round) and the options'
defaults (``fedgwc-eps``, ``fedgwc-steps``), and no model at all: the losses are drawn.
A reward depends on a client's loss only through its standardised distance from the
sample's mean, so three loss models bracket what a run can see:

- ``equal``: every client reports the same losses (every reward 1, the least change);
- ``iid``: each client's step losses independent draws (a fresh ranking every round);
- ``two-groups``: half the clients' losses one unit above the others' (a persistent split,
  what FedGWC is meant to find), with the same per-step noise.

It prints, per loss model and seed, the first round the moving mean is below ``eps`` and
the round the watch first completes (where ``try_split`` would run), beside the bound that
ignores the change: ``(1 - m/N)^t < eps`` first at ``t = ceil(log eps / log(1 - m/N))``
(110 here), the "order of a hundred rounds" the docs once gave.

    PYTHONPATH=. python benchmarks/fedgwc_watch.py --json docs/results/fedgwc_watch.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paper.hmap import BASE  # noqa: E402
from ripple_flwr.aggregation.mixing import uniform_sample  # noqa: E402
from ripple_flwr.methods.fedgwc.interactions import (  # noqa: E402
    gaussian_rewards,
    moving_mse,
    update_interactions,
    watch_rounds,
)
from ripple_flwr.methods.fedgwc.spec import FEDGWC_EPS, FEDGWC_STEPS  # noqa: E402

LOSS_MODELS = ("equal", "iid", "two-groups")


def draw_losses(model: str, rows: np.ndarray, steps: int, rng: np.random.Generator) -> np.ndarray:
    """``(len(rows), steps)`` step losses of the sampled clients under one loss model."""
    if model == "equal":
        return np.full((len(rows), steps), 1.0)
    noise = rng.normal(size=(len(rows), steps))
    if model == "iid":
        return 1.0 + noise
    return 1.0 + noise + (rows % 2 == 0)[:, None]  # two-groups: even clients one unit higher


def first_fires(
    model: str, seed: int, n: int, per_round: int, eps: float, steps: int, rounds: int
) -> dict:
    """One cluster of everyone, as FedGWC starts: when the check fires, and the MSE on the way."""
    rng = np.random.default_rng(seed)
    w = np.full((n, n), 1.0 / n**2)
    mse, patience, below, watched = 1.0, 0, None, None
    watch = watch_rounds(n, per_round)
    trace = {}
    for t in range(1, rounds + 1):
        rows = uniform_sample(n, per_round, rng)
        if n > per_round and len(rows) >= 2:  # the server's gate: a cluster larger than m
            rewards = gaussian_rewards(draw_losses(model, rows, steps, rng), np.ones(len(rows)))
            rate = len(rows) / n
            mse = moving_mse(mse, update_interactions(w, rows, rewards, rate), rate)
            patience = patience + 1 if mse < eps else 0
            if below is None and mse < eps:
                below = t
            if watched is None and patience >= watch:
                watched = t
        if t in (100, 300, 1000):
            trace[str(t)] = mse
        if watched is not None and t >= 1000:
            break
    return {"first_below_eps": below, "watch_complete": watched, "mse_at": trace}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[42, 7, 123, 5, 9])
    ap.add_argument("--rounds", type=int, default=10_000, help="the authors' num_rounds")
    ap.add_argument("--json", type=Path, help="also write the table here")
    args = ap.parse_args(argv)
    n, m = int(BASE["num-partitions"]), int(BASE["clients-per-round"])
    eps, steps = float(FEDGWC_EPS.default), int(FEDGWC_STEPS.default)
    bound = math.ceil(math.log(eps) / math.log(1 - m / n))
    print(f"N = {n}, m = {m}, eps = {eps:g}, S = {steps}, watch = {watch_rounds(n, m)} rounds")
    print(f"bound ignoring W's change: (1 - m/N)^t < eps first at t = {bound}")
    models = {}
    for model in LOSS_MODELS:
        runs = {str(s): first_fires(model, s, n, m, eps, steps, args.rounds) for s in args.seeds}
        below = [r["first_below_eps"] for r in runs.values() if r["first_below_eps"]]
        watched = [r["watch_complete"] for r in runs.values() if r["watch_complete"]]
        models[model] = {
            "seeds": runs,
            "first_below_eps": [min(below), max(below)] if below else None,
            "watch_complete": [min(watched), max(watched)] if watched else None,
        }
        for s, r in runs.items():
            mse = ", ".join(f"{t}: {v:.2e}" for t, v in r["mse_at"].items())
            print(
                f"{model:10s} seed {s:>3}: below eps at round {r['first_below_eps']}, "
                f"watch complete at {r['watch_complete']} (MSE at round {mse})"
            )
    fired = [r for v in models.values() for r in (v["first_below_eps"] or [])]
    done = [r for v in models.values() for r in (v["watch_complete"] or [])]
    print(
        f"over every loss model and seed: below eps first at rounds {min(fired)}-{max(fired)}, "
        f"the first split tried at rounds {min(done)}-{max(done)}"
    )
    out = {
        "command": "PYTHONPATH=. python benchmarks/fedgwc_watch.py --json "
        "docs/results/fedgwc_watch.json",
        "protocol": {"num-partitions": n, "clients-per-round": m},
        "eps": eps,
        "steps": steps,
        "watch": watch_rounds(n, m),
        "bound_without_change": bound,
        "loss_models": models,
        "first_below_eps": [min(fired), max(fired)],
        "first_split_tried": [min(done), max(done)],
    }
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
