"""Before/after curves of the baselines issue 22 changed.

Reads committed table JSON lines only (trains nothing): the "before" curve of
each method is its seed-0 row of the earlier Table 1
(``docs/results/table1_fashion_300rounds_seed0.json``), the "after" curves
are the seed-0 runs in ``docs/results/baselines_seed0/`` (same protocol:
Fashion-MNIST, 100 x 200 images, Dir(0.1), 10 clients a round, the paper's
CNN, E = 1). One panel per method; each curve's label carries its final
accuracy (mean of the last three evaluations) and, where the run was
stamped, the commit of its code. The footer names the machine and commit the
figure was drawn on, and the machines and commits the runs were made on.

A second figure (``--out-options``) does the same for the three baselines
whose change is an option with the references' default (pFedMe's L2 term
``pfedme-mu``, SCAFFOLD's and FedDyn's gradient clip): "before" is the
seed-42 run with the option off (``docs/results/options_off/``), "after" the
seed-42 run of the three-seed Table 1, same protocol at 300 rounds.

    python benchmarks/baselines_before_after.py --out docs/baselines-before-after.png \
        --out-options docs/baselines-options-before-after.png
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from tables_plots import PALETTE, machine_stamp, stamp_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
BEFORE = RESULTS / "table1_fashion_300rounds_seed0.json"
AFTER = RESULTS / "baselines_seed0"
# (panel method, [(JSON under AFTER, curve label)]): the settings are those of docs/results.md.
PANELS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "fesem",
        [
            ("fesem_authors.json", "after: authors' K-means every 10 rounds"),
            ("fesem_update_points_100rounds.json", "fesem-points = update"),
            ("fesem_converged_kmeans_100rounds.json", "fesem-kmeans-iters = 0"),
            ("fesem_update_points_converged_kmeans_100rounds.json", "both"),
        ],
    ),
    (
        "cfl",
        [
            ("cfl_default.json", "after (default): split first, eps 0.35 / 0.9"),
            (
                "cfl_reference_eps_paper_threshold.json",
                "the references' eps 0.4 / 1.6 (never splits)",
            ),
            ("cfl_paper_threshold.json", "eps 0.35 / 0.9, max similarity 0.5 (same curve)"),
        ],
    ),
    ("perfedavg", [("perfedavg.json", "after: plain-SGD beta step, beta = lr")]),
    (
        "ifca",
        [
            ("ifca_first_draw_100rounds.json", "after: first draw (default)"),
            ("ifca_redraw_100rounds.json", "ifca-init-balance = 0.4 (re-draw)"),
        ],
    ),
]
# Runs whose JSON predates the machine stamp: their code's commit as docs/results.md records it.
RECORDED_COMMIT = {"fesem_authors.json": "00058a1", BEFORE.name: "61aa778"}
OPTIONS_OFF = RESULTS / "options_off"
TABLE1 = RESULTS / "table1_fashion_300rounds_3seeds.json"
# (method, JSON under OPTIONS_OFF, its label, the Table 1 row's label) at seed 42.
OPTION_PANELS: list[tuple[str, str, str, str]] = [
    ("pfedme", "pfedme_nomu.json", "before: pfedme-mu = 0", "after: pfedme-mu = 1e-3"),
    (
        "scaffold",
        "scaffold_noclip.json",
        "before: scaffold-grad-clip = 0",
        "after: scaffold-grad-clip = 10",
    ),
    (
        "feddyn",
        "feddyn_noclip.json",
        "before: feddyn-grad-clip = 0",
        "after: feddyn-grad-clip = 10",
    ),
]
BEFORE_LABEL = {
    "fesem": "before: K distinct initialisations, nearest centre",
    "cfl": "before: average then split, eps 0.35 / 0.9",
    "perfedavg": "before: beta 1e-3 through momentum",
    "ifca": "before (K = 10, 300 rounds)",
}


def curve(
    table: dict[str, Any], method: str, seed: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """A row's (rounds, accuracy) at ``seed`` (None: the table's only seed), either JSON version."""
    entry = table["curves"][method]
    if isinstance(entry, list):  # the earlier script: [rounds, accuracies]
        rounds, acc = entry
    else:
        rounds = entry["rounds"]
        (acc,) = entry["per_seed"].values() if seed is None else (entry["per_seed"][seed],)
    return np.asarray(rounds, dtype=float), np.asarray(acc, dtype=float)


def final(acc: np.ndarray) -> float:
    return float(np.mean(acc[-3:]))


def run_stamp(table: dict[str, Any], name: str) -> str:
    machine = table.get("machine")
    return machine["commit"] if machine else RECORDED_COMMIT.get(name, "unstamped")


def style_panel(ax: Any, method: str) -> None:
    ax.set_title(method)
    ax.set_xlabel("round")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")


def finish(
    fig: Any, title: str, footer: str, out: Path, rect: tuple[float, float, float, float]
) -> Path:
    """Title, the machine-and-commit footer (plus ``footer``), layout, and the PNG at ``out``."""
    fig.suptitle(title, fontsize=10)
    fig.text(0.01, 0.005, stamp_text(machine_stamp()) + footer, fontsize=7, color="0.4")
    fig.tight_layout(rect=rect)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def draw(out: Path) -> Path:
    before = json.loads(BEFORE.read_text())
    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharey=True)
    made_on: set[str] = set()
    for ax, (method, afters) in zip(axes.flat, PANELS, strict=True):
        rounds, acc = curve(before, method)
        before_commit = run_stamp(before, BEFORE.name)
        ax.plot(
            rounds,
            acc,
            color="0.45",
            linestyle="--",
            label=f"{BEFORE_LABEL[method]}: {100 * final(acc):.1f}% [{before_commit}]",
        )
        for colour, (name, label) in zip(PALETTE, afters, strict=False):
            table = json.loads((AFTER / name).read_text())
            rounds, acc = curve(table, method)
            stamp = run_stamp(table, name)
            if table.get("machine"):
                m = table["machine"]
                made_on.add(f"{m['node']} ({m['processor']}, {m['cpus']} CPUs)")
            ax.plot(rounds, acc, color=colour, label=f"{label}: {100 * final(acc):.1f}% [{stamp}]")
        style_panel(ax, method)
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy (mean over clients)")
    title = (
        "Baselines before and after issue 22: Fashion-MNIST, 100 x 200, Dir(0.1), "
        "10 clients a round, seed 0 (label: final accuracy [commit of the run])"
    )
    runs_on = "; runs made on " + ", ".join(sorted(made_on)) if made_on else ""
    return finish(fig, title, runs_on, out, rect=(0, 0.02, 1, 0.97))


def draw_options(out: Path) -> Path:
    """pFedMe, SCAFFOLD and FedDyn at seed 42 with their new option off and at its default."""
    table1 = json.loads(TABLE1.read_text())
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharey=True)
    for ax, (method, name, off_label, on_label) in zip(axes, OPTION_PANELS, strict=True):
        off = json.loads((OPTIONS_OFF / name).read_text())
        for table, seed, label, colour, style in (
            (off, None, f"{off_label} [{run_stamp(off, name)}]", "0.45", "--"),
            (table1, "42", on_label, PALETTE[0], "-"),
        ):
            rounds, acc = curve(table, method, seed)
            label = f"{label}: {100 * final(acc):.1f}%"
            ax.plot(rounds, acc, color=colour, linestyle=style, label=label)
        style_panel(ax, method)
    axes[0].set_ylabel("accuracy (mean over clients)")
    title = (
        "The references' options on and off: Fashion-MNIST, 100 x 200, Dir(0.1), "
        "10 clients a round, 300 rounds, seed 42 (label: final accuracy)"
    )
    note = f"; Table 1 assembled at {run_stamp(table1, TABLE1.name)}"
    return finish(fig, title, note, out, rect=(0, 0.03, 1, 0.95))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "baselines-before-after.png")
    parser.add_argument(
        "--out-options",
        type=Path,
        default=ROOT / "outputs" / "baselines-options-before-after.png",
    )
    args = parser.parse_args(argv)
    print(draw(args.out))
    print(draw_options(args.out_options))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
