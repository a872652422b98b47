"""The picture a reader checks first: who was put with whom, against the truth.

Written beside each results file as ``<results>.assignment.png``:

- methods with routing weights (Ripple, the oracle): the weights w
  (clients x K, clients sorted by their dominant component) next to the true
  mixtures pi* of the same clients in the same order;
- the clustered baselines (IFCA, FeSEM, CFL): the final assignment against
  each client's dominant class, as a table of client counts (clusters x
  classes), with its adjusted Rand index.

Methods with neither (one global model, local-only) get no picture.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def has_assignment(results: dict[str, Any]) -> bool:
    """Whether the run has routing weights or a cluster assignment to draw."""
    routing = results.get("routing") or {}
    return routing.get("weights") is not None or "assignment" in results


def contingency(labels: np.ndarray, classes: np.ndarray, k: int, c: int) -> np.ndarray:
    """(k, c) counts of clients per (cluster, dominant class)."""
    table = np.zeros((k, c), dtype=np.int64)
    np.add.at(table, (np.asarray(labels, int), np.asarray(classes, int)), 1)
    return table


def plot_assignment(results: dict[str, Any], png: str | Path) -> Path | None:
    """Draw the run's assignment picture; ``None`` when the method has no assignment."""
    if not has_assignment(results):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    truth = np.asarray(results.get("federation", {}).get("true_mixtures") or [], dtype=float)
    pids = np.asarray((results.get("clients") or {}).get("partition_ids") or [], dtype=int)
    settings = results.get("settings", {})
    title = f"{settings.get('method', '?')} on {settings.get('dataset', '')}"
    routing = results.get("routing") or {}
    if routing.get("weights") is not None:
        w = np.asarray(routing["weights"], dtype=float)
        order = np.lexsort((-w.max(axis=1), w.argmax(axis=1)))
        fig, axes = plt.subplots(1, 2, figsize=(9, 4.5), sharey=True)
        axes[0].imshow(w[order], aspect="auto", interpolation="nearest", vmin=0, vmax=1)
        axes[0].set_title(f"routing weights w (L1 to pi* {routing.get('l1', float('nan')):.3f})")
        axes[0].set_xlabel("component")
        axes[0].set_ylabel("client (sorted by dominant component)")
        if len(truth) and len(pids) == len(w):
            im = axes[1].imshow(
                truth[pids][order], aspect="auto", interpolation="nearest", vmin=0, vmax=1
            )
            axes[1].set_title("true mixtures pi*")
            axes[1].set_xlabel("class (component)")
            fig.colorbar(im, ax=axes, shrink=0.8)
    else:
        rec = results["assignment"]
        labels = np.asarray(rec["labels"], dtype=int)
        apids = np.asarray(rec["partition_ids"], dtype=int)
        fig, ax = plt.subplots(figsize=(7, 4.5))
        if len(truth) and len(labels):
            classes = truth[apids].argmax(axis=1)
            table = contingency(labels, classes, int(rec["num_models"]), truth.shape[1])
            im = ax.imshow(table, aspect="auto", interpolation="nearest", cmap="Blues")
            for (i, j), v in np.ndenumerate(table):
                if v:
                    ax.text(j, i, str(v), ha="center", va="center", fontsize=7)
            fig.colorbar(im, ax=ax, shrink=0.8, label="clients")
        ax.set_xlabel("dominant class of the client")
        ax.set_ylabel("final cluster")
        ari = rec.get("ari_all")
        title += f": final clusters ({rec['num_models']}), ARI " + (
            "n/a" if ari is None else f"{ari:.3f}"
        )
    fig.suptitle(title)
    png = Path(png)
    fig.savefig(png, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return png
