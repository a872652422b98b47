"""The paper's Table 1 and Table 2 over the registered methods: per-run results, Markdown, plots.

table1: every registered method (Ripple Strat/Unif/HDB with both routers,
the oracle, local-only and every baseline; ``--methods`` to choose) on one
federation (the paper's protocol: 100 clients x 200 images, Dir(0.1), 10 per
round, the paper's CNN and optimiser) at every seed of ``--seeds`` (the
paper's 42, 7, 123). Per run: the results file, its accuracy plot and its
assignment picture (``<run>.assignment.png``). Then one Markdown table (final
personalised accuracy, first round reaching ``--target``, bytes per round
against FedAvg's, wall time, models held, and the adjusted Rand index of each
clustered method's clusters against the clients' dominant class, or domain
with ``label-kind = "domain"``: Ripple's before round 1, the baselines' at the
end) and one PNG of the accuracy curves, one panel per method family.

table2: the zero-shot protocol. For each alpha_train and alpha_test: Ripple
Strat/Unif/HDB, IFCA, FeSEM, CFL and FedAvg train on the same federation,
then 10 held-out clients drawn with Dir(alpha_test) from data no training
client holds are onboarded: Ripple by one router pass, the clustered
baselines by keeping the cluster model with the lowest loss on the new
client's own training split, FedAvg with its global model; every new client
is scored on its test split. Ripple's cells also give, in brackets, its best
single cluster model chosen the same way. One PNG of grouped bars.

Every cell is the mean +- 2 sigma over the seeds (sigma: the sample standard
deviation, ddof = 1; one seed prints its value alone); the JSON line keeps
every seed's numbers. ``--sweep-k`` runs the methods whose registry entry
sweeps K (IFCA, FeSEM) for K in {2, 4, 6, 8, 10} at ``--sweep-seeds`` and
``--sweep-rounds`` and runs the table's row at the best K (by mean final
accuracy, as the paper does); the JSON keeps the whole sweep.

    ripple-tables table1 --rounds 300 --reuse --sweep-k \\
        --checkpoint outputs/fashion_gmm_vae.pt --out outputs/table1
    ripple-tables table2 --rounds 100 --reuse --sweep-k \\
        --checkpoint outputs/fashion_gmm_vae.pt --out outputs/table2

``--reuse`` reads a run's results file instead of rerunning it when it holds
the same settings (files are named ``<row>-k<K>-r<rounds>[-a..-t..]-seed<s>.json``),
so a table can be built over several sittings; ``--reuse-only`` reads what is
there, trains nothing, and marks the missing cells. ``--keep DIR`` also writes
each run's summary (what the table reads, a few KB) to DIR and reuses from it:
the results files are megabytes and stay on the machine, DIR is committed
(``docs/results/runs/<table>-<dataset>``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from paper.rows import FLAG_OF, SWEEP_K, TABLE1, TABLE2
from paper.table_one import table1
from paper.table_two import TABLE2_FLAG_OF, table2
from ripple_flwr.experiments.compose import checkpoint_problem
from ripple_flwr.experiments.launch import (
    OneLineParser,
    add_execution_flags,
    add_set_flag,
    check_outputs,
    make_runner,
    prepare_server_env,
)
from ripple_flwr.experiments.runner import build_or_exit, log, write_json_line
from ripple_flwr.experiments.stamp import machine_stamp
from ripple_flwr.runs.statistics import SPREAD
from ripple_flwr.settings import RunSettings

__all__ = ["PRESETS", "SWEEP_K", "TABLE1", "TABLE2", "main"]

# The paper's protocol per benchmark (its Table 4); a flag given on the command line wins.
GENERIC = {
    "model": "cnn",
    "clients": 100,
    "partition_size": 200,
    "alpha": 0.1,
    "label_kind": "class",
    "num_components": RunSettings().embedding.num_components,
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
    # Four rotations (0/90/180/270) as the domains: clients Dir(0.1) over them, K = 4.
    "rotated-fashion-mnist": {"label_kind": "domain", "num_components": 4},
}
SEEDS = [42, 7, 123]  # the paper's


def apply_preset(args: argparse.Namespace) -> None:
    """Fill the flags left unset from the dataset's preset (the paper's protocol for it)."""
    preset = {**GENERIC, **PRESETS.get(args.dataset, {})}
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)


def _data_flags(p: argparse.ArgumentParser) -> None:
    from ripple_flwr.data import available_datasets

    p.add_argument(
        "--dataset",
        default="fashion-mnist",
        metavar="NAME",
        help=f"one of {', '.join(available_datasets())} (fashion-mnist)",
    )
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
    p.add_argument(
        "--label-kind", default=None, help="class, or domain (office-home, rotated-fashion-mnist)"
    )
    p.add_argument(
        "--num-components", type=int, default=None, help="K (10; rotated-fashion-mnist: 4)"
    )
    add_set_flag(
        p, "any other run-config key (e.g. --set image-size=64 --set pretrained-weights=...)"
    )
    p.add_argument("--clients", type=int, default=None, help="default 100 (preset: 50, 233)")
    p.add_argument("--clients-per-round", type=int, default=10, help="clients a round (10)")
    p.add_argument("--partition-size", type=int, default=None, help="images per client (200)")
    p.add_argument("--aux-size", type=int, default=1000, help="the server's D_aux")
    p.add_argument("--alpha", type=float, default=None, help="table1's Dirichlet alpha (0.1)")
    p.add_argument("--checkpoint", default="", help="GMM-VAE checkpoint for the dataset")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="ripple-tables",
        description=__doc__.splitlines()[0],
        epilog="--set KEY=VALUE adds a run-config key the table does not set itself; a key a "
        "row or a flag sets (method, alpha, num-server-rounds, ...) is refused: use the flag.",
    )
    p.add_argument("table", choices=["table1", "table2"], help="table1 or table2 (the paper's)")
    _data_flags(p)
    p.add_argument("--rounds", type=int, default=None, help="default: 300 (table1), 100 (table2)")
    p.add_argument("--eval-every", type=int, default=10, help="evaluate every N rounds (10)")
    p.add_argument("--seeds", type=int, nargs="+", default=SEEDS, help="default: 42 7 123")
    p.add_argument("--methods", nargs="+", default=None, help="default: every row of the table")
    p.add_argument("--target", type=float, default=0.8, help="accuracy for 'first round'")
    p.add_argument(
        "--alphas-train",
        type=float,
        nargs="+",
        default=None,
        help="table2: the training clients' Dirichlet alphas (0.01 0.1)",
    )
    p.add_argument(
        "--alphas-test",
        type=float,
        nargs="+",
        default=None,
        help="table2: the new clients' Dirichlet alphas (1 100)",
    )
    p.add_argument("--new-clients", type=int, default=None, help="table2: new clients a run (10)")
    sweep = "the methods whose K the registry sweeps (IFCA, FeSEM)"
    p.add_argument("--sweep-k", action="store_true", help=f"{sweep}: best K of {SWEEP_K}")
    p.add_argument("--sweep-seeds", type=int, nargs="+", default=[42], help="the sweep's (42)")
    p.add_argument("--sweep-rounds", type=int, default=100, help="the sweep's rounds (100)")
    p.add_argument("--out", default="", help="folder for the per-run results files")
    p.add_argument("--reuse", action="store_true", help="skip runs whose results file matches")
    p.add_argument(
        "--reuse-only",
        action="store_true",
        help="only read finished runs (as --reuse): train nothing, mark the missing cells",
    )
    p.add_argument(
        "--keep",
        default="",
        help="also keep each run's summary (a few KB) in this folder, and reuse from it: "
        "commit it to carry the table to another machine",
    )
    p.add_argument("--plot", default=None, help="the table's PNG (default: <out>/<table>.png)")
    p.add_argument("--md", default=None, help="write the Markdown table here")
    p.add_argument("--json", default="", help="also write the JSON line to this file")
    add_execution_flags(p)
    return p


def parse(argv: list[str] | None, p: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """The command line, checked, with the dataset's preset filled in."""
    p = p or build_parser()
    args = p.parse_args(argv)
    args.set = dict(args.set)
    if "num-components" in args.set:  # the K of the results' names: one place for it
        k = int(args.set.pop("num-components"))
        if args.num_components not in (None, k):
            p.error(f"--num-components {args.num_components} and --set num-components={k}")
        args.num_components = k
    apply_preset(args)
    known = TABLE1 if args.table == "table1" else TABLE2
    twice = sorted({m for m in args.methods or [] if args.methods.count(m) > 1})
    if twice:
        p.error(f"--methods names {', '.join(twice)} twice")
    for name in args.methods or []:
        if name not in known:
            p.error(f"{args.table} has no method {name!r}; choose from {', '.join(known)}")
    table2_only = {"alphas_train": [0.01, 0.1], "alphas_test": [1.0, 100.0], "new_clients": 10}
    for name, default in table2_only.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
        elif args.table == "table1":
            p.error(f"--{name.replace('_', '-')} is a table2 flag; table1 does not use it")
    for flag in ("seeds", "sweep_seeds"):
        seeds = getattr(args, flag)
        if len(set(seeds)) != len(seeds):
            p.error(f"--{flag.replace('_', '-')} {' '.join(map(str, seeds))}: a seed given twice")
    if args.rounds is None:
        args.rounds = 300 if args.table == "table1" else 100
    check_counts(p, args)
    return args


def check_counts(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The flags every run shares that no run config can check: one line each, exit 2."""
    for flag in ("rounds", "eval_every", "clients", "clients_per_round", "sweep_rounds"):
        value = getattr(args, flag, None)
        if value is not None and value < 1:
            p.error(f"--{flag.replace('_', '-')} {value}: must be a whole number >= 1")
    if getattr(args, "new_clients", 1) < 1:
        p.error(f"--new-clients {args.new_clients}: table2 needs at least 1 new client")
    target = getattr(args, "target", 0.8)
    if not 0 < target <= 1:
        p.error(f"--target {target:g}: an accuracy as a fraction in (0, 1] (0.8 = 80%)")
    # Checked here even when no chosen row reads it (each run leaves it out then).
    problem = checkpoint_problem(args.checkpoint) if getattr(args, "checkpoint", "") else None
    if problem:
        p.error(f"{problem} (set by --checkpoint)")


def main(argv: list[str] | None = None, train: Callable[[dict], dict] | None = None) -> int:
    """Build one table; ``train`` (tests) replaces the one-process run of one run config."""
    p = build_parser()
    args = parse(argv, p)
    check_outputs(args, p)
    out = Path(args.out or tempfile.mkdtemp(prefix=f"ripple-{args.table}-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    args.plot = args.plot or str(out / f"{args.table}.png")
    prepare_server_env(out, args.checkpoint, args.set.get("cache-dir", ""))
    stamp = machine_stamp()
    flag_of = {**(FLAG_OF if args.table == "table1" else TABLE2_FLAG_OF), "data-seed": "--seeds"}
    runner = make_runner(args, p, out, stamp, train, flag_of)
    table = table1 if args.table == "table1" else table2
    result, stopped = build_or_exit("ripple-tables", table, args, out, runner, stamp)
    if stopped is not None:
        return stopped
    md_path = Path(args.md or out / f"{args.table}.md")
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(result["markdown"] + "\n")
    print(result["markdown"], file=sys.stderr)
    if result["missing"]:
        log(f"{len(result['missing'])} runs missing: the table is partial")
    line = json.dumps(
        {
            "table": args.table,
            "dataset": args.dataset,
            "model": args.model,
            "rounds": args.rounds,
            "seeds": args.seeds,
            "clients": args.clients,
            "label_kind": args.label_kind,
            "num_components": args.num_components,
            "interval": SPREAD,
            "set": args.set,
            "machine": stamp,
            **{k: v for k, v in result.items() if k != "markdown"},
            "markdown": str(md_path),
        }
    )
    print(line)
    write_json_line(line, args.json)
    return 1 if runner.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
