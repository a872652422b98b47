"""Zero-shot onboarding (the paper's Table 2 protocol) and rotated domain clusters: one JSON line.

Part 1, new clients: for each alpha_train, train Ripple (Strat, Unif, HDB)
and FedAvg on the same federation (Fashion-MNIST, 100 clients x 200,
10 per round, the paper's CNN), then onboard held-out new clients drawn
with Dir(alpha_test) from data no training client holds. Ripple's new
clients get theta_new from one router pass (through ``ripple_flwr.runs.saved_runs``,
the API ``onboard.py`` uses); FedAvg's get its global model; "best-by-loss"
gives each new client the Ripple cluster model with the lowest loss on its
training split, scored on its test split (the advantage the paper gives its
baselines, without letting the test labels choose).
Ripple's in-run zero-shot score (the Flower path) is reported beside the
offline one for the first alpha_test as a cross-check.

Part 2, domain clusters: on ``rotated-*`` datasets with the rotation as the
GMM-VAE's label (K = 4), the ARI of argmax w (and of HDB's meta-clusters)
against the true rotation before any round, then Ripple vs FedAvg accuracy.

    python benchmarks/zero_shot.py --checkpoint outputs/fashion_gmm_vae.pt

The main keys: ``onboard_ms_per_client``, ``zero_shot_acc_ripple``,
``zero_shot_acc_fedavg``, ``zero_shot_acc_best_by_loss`` (alpha_test = 1.0,
mean over alpha_train) and ``ari_rotated`` (the lowest over the rotated sets).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ripple_flwr.aggregation.hdb import refine_hdb  # noqa: E402
from ripple_flwr.aggregation.mixing import unstack  # noqa: E402
from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.app.server.run import run_server  # noqa: E402
from ripple_flwr.data.cache import cached_federation  # noqa: E402
from ripple_flwr.experiments.compose import applied  # noqa: E402
from ripple_flwr.runs.onboarding import Onboarder  # noqa: E402
from ripple_flwr.runs.outputs import CHECKPOINT_DIR_ENV  # noqa: E402
from ripple_flwr.runs.results import client_stats, finished_results, hard_ari  # noqa: E402
from ripple_flwr.testing.inprocess import InProcessGrid  # noqa: E402
from ripple_flwr.training.loops import evaluate_model  # noqa: E402

METHODS = {
    "ripple-strat": {"method": "ripple", "sampling": "stratified"},
    "ripple-unif": {"method": "ripple", "sampling": "uniform"},
    "ripple-hdb": {"method": "ripple", "sampling": "stratified", "refine": "hdb"},
    "fedavg": {"method": "fedavg", "sampling": "uniform"},
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


REUSE = False  # --reuse: read a finished run's results file instead of running it again


def run(cfg: dict) -> dict:
    """One in-process run (or, with --reuse, its results file when the settings match)."""
    res = finished_results(cfg["results-path"], cfg) if REUSE else None
    if res is not None and (res.get("saved_run") is None or Path(res["saved_run"]).is_file()):
        log(f"reusing {cfg['results-path']}")
        return res
    cfg = {**cfg, "overwrite-results": True}  # a stale run is replaced
    return json.loads(run_server(InProcessGrid(cfg, keep_traffic=False), cfg).read_text())


def score(model, fed, pids, split: str = "test") -> tuple[list[float], list[float], list[int]]:
    """Accuracy, loss and size of one model on each client's own test (or train) split."""
    accs, losses, sizes = [], [], []
    for pid in pids:
        x_train, y_train, x_test, y_test = fed.client_data(pid)
        x, y = (x_train, y_train) if split == "train" else (x_test, y_test)
        stats = evaluate_model(model, x, y, device="cpu")
        accs.append(stats["accuracy"])
        losses.append(stats["loss"])
        sizes.append(stats["num_examples"])
    return accs, losses, sizes


def weighted(accs, sizes) -> float:
    return float(client_stats(accs, sizes)["weighted_mean"])


def zero_shot_scores(saved_run: str, fed, pids: list[int], best_by_loss: bool) -> dict:
    """Onboard each new client offline; score theta_new (and every cluster model)."""
    onboarder = Onboarder.from_path(saved_run)
    got = onboarder.onboard_many([fed.client_images(p) for p in pids])
    accs, sizes = [], []
    for pid, onb in zip(pids, got, strict=True):
        a, _, n = score(onboarder.build_model(onb.state), fed, [pid])
        accs += a
        sizes += n
    out = {"accuracy": weighted(accs, sizes)}
    if best_by_loss:
        models = [onboarder.build_model(s) for s in unstack(onboarder.run.cluster_states)]
        per_model = [score(m, fed, pids) for m in models]
        # Chosen on each client's training split: its test labels take no part in the choice.
        losses = np.array([score(m, fed, pids, split="train")[1] for m in models])
        pick = losses.argmin(axis=0)
        best = [per_model[m][0][i] for i, m in enumerate(pick)]
        out["best_by_loss"] = weighted(best, sizes)
        out["best_by_loss_models"] = pick.tolist()
    return out


def onboarding_speed(saved_run: str, fed, pids: list[int], repeats: int = 3) -> float:
    """Milliseconds to onboard one client: embedding + router pass + mixing."""
    onboarder = Onboarder.from_path(saved_run)
    clients = [fed.client_images(p) for p in pids]
    onboarder.onboard(clients[0])  # warm-up: scattering filters, first forward pass
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for images in clients:
            onboarder.onboard(images)
        best = min(best, (time.perf_counter() - t0) / len(clients))
    return 1000.0 * best


def table2(args, out: Path) -> dict:
    base = {
        "dataset": args.dataset,
        "num-partitions": args.clients,
        "partition-size": 200,
        "clients-per-round": 10,
        "num-server-rounds": args.rounds,
        "eval-every": args.rounds,
        "new-clients": args.new_clients,
        "alpha-new": args.alphas_test[0],
        "best-by-loss": False,  # scored offline below, for every alpha_test
        "checkpoint": args.checkpoint,
        "seed": args.seed,
    }
    report: dict = {}
    saved_for_speed = None
    for a_train in args.alphas_train:
        runs = {}
        for name in args.methods:
            cfg = {**base, **METHODS[name], "alpha": a_train}
            cfg["results-path"] = str(out / f"{name}-a{a_train}.json")
            t0 = time.perf_counter()
            res = run(cfg)
            runs[name] = res
            log(
                f"alpha_train={a_train} {name}: trained acc {res['final_accuracy']:.4f}, "
                f"in-run zero-shot {res['zero_shot_accuracy']}, K_hat {res.get('num_models')}, "
                f"{time.perf_counter() - t0:.0f} s"
            )
        for a_test in args.alphas_test:
            cfg = {**base, "alpha": a_train, "alpha-new": a_test}
            fed = cached_federation(parse_run_config(cfg))
            pids = list(range(args.clients, args.clients + args.new_clients))
            row: dict = {}
            for name, res in runs.items():
                scores = zero_shot_scores(res["saved_run"], fed, pids, name == "ripple-strat")
                row[name] = scores["accuracy"]
                if "best_by_loss" in scores:
                    row["best-by-loss"] = scores["best_by_loss"]
                if name == "ripple-hdb":
                    row["hdb_k_hat"] = res["num_models"]
                    row["hdb_events"] = res["hdb"]["events"]
            if a_test == args.alphas_test[0]:
                row["in_run"] = {n: r["zero_shot_accuracy"] for n, r in runs.items()}
            row["trained_acc"] = {n: r["final_accuracy"] for n, r in runs.items()}
            report[f"train{a_train}_test{a_test}"] = row
            log(f"alpha_train={a_train} alpha_test={a_test}: {json.dumps(row)}")
        if saved_for_speed is None and "ripple-strat" in runs:
            saved_for_speed = (runs["ripple-strat"]["saved_run"], fed, pids)
    speed = onboarding_speed(*saved_for_speed) if saved_for_speed else None
    return {"table": report, "onboard_ms_per_client": speed}


def rotated(args, out: Path) -> dict:
    """ARI of the pre-training assignment on rotated data, and Ripple vs FedAvg there."""
    report = {}
    for name in args.rotated:
        small = name.endswith("mnist-5k")
        cfg = {
            "dataset": name,
            "label-kind": "domain",
            "num-components": 4,
            "num-partitions": 30 if small else 100,
            "partition-size": 100 if small else 200,
            "clients-per-round": 10,
            "num-server-rounds": args.rotated_rounds,
            "eval-every": args.rotated_rounds,
            "pretrain-bank-size": args.rotated_bank,
            "pretrain-steps": args.rotated_steps,
            "seed": args.seed,
        }
        row = {}
        for method in ("ripple-strat", "fedavg"):
            c = {**cfg, **METHODS[method], "results-path": str(out / f"{name}-{method}.json")}
            c = applied(c, ["pretrain-bank-size", "pretrain-steps"])[0]  # read by Ripple only
            res = run(c)
            row[f"acc_{method}"] = res["final_accuracy"]
            if method == "ripple-strat":
                routing = res["routing"]
                row["ari_argmax_w"] = routing["ari"]
                row["ari_clients"] = routing["ari_clients"]
                row["routing_l1"] = routing["l1"]
                w = np.asarray(routing["weights"])
                pids = res["clients"]["partition_ids"]
                truth = np.asarray(res["federation"]["true_mixtures"])[pids]
                hdb = refine_hdb(w)
                row["ari_hdb"], _ = hard_ari(truth, hdb.labels)
                row["hdb_k_hat"] = hdb.num_meta
        report[name] = row
        log(f"{name}: {json.dumps(row)}")
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--checkpoint", default="", help="GMM-VAE checkpoint for --dataset")
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--new-clients", type=int, default=10)
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument(
        "--alphas-train", type=float, nargs="*", default=[0.01, 0.1], help="none: skip part 1"
    )
    p.add_argument("--alphas-test", type=float, nargs="+", default=[1.0, 100.0])
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--rotated", nargs="*", default=["rotated-mnist-5k", "rotated-fashion-mnist"])
    p.add_argument("--rotated-rounds", type=int, default=30)
    p.add_argument("--rotated-bank", type=int, default=2000, help="synthetic clients")
    p.add_argument("--rotated-steps", type=int, default=1500, help="GMM-VAE steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="", help="folder for the per-run results files")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="reuse the results files in --out of runs with the same settings",
    )
    args = p.parse_args(argv)
    global REUSE
    REUSE = args.reuse
    logging.getLogger("flwr").setLevel(logging.WARNING)
    import torch

    torch.set_num_threads(1)
    out = Path(args.out or tempfile.mkdtemp(prefix="ripple-zero-shot-")).resolve()
    os.environ["RIPPLE_OUTPUT_DIR"] = str(out)  # this script is the server: its output folder
    if args.checkpoint:  # and the checkpoint's folder is one it may read
        os.environ[CHECKPOINT_DIR_ENV] = str(Path(args.checkpoint).expanduser().resolve().parent)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    part1 = table2(args, out) if args.alphas_train else {"table": {}}
    rot = rotated(args, out) if args.rotated else {}
    first = args.alphas_test[0]
    rows = [v for k, v in part1["table"].items() if k.endswith(f"_test{first}")]

    def mean_of(key):
        vals = [r[key] for r in rows if key in r]
        return float(np.mean(vals)) if vals else None

    aris = [r["ari_argmax_w"] for r in rot.values() if r.get("ari_argmax_w") is not None]
    print(
        json.dumps(
            {
                "dataset": args.dataset,
                "rounds": args.rounds,
                "alphas_train": args.alphas_train,
                "alphas_test": args.alphas_test,
                "onboard_ms_per_client": part1.get("onboard_ms_per_client"),
                "zero_shot_acc_ripple": mean_of("ripple-strat"),
                "zero_shot_acc_ripple_unif": mean_of("ripple-unif"),
                "zero_shot_acc_ripple_hdb": mean_of("ripple-hdb"),
                "zero_shot_acc_fedavg": mean_of("fedavg"),
                "zero_shot_acc_best_by_loss": mean_of("best-by-loss"),
                "ari_rotated": min(aris) if aris else None,
                "table": part1["table"],
                "rotated": rot,
                "seconds": time.perf_counter() - t0,
                "out": str(out),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
