"""Before/after curves of the baselines issue 22 changed (FeSEM, CFL, Per-FedAvg, IFCA).

Reads committed table JSON lines only (trains nothing): the "before" curve of
each method is its seed-0 row of the earlier Table 1
(``docs/results/table1_fashion_300rounds_seed0.json``), the "after" curves
are the seed-0 runs in ``docs/results/baselines_seed0/`` (same protocol:
Fashion-MNIST, 100 x 200 images, Dir(0.1), 10 clients a round, the paper's
CNN, E = 1). One panel per method; each curve's label carries its final
accuracy (mean of the last three evaluations) and, where the run was
stamped, the commit of its code. The footer names the machine and commit the
figure was drawn on, and the machines and commits the runs were made on.

    python benchmarks/baselines_before_after.py --out docs/baselines-before-after.png
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
BEFORE_LABEL = {
    "fesem": "before: K distinct initialisations, nearest centre",
    "cfl": "before: average then split, eps 0.35 / 0.9",
    "perfedavg": "before: beta 1e-3 through momentum",
    "ifca": "before (K = 10, 300 rounds)",
}


def curve(table: dict[str, Any], method: str) -> tuple[np.ndarray, np.ndarray]:
    """A row's (rounds, accuracy) at seed 0, from either version of the table JSON."""
    entry = table["curves"][method]
    if isinstance(entry, list):  # the earlier script: [rounds, accuracies]
        rounds, acc = entry
    else:
        rounds = entry["rounds"]
        (acc,) = entry["per_seed"].values()
    return np.asarray(rounds, dtype=float), np.asarray(acc, dtype=float)


def final(acc: np.ndarray) -> float:
    return float(np.mean(acc[-3:]))


def run_stamp(table: dict[str, Any], name: str) -> str:
    machine = table.get("machine")
    return machine["commit"] if machine else RECORDED_COMMIT.get(name, "unstamped")


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
        ax.set_title(method)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy (mean over clients)")
    fig.suptitle(
        "Baselines before and after issue 22: Fashion-MNIST, 100 x 200, Dir(0.1), "
        "10 clients a round, seed 0 (label: final accuracy [commit of the run])",
        fontsize=10,
    )
    runs_on = "; runs made on " + ", ".join(sorted(made_on)) if made_on else ""
    fig.text(0.01, 0.005, stamp_text(machine_stamp()) + runs_on, fontsize=7, color="0.4")
    fig.tight_layout(rect=(0, 0.02, 1, 0.97))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "baselines-before-after.png")
    args = parser.parse_args(argv)
    print(draw(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
