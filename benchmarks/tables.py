"""The paper's Table 1 and Table 2 over the registered methods: per-run results, Markdown, plots.

table1: every registered method (Ripple Strat/Unif/HDB with both routers, the
oracle, local-only and every baseline; ``--methods`` to choose) on one
federation (the paper's protocol: 100 clients x 200 images, Dir(0.1), 10 per
round, the paper's CNN and optimiser). Per run: the results file, its
accuracy plot and its assignment picture (``<run>.assignment.png``). Then
one Markdown table (final personalised accuracy, first round reaching
``--target``, bytes per round against FedAvg's, wall time, models held, and
the adjusted Rand index of each clustered method's clusters against the
clients' dominant class: Ripple's before round 1, the baselines' at the
end) and one PNG of every accuracy curve.

table2: the zero-shot protocol. For each alpha_train and alpha_test: Ripple
Strat/Unif/HDB, IFCA, FeSEM, CFL and FedAvg train on the same federation,
then 10 held-out clients drawn with Dir(alpha_test) from data no training
client holds are onboarded: Ripple by one router pass, the clustered
baselines by keeping the cluster model with the lowest loss on the new
client's own training split, FedAvg with its global model; every new
client is scored on its test split. Ripple's cells also give, in brackets,
its best single cluster model chosen the same way (by training-split loss).
Each (method, alpha_train) trains once: the other alpha_test values resume
the finished run with their own held-out clients (drawn apart from the
training clients, so training is the same) and only onboard them.
``--sweep-k`` runs IFCA and FeSEM for K in {2, 4, 6, 8, 10} and reports the
best (as the paper does).

    python benchmarks/tables.py table1 --rounds 300 --seeds 0 --reuse \\
        --checkpoint outputs/fashion_gmm_vae.pt --out outputs/table1
    python benchmarks/tables.py table2 --rounds 100 --seeds 0 --reuse \\
        --checkpoint outputs/fashion_gmm_vae.pt --out outputs/table2

``--reuse`` reads a run's results file instead of rerunning it when it holds
the same settings, so a long table can be built in parts.
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
from accuracy import VARIANTS, curve  # noqa: E402
from runs import run_or_reuse, write_json_line  # noqa: E402

from ripple_flwr.runs.outputs import CHECKPOINT_DIR_ENV, OUTPUT_DIR_ENV  # noqa: E402
from ripple_flwr.runs.results import hard_ari, tail_mean  # noqa: E402
from ripple_flwr.settings import CACHE_DIR_ENV  # noqa: E402

TABLE1 = {
    **VARIANTS,
    "ripple-hdb-gmm-vae": {"method": "ripple", "sampling": "stratified", "refine": "hdb"},
}
TABLE2 = {
    "ripple-strat": {"method": "ripple", "sampling": "stratified"},
    "ripple-unif": {"method": "ripple", "sampling": "uniform"},
    "ripple-hdb": {"method": "ripple", "sampling": "stratified", "refine": "hdb"},
    "ifca": {"method": "ifca"},
    "fesem": {"method": "fesem"},
    "cfl": {"method": "cfl"},
    "fedavg": {"method": "fedavg"},
}
SWEEP_K = (2, 4, 6, 8, 10)

# The paper's protocol per benchmark (its Table 4); a flag given on the command line wins.
GENERIC = {
    "model": "cnn",
    "clients": 100,
    "partition_size": 200,
    "alpha": 0.1,
    "label_kind": "class",
    "pretrained": False,
}
PRESETS = {
    # 50 clients of 130 images, Dirichlet(0.1) over the four domains, 10 of 50 a round.
    "office-home": {
        "model": "resnet18",
        "pretrained": True,
        "clients": 50,
        "partition_size": 130,
        "alpha": 0.1,
        "label_kind": "domain",
    },
    # The natural photographer split: all 233 users, each with its own images.
    "gldv2-23k": {"model": "resnet18", "pretrained": True, "clients": 233},
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def clusters_ari(res: dict) -> tuple[float | None, float | None, str]:
    """(ARI over near-one-hot clients, ARI over all clients, when) against the dominant class."""
    truth = np.asarray(res["federation"]["true_mixtures"], dtype=float)
    if "assignment" in res:
        rec = res["assignment"]
        labels, pids = np.asarray(rec["labels"]), np.asarray(rec["partition_ids"])
        when = "end"
    elif (res.get("routing") or {}).get("weights") is not None:
        w = np.asarray(res["routing"]["weights"], dtype=float)
        labels, pids = w.argmax(axis=1), np.asarray(res["clients"]["partition_ids"])
        when = "before round 1"
    else:
        return None, None, ""
    hard, _ = hard_ari(truth[pids], labels)
    every, _ = hard_ari(truth[pids], labels, hard=0.0)
    return hard, every, when


def bytes_ratio(res: dict) -> float:
    """Mean bytes per round (down + up) over FedAvg's: 2 x clients-per-round models."""
    per_round = [v["down"] + v["up"] for v in res["bytes_per_round"].values()]
    fedavg = 2 * res["settings"]["clients-per-round"] * res["model_bytes"]
    return float(np.mean(per_round)) / fedavg


def fmt(v, spec: str = ".1f", scale: float = 1.0) -> str:
    return "n/a" if v is None or (isinstance(v, float) and np.isnan(v)) else format(v * scale, spec)


# -- Table 1 ---------------------------------------------------------------------------------
def table1(args: argparse.Namespace, out: Path) -> dict:
    rows, curves = {}, {}
    for name in args.methods or list(TABLE1):
        finals, firsts, ratios, walls, aris, runs = [], [], [], [], [], []
        for seed in args.seeds:
            cfg = {
                **TABLE1[name],
                **base_config(args, seed),
                "num-server-rounds": args.rounds,
                "results-path": str(out / f"{name}-seed{seed}.json"),
            }
            res = run_or_reuse(cfg, args.reuse)
            r, acc = curve(res)
            finals.append(tail_mean(acc))
            hit = [rd for rd, a in zip(r, acc, strict=True) if a >= args.target]
            firsts.append(hit[0] if hit else None)
            ratios.append(bytes_ratio(res))
            walls.append(res["timings"]["total"])
            aris.append(clusters_ari(res))
            runs.append(acc)
        rows[name] = {
            "final_accuracy": float(np.mean(finals)),
            "final_accuracy_per_seed": finals,
            "first_round_target": firsts,
            "bytes_ratio_vs_fedavg": float(np.mean(ratios)),
            "wall_seconds": float(np.mean(walls)),
            "models": res["num_models"],
            "ari_hard": aris[0][0],
            "ari_all": aris[0][1],
            "ari_when": aris[0][2],
        }
        curves[name] = [r, np.mean(runs, axis=0).tolist()]
        log(f"{name}: {rows[name]}")
    md = [
        f"| method | final acc. (%) | first round >= {args.target:.0%} | bytes/round vs FedAvg "
        "| wall (s) | models | ARI hard / all (when) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in sorted(rows.items(), key=lambda kv: -kv[1]["final_accuracy"]):
        first = [f for f in row["first_round_target"] if f is not None]
        ari = (
            f"{fmt(row['ari_hard'], '.3f')} / {fmt(row['ari_all'], '.3f')} ({row['ari_when']})"
            if row["ari_when"]
            else ""
        )
        md.append(
            f"| {name} | {fmt(row['final_accuracy'], '.1f', 100)} | "
            f"{first[0] if first else 'never'} | {row['bytes_ratio_vs_fedavg']:.3f} | "
            f"{row['wall_seconds']:.0f} | {row['models']} | {ari} |"
        )
    plot_curves(curves, args, f"Table 1: {args.dataset}, {args.clients} clients, Dir({args.alpha})")
    return {"rows": rows, "curves": curves, "markdown": "\n".join(md)}


# -- Table 2 ---------------------------------------------------------------------------------
def table2(args: argparse.Namespace, out: Path) -> dict:
    """Each (method, alpha_train) trains once; every alpha_test onboards its own new clients.

    The first alpha_test's run saves its final server state; the others resume
    that finished run with other held-out clients (drawn apart from, and after,
    the training clients, so the training is the same) and only onboard them.
    """
    cells: dict[str, dict[str, dict]] = {}
    names = args.methods or list(TABLE2)
    for alpha_train in args.alphas_train:
        for name in names:
            ks = SWEEP_K if (args.sweep_k and name in ("ifca", "fesem")) else (None,)
            per_k: dict = {}
            for k in ks:
                for seed in args.seeds:
                    tag = f"{name}" + (f"-k{k}" if k else "")
                    trained = None
                    for alpha_test in args.alphas_test:
                        cfg = {
                            **TABLE2[name],
                            **base_config(args, seed),
                            "alpha": alpha_train,
                            "alpha-new": alpha_test,
                            "new-clients": args.new_clients,
                            "num-server-rounds": args.rounds,
                            # Ripple also reports its best cluster model by training-split loss.
                            "best-by-loss": TABLE2[name]["method"] == "ripple",
                            "results-path": str(
                                out / f"{tag}-a{alpha_train:g}-t{alpha_test:g}-seed{seed}.json"
                            ),
                            **({"num-components": k} if k else {}),
                        }
                        if trained is None:
                            cfg["checkpoint-every"] = args.rounds  # the final state, for later
                            trained = Path(cfg["results-path"]).with_suffix(".resume.npz")
                        else:
                            cfg["resume"] = str(trained)
                        res = run_or_reuse(cfg, args.reuse)
                        ref = res["zero_shot"].get("best_by_loss")
                        per_k.setdefault(k, {}).setdefault(alpha_test, []).append(
                            (
                                res["zero_shot"]["accuracy"]["weighted_mean"],
                                ref["accuracy"]["weighted_mean"] if ref else None,
                            )
                        )
            for alpha_test in args.alphas_test:
                best = None
                for k, by_test in per_k.items():
                    got = by_test[alpha_test]
                    cell = {
                        "zero_shot_accuracy": float(np.mean([a for a, _ in got])),
                        "per_seed": [a for a, _ in got],
                        "k": k,
                    }
                    if all(r is not None for _, r in got):
                        cell["best_cluster_by_train_loss"] = float(np.mean([r for _, r in got]))
                    if best is None or cell["zero_shot_accuracy"] > best["zero_shot_accuracy"]:
                        best = cell
                col = f"{alpha_train:g}/{alpha_test:g}"
                cells.setdefault(name, {})[col] = best
                log(f"{name} {col}: {best}")
    cols = [f"{a:g}/{t:g}" for a in args.alphas_train for t in args.alphas_test]
    md = [
        "| method | " + " | ".join(f"alpha_train/alpha_test {c}" for c in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for name in names:
        parts = []
        for c in cols:
            cell = cells[name][c]
            k = f" (K={cell['k']})" if cell["k"] else ""
            best = cell.get("best_cluster_by_train_loss")
            ref = f" [best cluster: {fmt(best, '.1f', 100)}]" if best is not None else ""
            parts.append(f"{fmt(cell['zero_shot_accuracy'], '.1f', 100)}{k}{ref}")
        md.append(f"| {name} | " + " | ".join(parts) + " |")
    return {"cells": cells, "markdown": "\n".join(md)}


# -- shared ----------------------------------------------------------------------------------
def base_config(args: argparse.Namespace, seed: int) -> dict:
    return {
        "dataset": args.dataset,
        "model": args.model,
        "pretrained": args.pretrained,
        "num-partitions": args.clients,
        "partition-size": args.partition_size,
        "aux-size": args.aux_size,
        "alpha": args.alpha,
        "label-kind": args.label_kind,
        "clients-per-round": args.clients_per_round,
        "eval-every": args.eval_every,
        "seed": seed,
        "checkpoint": args.checkpoint,
        **({"data-root": args.data_root} if args.data_root else {}),
        **args.set,
    }


def apply_preset(args: argparse.Namespace) -> None:
    """Fill the flags left unset from the dataset's preset (the paper's protocol for it)."""
    preset = {**GENERIC, **PRESETS.get(args.dataset, {})}
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)


def run_config_value(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` of ``--set``, VALUE parsed as TOML (so 1 is an int, "a" a string)."""
    import tomllib

    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--set wants KEY=VALUE, got {text!r}")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare word: a string
    return key.strip(), value


def plot_curves(curves: dict[str, list], args: argparse.Namespace, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    styles = ["-", "--", ":", "-."]
    for i, (name, (rounds, acc)) in enumerate(curves.items()):
        ax.plot(rounds, acc, label=name, linestyle=styles[(i // 10) % len(styles)])
    ax.set_xlabel("round")
    ax.set_ylabel("personalised accuracy (weighted mean)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("table", choices=["table1", "table2"])
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--data-root", default="", help="where the dataset's files are (cifar10)")
    p.add_argument(
        "--model", default=None, help="cnn (MNIST-like), resnet9 (CIFAR) or resnet18 (preset)"
    )
    p.add_argument(
        "--pretrained",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="ImageNet weights for resnet18 (default: on for office-home and gldv2-23k)",
    )
    p.add_argument("--label-kind", default=None, help="class, or domain (office-home's preset)")
    p.add_argument(
        "--set",
        type=run_config_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other run-config key (e.g. --set image-size=64 --set pretrained-weights=...)",
    )
    p.add_argument("--rounds", type=int, default=None, help="default: 300 (table1), 100 (table2)")
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--clients", type=int, default=None, help="default 100 (preset: 50, 233)")
    p.add_argument("--clients-per-round", type=int, default=10)
    p.add_argument("--partition-size", type=int, default=None, help="images per client (200)")
    p.add_argument("--aux-size", type=int, default=1000, help="the server's D_aux")
    p.add_argument("--alpha", type=float, default=None, help="table1's Dirichlet alpha (0.1)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--methods", nargs="+", default=None, help="default: every row of the table")
    p.add_argument("--target", type=float, default=0.8, help="accuracy for 'first round'")
    p.add_argument("--alphas-train", type=float, nargs="+", default=[0.01, 0.1])
    p.add_argument("--alphas-test", type=float, nargs="+", default=[1.0, 100.0])
    p.add_argument("--new-clients", type=int, default=10)
    p.add_argument("--sweep-k", action="store_true", help="IFCA and FeSEM: best K of 2..10")
    p.add_argument("--checkpoint", default="", help="GMM-VAE checkpoint for the dataset")
    p.add_argument("--out", default="", help="folder for the per-run results files")
    p.add_argument("--reuse", action="store_true", help="skip runs whose results file matches")
    p.add_argument("--plot", default=None, help="PNG of every accuracy curve (table1)")
    p.add_argument("--md", default=None, help="write the Markdown table here")
    p.add_argument("--json", default="", help="also write the JSON line to this file")
    args = p.parse_args(argv)
    args.set = dict(args.set)
    apply_preset(args)
    known = TABLE1 if args.table == "table1" else TABLE2
    for name in args.methods or []:
        if name not in known:
            p.error(f"{args.table} has no method {name!r}; choose from {', '.join(known)}")
    args.rounds = args.rounds or (300 if args.table == "table1" else 100)
    out = Path(args.out or tempfile.mkdtemp(prefix=f"ripple-{args.table}-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    args.plot = args.plot or str(out / f"{args.table}.png")
    os.environ[OUTPUT_DIR_ENV] = str(out)  # this script is the server: its folder is the output
    if args.checkpoint:  # and the checkpoint's folder is one it may read
        os.environ[CHECKPOINT_DIR_ENV] = str(Path(args.checkpoint).expanduser().resolve().parent)
    if args.set.get("cache-dir"):  # and a cache folder it is given, its cache root
        os.environ[CACHE_DIR_ENV] = str(Path(args.set["cache-dir"]).expanduser().resolve())
    logging.getLogger("flwr").setLevel(logging.WARNING)
    import torch

    torch.set_num_threads(1)
    result = (table1 if args.table == "table1" else table2)(args, out)
    md_path = Path(args.md or out / f"{args.table}.md")
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(result["markdown"] + "\n")
    print(result["markdown"], file=sys.stderr)
    line = json.dumps(
        {
            "table": args.table,
            "dataset": args.dataset,
            "model": args.model,
            "rounds": args.rounds,
            "seeds": args.seeds,
            "clients": args.clients,
            **{k: v for k, v in result.items() if k != "markdown"},
            "markdown": str(md_path),
            **({"plot": args.plot} if args.table == "table1" else {}),
        }
    )
    print(line)
    write_json_line(line, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
