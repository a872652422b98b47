"""Table 2 of ripple-tables: zero-shot new clients per alpha_train x alpha_test, over seeds.

Each (row, alpha_train, K, seed) trains once: the first alpha_test's run saves
its final server state, the other alpha_test values resume that finished run
with their own held-out clients (drawn apart from, and after, the training
clients, so the training is the same) and only onboard them. With
``--sweep-k`` a row whose method sweeps K runs at the best K of the sweep for
that alpha_train, chosen on the training clients' final accuracy (not on the
new clients the table scores).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from paper.plots import bars_figure, save
from paper.rows import (
    FLAG_OF,
    TABLE2,
    base_config,
    flags,
    k_sweep,
    left_out,
    row_keys,
    run_name,
    sweep_block,
    swept_rows,
)
from paper.table_one import sweep_markdown
from ripple_flwr.experiments.compose import compose, defined_by
from ripple_flwr.experiments.runner import Results, Runner, log
from ripple_flwr.experiments.stats import fmt_stat
from ripple_flwr.runs.statistics import SPREAD, seed_stats

TABLE2_FLAG_OF = {
    **FLAG_OF,
    "alpha": "--alphas-train",
    "alpha-new": "--alphas-test",
    "new-clients": "--new-clients",
}


def onboard_runs(
    args: argparse.Namespace,
    out: Path,
    runner: Runner,
    key: tuple[str, float, int, int],
    rounds: int,
    alphas_test: list[float],
) -> dict[float, Results | None]:
    """Each alpha_test's results of one (row, alpha_train, K, seed): trained once, then resumed."""
    row, alpha_train, k, seed = key
    trained: Path | None = None
    found: dict[float, Results | None] = {}
    for alpha_test in alphas_test:
        name = run_name(row, k, rounds, seed, (alpha_train, alpha_test))
        legacy = [
            f"{row}{tag}-a{alpha_train:g}-t{alpha_test:g}-seed{seed}.json" for tag in (f"-k{k}", "")
        ]
        cfg = compose(
            {
                **row_keys(TABLE2, row),
                **base_config(args, seed),
                **flags(
                    {
                        "num-components": k,
                        "alpha": alpha_train,
                        "alpha-new": alpha_test,
                        "new-clients": args.new_clients,
                        "num-server-rounds": rounds,
                        "results-path": str(out / name),
                    },
                    TABLE2_FLAG_OF,
                ),
                # Ripple also reports its best cluster model by training-split loss; the
                # runs after the first resume it (both keys are the table's own).
                **defined_by(
                    {
                        "best-by-loss": TABLE2[row]["method"] == "ripple",
                        "checkpoint-every": rounds,
                        "resume": "",
                    },
                    "table2 itself",
                ),
            },
            args.set,
            shared=("checkpoint",),
        )
        del cfg["checkpoint-every"], cfg["resume"]
        if trained is None or not trained.is_file():
            # Saves the final state, for the other alpha_test. A later alpha_test trains
            # afresh (the same seeded training) when the first one's state is not here:
            # it was read from a kept summary, on a machine that never ran it.
            cfg["checkpoint-every"] = rounds
        else:
            cfg["resume"] = str(trained)
        after = None if trained is None else str(trained)
        res, path = runner.get(cfg, legacy=[out / n for n in legacy], after=after)
        trained = trained or path.with_suffix(".resume.npz")
        found[alpha_test] = res
    return found


def zero_shot(summary: Results) -> dict[str, float | None]:
    """A run's new-client accuracy, and Ripple's best single cluster model by training loss."""
    return dict(summary["zero_shot"])


def table2_cell(runs: dict[int, Results | None], k: int, from_sweep: bool) -> dict[str, Any]:
    """One cell over seeds: zero-shot accuracy (and Ripple's best-cluster reference)."""
    done = {seed: zero_shot(res) for seed, res in runs.items() if res is not None}
    cell: dict[str, Any] = {"k": k, "k_from_sweep": from_sweep}
    cell["zero_shot_accuracy"] = seed_stats({s: z["zero_shot_accuracy"] for s, z in done.items()})
    best = {s: z["best_cluster_by_train_loss"] for s, z in done.items()}
    has_best = any(v is not None for v in best.values())
    cell["best_cluster_by_train_loss"] = seed_stats(best) if has_best else None
    cell["seeds_done"] = list(done)
    cell["seeds_missing"] = [seed for seed, res in runs.items() if res is None]
    return cell


def table2(
    args: argparse.Namespace, out: Path, runner: Runner, stamp: dict | None
) -> dict[str, Any]:
    """Every row x alpha_train x alpha_test over ``args.seeds``; Markdown and the bar chart.

    ``stamp`` ``None``: the runner is planning; no figure is drawn.
    """
    names = args.methods or list(TABLE2)
    swept: dict[str, dict[str, dict]] = {}
    if args.sweep_k:
        for alpha_train in args.alphas_train:
            first = args.alphas_test[:1]  # training is the same for every alpha_test

            def get_run(n, k, s, a=alpha_train, first=first):
                key = (n, a, k, s)
                return onboard_runs(args, out, runner, key, args.sweep_rounds, first)[first[0]]

            by_row = k_sweep(swept_rows(TABLE2, names), args.sweep_seeds, get_run, zero_shot)
            for name, entry in by_row.items():
                swept.setdefault(name, {})[f"{alpha_train:g}"] = entry
    cells: dict[str, dict[str, dict]] = {}
    for name in names:
        for alpha_train in args.alphas_train:
            entry = swept.get(name, {}).get(f"{alpha_train:g}")
            k = entry["best_k"] if entry else args.num_components
            per_seed = {
                seed: onboard_runs(
                    args, out, runner, (name, alpha_train, k, seed), args.rounds, args.alphas_test
                )
                if k is not None
                else dict.fromkeys(args.alphas_test)
                for seed in args.seeds
            }
            for alpha_test in args.alphas_test:
                runs = {seed: got[alpha_test] for seed, got in per_seed.items()}
                col = f"{alpha_train:g}/{alpha_test:g}"
                cell = table2_cell(runs, k, entry is not None)
                cell["sweep_complete"] = entry["complete"] if entry else None
                cells.setdefault(name, {})[col] = cell
                if stamp is not None:  # not while planning
                    log(f"{name} {col}: {fmt_stat(cell['zero_shot_accuracy'], '.1f', 100)}")
    cols = [f"{a:g}/{t:g}" for a in args.alphas_train for t in args.alphas_test]
    title = f"Table 2: {args.dataset}, {args.rounds} rounds, seeds {args.seeds}"
    if stamp is not None:
        save(bars_figure(cells, cols, title, stamp), args.plot)
    return {
        "cells": cells,
        "sweep": sweep_block(args, swept),
        "missing": list(runner.missing),
        "plot": args.plot,
        "markdown": table2_markdown(args, names, cells, cols, swept, runner.missing_markdown()),
    }


def _cell_text(cell: dict, n_seeds: int) -> str:
    if not cell["seeds_done"]:
        return "missing"
    text = fmt_stat(cell["zero_shot_accuracy"], ".1f", 100)
    if cell["k_from_sweep"]:
        text += f" (K={cell['k']}{'' if cell['sweep_complete'] else ', sweep unfinished'})"
    if cell["best_cluster_by_train_loss"] is not None:
        text += f" [best cluster: {fmt_stat(cell['best_cluster_by_train_loss'], '.1f', 100)}]"
    if cell["seeds_missing"]:
        text += f" ({len(cell['seeds_done'])}/{n_seeds} seeds)"
    return text


def table2_markdown(
    args: argparse.Namespace,
    names: list[str],
    cells: dict[str, dict[str, dict]],
    cols: list[str],
    swept: dict[str, dict[str, dict]],
    missing: list[str],
) -> str:
    """The table, its caption, the K sweep per alpha_train and the missing runs."""
    seeds = ", ".join(str(s) for s in args.seeds)
    md = [
        f"Table 2: {args.dataset}, {args.clients} training clients, {args.new_clients} new "
        f"clients, {args.rounds} rounds, seeds {seeds}. Zero-shot accuracy (%) of the new "
        f"clients; cells: {SPREAD}." + left_out(args.set, TABLE2, names),
        "",
        "| method | " + " | ".join(f"alpha_train/alpha_test {c}" for c in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for name in names:
        parts = [_cell_text(cells[name][c], len(args.seeds)) for c in cols]
        md.append(f"| {name} | " + " | ".join(parts) + " |")
    by_label = {
        f"{name} (alpha_train {a})": entry
        for name, per in swept.items()
        for a, entry in per.items()
    }
    md += sweep_markdown(args, by_label)
    md += missing
    return "\n".join(md)
