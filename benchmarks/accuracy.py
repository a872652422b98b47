"""Personalised accuracy of Ripple and its references on one federation: one JSON line.

The paper's protocol (spec section 5): Fashion-MNIST, 100 clients x 200
images, Dir(0.1), 10 clients per round, the paper's CNN and optimiser,
evaluation every 10 rounds. Methods: every entry of the method registry
(``ripple_flwr.methods.registry``): Ripple Strat and Unif with both routers
(gmm-vae, mean-unmixing), the oracle (w = pi*) with either sampler (each
Ripple variant's own oracle), Flower's FedAvg, FedProx, FedAdam, FedYogi
and FedAdagrad, and local-only training, on the same data, sampler budget
and evaluation. Runs in-process
(``InProcessGrid``: the real client handlers, no Ray) and prints, per
method, the final personalised accuracy (mean of the last three
evaluations, then the mean over seeds) and the first round reaching 90%,
and writes one PNG with every method's curve.

    python benchmarks/accuracy.py --rounds 300 --seeds 0 1 \\
        --checkpoint outputs/fashion_gmm_vae.pt --plot outputs/accuracy.png

The checkpoint comes from ``python pretrain_vae.py --dataset fashion-mnist``;
without one the run pre-trains with the run config's (small) defaults.
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
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from runs import run_or_reuse, write_json_line  # noqa: E402

from paper.variants import ORACLE_OF, VARIANTS  # noqa: E402
from ripple_flwr.runs.outputs import CHECKPOINT_DIR_ENV, OUTPUT_DIR_ENV  # noqa: E402
from ripple_flwr.runs.results import tail_mean  # noqa: E402


def curve(results: dict) -> tuple[list[int], list[float]]:
    acc = results["accuracy_per_round"]
    rounds = sorted(int(r) for r in acc)
    return rounds, [acc[str(r)]["weighted_mean"] for r in rounds]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--methods", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--checkpoint", default="", help="GMM-VAE checkpoint for the dataset")
    p.add_argument("--plot", default="outputs/accuracy.png")
    p.add_argument("--json", default="", help="also write the JSON line to this file")
    p.add_argument(
        "--reference",
        default="",
        help="JSON line of an earlier run of this benchmark: its curves of --reference-methods "
        "are drawn dashed beside this run's (e.g. Ripple, its oracle and local-only)",
    )
    p.add_argument(
        "--reference-methods", nargs="*", default=["ripple-strat-gmm-vae", "oracle", "local"]
    )
    p.add_argument("--out", default="", help="folder for the per-run results files")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="read a run's results file from --out instead of rerunning it when it exists "
        "and holds the same settings (lets seeds run in separate sessions)",
    )
    args = p.parse_args(argv)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    import torch

    torch.set_num_threads(1)
    out = Path(args.out or tempfile.mkdtemp(prefix="ripple-accuracy-")).resolve()
    os.environ[OUTPUT_DIR_ENV] = str(out)  # this script is the server: its folder is the output
    if args.checkpoint:  # and the checkpoint's folder is one it may read
        os.environ[CHECKPOINT_DIR_ENV] = str(Path(args.checkpoint).expanduser().resolve().parent)
    summary: dict[str, dict] = {}
    curves: dict[str, list] = {}
    for name in args.methods:
        finals, first90, runs = [], [], []
        for seed in args.seeds:
            cfg = {
                **VARIANTS[name],
                "dataset": args.dataset,
                "num-partitions": args.clients,
                "clients-per-round": 10,
                "num-server-rounds": args.rounds,
                "eval-every": args.eval_every,
                "seed": seed,
                "checkpoint": args.checkpoint,
                "results-path": str(out / f"{name}-seed{seed}.json"),
            }
            res = run_or_reuse(cfg, args.reuse)
            rounds, acc = curve(res)
            finals.append(tail_mean(acc))
            hit = [r for r, a in zip(rounds, acc, strict=True) if a >= 0.9]
            first90.append(hit[0] if hit else None)
            runs.append(acc)
        summary[name] = {
            "final_accuracy": float(np.mean(finals)),
            "final_accuracy_per_seed": finals,
            "first_round_90": first90,
            "curve": [rounds, np.mean(runs, axis=0).tolist()],
        }
        curves[name] = [rounds, np.mean(runs, axis=0).tolist()]
        print(f"{name}: {summary[name]}", file=sys.stderr, flush=True)
    for name, ref in ORACLE_OF.items():
        if name in curves and ref in curves:
            # Seed-mean curves, every evaluation: the largest shortfall against its oracle.
            gaps = np.asarray(curves[ref][1]) - np.asarray(curves[name][1])
            summary[name]["max_gap_to_oracle"] = float(gaps.max())
            summary[name]["max_gap_round"] = int(curves[name][0][int(gaps.argmax())])
    reference = reference_curves(args)
    plot(curves, args, reference)
    line = json.dumps(
        {
            "dataset": args.dataset,
            "rounds": args.rounds,
            "seeds": args.seeds,
            "clients": args.clients,
            "methods": summary,
            "plot": args.plot,
            **({"reference": {"file": args.reference, "curves": reference}} if reference else {}),
        }
    )
    print(line)
    write_json_line(line, args.json)
    return 0


def reference_curves(args: argparse.Namespace) -> dict[str, list]:
    """Seed-mean curves of ``--reference-methods`` from an earlier JSON line (``--reference``)."""
    if not args.reference:
        return {}
    ref = json.loads(Path(args.reference).read_text())
    seeds = ",".join(str(s) for s in ref.get("seeds", []))
    # Lines written before the summaries kept their curves have none to draw.
    return {
        f"{name} (seeds {seeds})": ref["methods"][name]["curve"]
        for name in args.reference_methods
        if "curve" in ref.get("methods", {}).get(name, {})
    }


def plot(
    curves: dict[str, list], args: argparse.Namespace, reference: dict[str, list] | None = None
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, (rounds, acc) in curves.items():
        ax.plot(rounds, acc, label=name, marker="." if len(rounds) < 40 else None)
    for name, (rounds, acc) in (reference or {}).items():
        ax.plot(rounds, acc, label=name, linestyle="--")
    ax.set_xlabel("round")
    ax.set_ylabel("personalised accuracy (weighted mean)")
    ax.set_title(f"{args.dataset}: {args.clients} clients, Dir(0.1), seeds {args.seeds}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
