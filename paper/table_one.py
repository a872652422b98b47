"""Table 1 of ripple-tables: every row on one federation, over seeds, with the K sweep.

Each row runs at every seed of ``--seeds``; a row whose method sweeps K (the
registry's ``sweeps_k``: IFCA, FeSEM) runs, with ``--sweep-k``, at the best K
of the sweep (every K of ``SWEEP_K`` at ``--sweep-seeds`` and
``--sweep-rounds``, by mean final accuracy), otherwise at ``--num-components``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from paper.plots import family_figure, save
from paper.rows import (
    SWEEP_CRITERION,
    SWEEP_K,
    TABLE1,
    base_config,
    flags,
    k_sweep,
    left_out,
    row_keys,
    run_name,
    spec_of,
    sweep_block,
    swept_rows,
)
from ripple_flwr.experiments.compose import compose
from ripple_flwr.experiments.runner import Runner, log
from ripple_flwr.experiments.stats import fmt_stat, seed_curves, table1_cell
from ripple_flwr.runs.statistics import SPREAD

# Drawn in every panel of the figure, for comparison: Ripple-Strat and its oracle.
REFERENCES = ("ripple-strat-gmm-vae", "oracle")


def table1_config(
    args: argparse.Namespace, out: Path, row: str, seed: int, k: int, rounds: int
) -> dict[str, Any]:
    """The run config of one Table 1 run (the sweep's too, at its own rounds)."""
    defined = {
        **row_keys(TABLE1, row),
        **base_config(args, seed),
        **flags(
            {
                "num-components": k,
                "num-server-rounds": rounds,
                "results-path": str(out / run_name(row, k, rounds, seed)),
            }
        ),
    }
    return compose(defined, args.set, shared=("checkpoint",))


def table1_run(
    args: argparse.Namespace, out: Path, runner: Runner, row: str, seed: int, k: int, rounds: int
) -> dict[str, Any] | None:
    """One run's results (``None`` if missing under ``--reuse-only``)."""
    cfg = table1_config(args, out, row, seed, k, rounds)
    return runner.get(cfg, legacy=[out / f"{row}-seed{seed}.json"])[0]


def table1(
    args: argparse.Namespace, out: Path, runner: Runner, stamp: dict | None
) -> dict[str, Any]:
    """Every row over ``args.seeds``: cells, curves, the sweep, Markdown and the figure.

    ``stamp`` ``None``: the runner is planning; no figure is drawn.
    """
    names = args.methods or list(TABLE1)
    swept: dict[str, dict] = {}
    if args.sweep_k:
        swept = k_sweep(
            swept_rows(TABLE1, names),
            args.sweep_seeds,
            lambda n, k, s: table1_run(args, out, runner, n, s, k, args.sweep_rounds),
        )
    rows, curves = {}, {}
    for name in names:
        spec = spec_of(TABLE1, name)
        k = swept[name]["best_k"] if name in swept else args.num_components
        row: dict[str, Any] = {"method": spec.name, "family": spec.family, "k": k}
        row["k_from_sweep"] = name in swept
        row["sweep_complete"] = swept[name]["complete"] if name in swept else None
        if k is None:  # --reuse-only, and no K of its sweep has a finished run
            rows[name] = {**row, "seeds_done": [], "seeds_missing": list(args.seeds)}
            continue
        runs = {s: table1_run(args, out, runner, name, s, k, args.rounds) for s in args.seeds}
        rows[name] = {**row, **table1_cell(runs, args.target)}
        if (c := seed_curves(runs)) is not None:
            curves[name] = c
        if stamp is not None:  # not while planning
            log(f"{name}: {fmt_stat(rows[name]['final_accuracy'], '.1f', 100)}")
    title = f"Table 1: {args.dataset}, {args.clients} clients, Dir({args.alpha})"
    title += f", {args.rounds} rounds, seeds {args.seeds}"
    if curves and stamp is not None:
        families = {n: rows[n]["family"] for n in curves}
        save(family_figure(curves, families, REFERENCES, title, stamp), args.plot)
    return {
        "rows": rows,
        "curves": curves,
        "sweep": sweep_block(args, swept),
        "missing": list(runner.missing),
        "plot": args.plot if curves else None,
        "markdown": table1_markdown(args, rows, swept, runner.missing_markdown()),
    }


def _first(stats: dict, done: int) -> str:
    if stats["n"] == 0:
        return "never" if done else "missing"
    text = fmt_stat(stats, ".0f")
    return text if stats["n"] == done else f"{text} ({stats['n']}/{done} seeds; others never)"


def _ari_p_text(row: dict) -> str:
    """'; p <= hard / all': the largest permutation p-value over the seeds that kept one."""
    hard, every = row["ari_p_hard"], row["ari_p_all"]
    if not every["n"]:
        return ""
    worst = [
        max(v for v in s["per_seed"].values() if v is not None) if s["n"] else None
        for s in (hard, every)
    ]
    text = "; p <= " + " / ".join("-" if w is None else f"{w:.3f}" for w in worst)
    done = len(row["seeds_done"])
    return text if every["n"] == done else f"{text}, {every['n']}/{done} seeds"


def _row_line(name: str, row: dict, n_seeds: int) -> str:
    k = "-" if spec_of(TABLE1, name).models != "clusters" else str(row["k"])
    if row["k_from_sweep"]:
        done = "best of sweep" if row["sweep_complete"] else "best of the finished sweep"
        k = f"{k} ({done})" if row["k"] is not None else "sweep missing"
    done = len(row["seeds_done"])
    if not done:
        return f"| {name} | {row['family']} | {k} |" + " missing |" * 6 + f" 0/{n_seeds} |"
    ari = ""
    if row["ari_when"]:
        ari = f"{fmt_stat(row['ari_hard'], '.3f')} / {fmt_stat(row['ari_all'], '.3f')}"
        ari += f" ({row['ari_when']}{_ari_p_text(row)})"
    models = "/".join(str(m) for m in sorted(set(row["models"].values())))
    seeds = f"{done}/{n_seeds}"
    if row["seeds_missing"]:
        seeds += f" (missing {', '.join(str(s) for s in row['seeds_missing'])})"
    return (
        f"| {name} | {row['family']} | {k} | {fmt_stat(row['final_accuracy'], '.1f', 100)} | "
        f"{_first(row['first_round_target'], done)} | "
        f"{fmt_stat(row['bytes_ratio_vs_fedavg'], '.3f')} | "
        f"{fmt_stat(row['wall_seconds'], '.0f')} | {models} | {ari} | {seeds} |"
    )


def table1_markdown(
    args: argparse.Namespace, rows: dict[str, dict], swept: dict[str, dict], missing: list[str]
) -> str:
    """The table (best final accuracy first; missing rows last), its caption and the sweep."""
    seeds = ", ".join(str(s) for s in args.seeds)
    md = [
        f"Table 1: {args.dataset}, {args.clients} clients x {args.partition_size} images, "
        f"Dir({args.alpha}) over the {args.label_kind} labels, {args.rounds} rounds, "
        f"seeds {seeds}. "
        f"Cells: {SPREAD}. ARI: adjusted Rand index of the clusters against each client's "
        f"dominant {args.label_kind}, over the hard clients (largest share >= 0.9) / all; "
        "p: the largest over the seeds of its permutation p-value (999 seeded shuffles of the "
        "clusters, sizes kept; below 0.01: above chance at every seed), for runs whose summary "
        "kept the clusters." + left_out(args.set, TABLE1, rows),
        "",
        f"| method | family | K | final acc. (%) | first round >= {args.target:.0%} "
        f"| bytes/round vs FedAvg | wall (s) | models | ARI vs {args.label_kind}, hard / all "
        "(when) | seeds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def order(name: str) -> tuple:
        acc = rows[name].get("final_accuracy", {}).get("mean")
        return (acc is None, -(acc or 0.0))

    md += [_row_line(name, rows[name], len(args.seeds)) for name in sorted(rows, key=order)]
    md += sweep_markdown(args, {name: entry for name, entry in swept.items()})
    md += missing
    return "\n".join(md)


def sweep_markdown(args: argparse.Namespace, entries: dict[str, dict]) -> list[str]:
    """The K sweep: final accuracy per K (best in bold), labelled with its seeds and rounds."""
    if not entries:
        return []
    seeds = ", ".join(str(s) for s in args.sweep_seeds)
    md = [
        "",
        f"K sweep (seeds {seeds}, {args.sweep_rounds} rounds; best K: {SWEEP_CRITERION}): "
        "final accuracy (%) per K; the table's row runs at the best K.",
        "",
        "| method | " + " | ".join(f"K={k}" for k in SWEEP_K) + " |",
        "|---|" + "---|" * len(SWEEP_K),
    ]
    for label, entry in entries.items():
        cells = []
        for k in SWEEP_K:
            cell = entry["by_k"][str(k)]
            text = fmt_stat(cell["final_accuracy"], ".1f", 100)
            text = "missing" if cell["final_accuracy"]["n"] == 0 and cell["seeds_missing"] else text
            cells.append(f"**{text}**" if k == entry["best_k"] else text)
        md.append(f"| {label} | " + " | ".join(cells) + " |")
    return md
