"""Figures of the tables: Table 1's small multiples by family, Table 2's bars.

Every figure names, in its footer, the machine and the git commit it was made on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from ripple_flwr.experiments.stamp import ROOT, machine_stamp, stamp_text
from ripple_flwr.methods.registry import Family

__all__ = [
    "ROOT",
    "bars_figure",
    "family_figure",
    "machine_stamp",
    "margin_figure",
    "save",
    "stamp_text",
]

BAND = "band: min-max over seeds"
REFERENCE_STYLE = {"color": "0.55", "linewidth": 0.9}
# Distinct colours for a panel's own methods (grey is the references'); linestyles beyond.
PALETTE = [c for i, c in enumerate(matplotlib.colormaps["tab10"].colors) if i != 7] + [
    "black",
    "gold",
    "navy",
]


def _style(i: int) -> dict[str, Any]:
    lap = i // len(PALETTE)
    return {"color": PALETTE[i % len(PALETTE)], "linestyle": ("-", "--", ":")[lap % 3]}


def family_figure(
    curves: Mapping[str, Mapping[str, Any]],
    families: Mapping[str, str],
    references: Sequence[str],
    title: str,
    stamp: Mapping[str, Any],
) -> Figure:
    """One panel per family present; each row drawn in its family's panel.

    ``curves`` are :func:`tables_stats.seed_curves` per row; ``families`` each
    row's family. The rows in ``references`` (if they have curves) are drawn
    thin and grey in every other panel too, labelled ``(reference)``.
    """
    present = [f for f in get_args(Family) if any(families[n] == f for n in curves)]
    present += sorted({families[n] for n in curves} - set(present))
    cols = min(2, len(present))
    rows = -(-len(present) // cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(6.5 * cols, 4.2 * rows), sharex=True, sharey=True, squeeze=False
    )
    refs = [r for r in references if r in curves]
    for ax, family in zip(axes.flat, present, strict=False):
        for ref in refs:
            if families[ref] != family:
                c = curves[ref]
                ax.plot(c["rounds"], _arr(c["mean"]), label=f"{ref} (reference)", **REFERENCE_STYLE)
        own = [n for n in curves if families[n] == family]
        for i, name in enumerate(own):
            c, style = curves[name], _style(i)
            ax.plot(c["rounds"], _arr(c["mean"]), label=name, linewidth=1.4, **style)
            if len(c["per_seed"]) > 1:
                ax.fill_between(
                    c["rounds"], _arr(c["min"]), _arr(c["max"]), color=style["color"], alpha=0.15
                )
        ax.set_title(family)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2 if len(own) > 6 else 1, loc="lower right")
    for ax in axes.flat[len(present) :]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("round")
    for ax in axes[:, 0]:
        ax.set_ylabel("personalised accuracy (weighted mean)")
    many = any(len(c["per_seed"]) > 1 for c in curves.values())
    fig.suptitle(f"{title}; {BAND if many else 'one seed: no band'}")
    _footer(fig, stamp)
    return fig


def bars_figure(
    cells: Mapping[str, Mapping[str, Mapping[str, Any]]],
    columns: Sequence[str],
    title: str,
    stamp: Mapping[str, Any],
) -> Figure:
    """Grouped bars: one group per alpha_train/alpha_test column, one bar per method.

    Heights are the mean zero-shot accuracy over seeds, error bars +- 2 sigma
    (sample std, ddof = 1) where there are two seeds or more; a missing cell has no bar,
    and a method with no finished cell is left out of the legend (its slot stays).
    """
    names = list(cells)
    width = 0.8 / max(len(names), 1)
    x = np.arange(len(columns))
    fig, ax = plt.subplots(figsize=(max(7.0, 2.0 + 0.35 * len(columns) * len(names)), 4.5))
    for i, name in enumerate(names):
        stats = [(cells[name].get(c) or {}).get("zero_shot_accuracy") or {} for c in columns]
        mean = [s.get("mean") for s in stats]
        err = [2 * s["sigma"] if s.get("sigma") is not None else 0.0 for s in stats]
        shown = [j for j, m in enumerate(mean) if m is not None]
        if not shown:  # no finished run: no bar, and no legend entry in a colour it never drew
            continue
        ax.bar(
            x[shown] + (i - (len(names) - 1) / 2) * width,
            [100 * mean[j] for j in shown],
            width,
            yerr=[100 * err[j] for j in shown] if any(err[j] for j in shown) else None,
            capsize=2,
            label=name,
            color=PALETTE[i % len(PALETTE)],
        )
    ax.set_xticks(x, [f"alpha_train/alpha_test\n{c}" for c in columns])
    ax.set_ylabel("zero-shot accuracy (%)")
    seeds = {
        len(((cells[n].get(c) or {}).get("zero_shot_accuracy") or {}).get("per_seed") or {})
        for n in names
        for c in columns
    }
    many = max(seeds, default=1) > 1
    ax.set_title(
        f"{title}; "
        + ("error bars ± 2 sigma over seeds (sample std)" if many else "one seed: no error bars")
    )
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    _footer(fig, stamp)
    return fig


def margin_figure(
    cells: Mapping[str, Mapping[str, Any]],
    metrics: Sequence[str],
    title: str,
    stamp: Mapping[str, Any],
) -> Figure:
    """One panel per metric: the best Ripple variant's margin over the best other method.

    Bars are the mean paired margin over seeds (points of accuracy), error bars the
    half-width of its Student-t 95% interval where there are two seeds or more, none
    for one seed; each bar is labelled with the two rows compared. A cell without a
    margin has no bar.
    """
    names = list(cells)
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4.2), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        margins = [cells[c]["margin"][metric] for c in names]
        shown = [i for i, m in enumerate(margins) if m and m["mean"] is not None]
        means = [100 * margins[i]["mean"] for i in shown]
        errs = [100 * (margins[i].get("half") or 0.0) for i in shown]
        colours = [PALETTE[2] if v >= 0 else PALETTE[3] for v in means]
        ax.bar(shown, means, yerr=errs if any(errs) else None, capsize=3, color=colours)
        for i, v in zip(shown, means, strict=True):
            ax.annotate(
                f"{margins[i].get('ripple', '')} vs {margins[i]['best_other']}", (i, v),
                ha="center", fontsize=6,
                xytext=(0, 3 if v >= 0 else -10), textcoords="offset points",
            )  # fmt: skip
        ax.axhline(0, color="0.3", linewidth=0.8)
        ax.set_xticks(range(len(names)), names, rotation=20, fontsize=8)
        ax.set_title(metric.replace("_", " "))
        ax.set_ylabel("best Ripple variant minus the best other method (points)")
        ax.grid(axis="y", alpha=0.3)
    seeds = {len(m["per_seed"]) for c in cells.values() for m in c["margin"].values() if m}
    many = max(seeds, default=1) > 1
    bars = "error bars: paired t 95% interval over seeds" if many else "one seed: no bars"
    fig.suptitle(f"{title}; {bars}")
    _footer(fig, stamp)
    return fig


def save(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _footer(fig: Figure, stamp: Mapping[str, Any]) -> None:
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.text(0.01, 0.005, stamp_text(stamp), fontsize=7, color="0.4")


def _arr(values: Sequence[float | None]) -> np.ndarray:
    return np.asarray([np.nan if v is None else v for v in values], dtype=float)
