"""What a differentially private embedding costs Ripple in a real run: one JSON line.

The README's accuracy protocol (Fashion-MNIST, 100 clients x 200 images,
Dir(0.1), 10 clients per round, the paper's CNN), Ripple-Strat with the
GMM-VAE router, for each epsilon (``none``: no privacy): every client
releases its embedding once through the server's public mechanism
(``ripple_flwr.privacy.release``), the server routes the noisy embeddings
unchanged. Per epsilon: routing L1 to pi* and ARI before round 1, final
personalised accuracy (mean of the last three evaluations), the noise sigma
and clip. Each node's noise is seeded from ``dp-noise-seed`` in its node
config (the benchmark plays the node operator), so the line is reproducible;
a deployed node draws secret noise.

    python benchmarks/embedding_dp_accuracy.py --checkpoint outputs/fashion_gmm_vae.pt \\
        --rounds 100 --out outputs/dp-accuracy --reuse
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


from runs import run_or_reuse, write_json_line  # noqa: E402

from ripple_flwr.privacy.release import NOISE_SEED_KEY  # noqa: E402
from ripple_flwr.runs.outputs import CHECKPOINT_DIR_ENV, OUTPUT_DIR_ENV  # noqa: E402
from ripple_flwr.runs.results import tail_mean  # noqa: E402


def parse_epsilon(text: str) -> float:
    return 0.0 if text.lower() in ("none", "inf", "0") else float(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default="", help="GMM-VAE checkpoint for the dataset")
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--epsilons", nargs="+", default=["none", "16", "4", "1"])
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="", help="folder for the per-run results files")
    p.add_argument("--reuse", action="store_true", help="skip runs whose results file matches")
    p.add_argument("--plot", default="", help="PNG: accuracy curves and routing L1 per epsilon")
    p.add_argument("--json", default="", help="also write the JSON line to this file")
    args = p.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="ripple-dp-acc-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ[OUTPUT_DIR_ENV] = str(out)
    if args.checkpoint:  # and the checkpoint's folder is one it may read
        os.environ[CHECKPOINT_DIR_ENV] = str(Path(args.checkpoint).expanduser().resolve().parent)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    import torch

    torch.set_num_threads(1)
    rows: dict[str, dict] = {}
    for text in args.epsilons:
        eps = parse_epsilon(text)
        name = "none" if not eps else f"{eps:g}"
        cfg = {
            "method": "ripple",
            "sampling": "stratified",
            "router": "gmm-vae",
            "dataset": args.dataset,
            "num-partitions": args.clients,
            "clients-per-round": 10,
            "num-server-rounds": args.rounds,
            "eval-every": args.eval_every,
            "seed": args.seed,
            "checkpoint": args.checkpoint,
            "embedding-dp-epsilon": eps,
            "embedding-dp-delta": args.delta,
            "results-path": str(out / f"ripple-dp-{name}-seed{args.seed}.json"),
        }
        nodes = [
            {
                "partition-id": i,
                "num-partitions": args.clients,
                NOISE_SEED_KEY: 1000 * args.seed + i,
            }
            for i in range(args.clients)
        ]
        res = run_or_reuse(cfg, args.reuse, node_configs=nodes)
        acc = res["accuracy_per_round"]
        rounds = sorted(int(r) for r in acc)
        curve = [acc[str(r)]["weighted_mean"] for r in rounds]
        dp = res.get("embedding_dp") or {}
        rows[name] = {
            "epsilon": eps or None,
            "routing_l1": res["routing"]["l1"],
            "routing_ari": res["routing"]["ari"],
            "final_accuracy": tail_mean(curve),
            "sigma": dp.get("sigma"),
            "clip": dp.get("clip"),
            "curve": [rounds, curve],
        }
        print(f"epsilon={name}: {rows[name]}", file=sys.stderr, flush=True)
    if args.plot:
        plot(rows, args)
    line = json.dumps(
        {
            "dataset": args.dataset,
            "clients": args.clients,
            "rounds": args.rounds,
            "delta": args.delta,
            "seed": args.seed,
            "checkpoint": args.checkpoint,
            "epsilons": rows,
        }
    )
    print(line)
    write_json_line(line, args.json)
    return 0


def plot(rows: dict[str, dict], args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [2, 1]})
    for name, row in rows.items():
        rounds, curve = row["curve"]
        ax.plot(rounds, curve, label=f"epsilon {name}")
    ax.set_xlabel("round")
    ax.set_ylabel("personalised accuracy (weighted mean)")
    ax.grid(alpha=0.3)
    ax.legend()
    names = list(rows)
    bx.bar(names, [rows[n]["routing_l1"] for n in names], color="tab:orange")
    bx.set_xlabel("epsilon")
    bx.set_ylabel("routing L1 to pi* (lower is better)")
    bx.grid(alpha=0.3, axis="y")
    fig.suptitle(
        f"Ripple-Strat with a DP embedding: {args.dataset}, {args.clients} clients, Dir(0.1)"
    )
    fig.tight_layout()
    Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.plot, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
