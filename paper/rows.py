"""The paper tables' rows and their runs: Table 1's and Table 2's rows, the K sweep, the flags.

Each run's results file is named after its row, K, rounds and seed (Table 2:
also alpha_train and alpha_test), e.g. ``ifca-k6-r300-seed42.json``, so the
tables can be built over several sittings with ``--reuse`` and the sweep's
runs never overwrite the table's. The engine that plans, runs and reuses them
is the package's :mod:`ripple_flwr.experiments.runner`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from paper.variants import VARIANTS, table2_rows
from ripple_flwr.experiments.compose import Defined, compose, defined_by, unapplied_note
from ripple_flwr.experiments.runner import Results, log
from ripple_flwr.experiments.stats import best_k
from ripple_flwr.methods.registry import METHODS, MethodSpec
from ripple_flwr.runs.statistics import seed_stats

TABLE1 = {
    **VARIANTS,
    "ripple-hdb-gmm-vae": {"method": "ripple", "sampling": "stratified", "refine": "hdb"},
}
TABLE2 = table2_rows()  # the methods whose registry entry lists "table2"
SWEEP_K = (2, 4, 6, 8, 10)  # the paper's (its section G.4)
SWEEP_CRITERION = "the highest mean final accuracy (mean of the last 3 evaluations) over the seeds"


def spec_of(rows: Mapping[str, dict], name: str) -> MethodSpec:
    """The registry entry of a table row (its run config's ``method``)."""
    return METHODS[rows[name]["method"]]


def swept_rows(rows: Mapping[str, dict], names: Iterable[str]) -> list[str]:
    """The rows whose method's K the benchmarks sweep (the registry's ``sweeps_k``)."""
    return [name for name in names if spec_of(rows, name).sweeps_k]


def run_name(
    row: str, k: int, rounds: int, seed: int, alphas: tuple[float, float] | None = None
) -> str:
    """``<row>-k<K>-r<rounds>[-a<alpha_train>-t<alpha_test>]-seed<seed>.json``."""
    mid = f"-a{alphas[0]:g}-t{alphas[1]:g}" if alphas else ""
    return f"{row}-k{k}-r{rounds}{mid}-seed{seed}.json"


# The keys the tables' own flags set: ``--set`` may not change them (``compose``).
FLAG_OF = {
    "dataset": "--dataset",
    "model": "--model",
    "pretrained": "--pretrained",
    "num-partitions": "--clients",
    "partition-size": "--partition-size",
    "aux-size": "--aux-size",
    "alpha": "--alpha",
    "label-kind": "--label-kind",
    "clients-per-round": "--clients-per-round",
    "eval-every": "--eval-every",
    "seed": "--seeds",
    "checkpoint": "--checkpoint",
    "data-root": "--data-root",
    "num-components": "--num-components",
    "num-server-rounds": "--rounds",
    "results-path": "--out",
}


def flags(values: Mapping[str, Any], flag_of: Mapping[str, str] = FLAG_OF) -> Defined:
    """Keys set by the command's flags: each owned by its flag (``--set`` may not change it)."""
    return {key: (value, f"the flag {flag_of[key]}") for key, value in values.items()}


def row_keys(rows: Mapping[str, dict], row: str) -> Defined:
    """A table row's run-config keys, owned by the row (choose rows with ``--methods``)."""
    return defined_by(rows[row], f"row {row!r} (choose rows with --methods)")


def left_out(user: Mapping[str, Any], rows: Mapping[str, dict], names: Iterable[str]) -> str:
    """A table title's word on the ``--set`` keys some of its rows do not read (and so run
    without: :func:`~ripple_flwr.experiments.compose.applied`); "" when every row reads them."""
    configs = {name: compose(row_keys(rows, name), user) for name in names}
    note = unapplied_note(dict(user), configs)
    return f" Left out: {note}." if note else ""


def base_config(args: argparse.Namespace, seed: int) -> Defined:
    """The run config every row of a table shares, each key owned by its flag."""
    return flags(
        {
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
        }
    )


def k_sweep(
    names: Iterable[str],
    seeds: Iterable[int],
    get_run: Callable[[str, int, int], Results | None],
    extra: Callable[[Results], dict[str, float | None]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per row: every K of ``SWEEP_K`` over ``seeds``, and the best K by mean final accuracy.

    ``get_run(name, k, seed)`` gives a run's results (``None`` if missing);
    ``extra`` adds other per-run numbers to each K's cell (seed statistics too).
    A K with missing seeds is ranked on the seeds it has; ``complete`` says
    whether every run was there.
    """
    seeds = list(seeds)
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        by_k: dict[int, dict[str, Any]] = {}
        for k in SWEEP_K:
            runs = {seed: get_run(name, k, seed) for seed in seeds}
            done = {s: r for s, r in runs.items() if r is not None}
            final = {s: r["final_accuracy"] for s, r in done.items()}
            cell = {"final_accuracy": seed_stats(final)}
            extras = {s: extra(r) for s, r in done.items()} if extra else {}
            for key in sorted(
                {key for e in extras.values() for key, v in e.items() if v is not None}
            ):
                cell[key] = seed_stats({s: e.get(key) for s, e in extras.items()})
            cell["seeds_missing"] = [s for s, r in runs.items() if r is None]
            by_k[k] = cell
        out[name] = {
            "best_k": best_k(by_k),
            "complete": not any(c["seeds_missing"] for c in by_k.values()),
            "by_k": {str(k): cell for k, cell in by_k.items()},
        }
        log(f"K sweep {name}: best K = {out[name]['best_k']}")
    return out


def sweep_block(args: argparse.Namespace, methods: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON of a K sweep: its own seeds and rounds, the criterion and every run's numbers."""
    if not methods:
        return None
    return {
        "seeds": list(args.sweep_seeds),
        "rounds": args.sweep_rounds,
        "ks": list(SWEEP_K),
        "criterion": SWEEP_CRITERION,
        "methods": methods,
    }
