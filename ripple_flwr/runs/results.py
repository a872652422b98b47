"""Results of one run: byte accounting, routing metrics, the JSON file and its plot.

Bytes are counted from the records actually sent and received (sum of the
arrays' ``nbytes``: shape x item size, without serialisation headers), so
per-round traffic of Ripple and FedAvg can be compared directly.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ripple_flwr.io.jsonable import to_jsonable

# Byte accounting lives in ripple_flwr.io.payload (the wire protocol counts with it too).
from ripple_flwr.io.payload import array_nbytes as array_nbytes
from ripple_flwr.io.payload import arrayrecord_nbytes as arrayrecord_nbytes
from ripple_flwr.io.payload import message_nbytes as message_nbytes

log = logging.getLogger("flwr.ripple")

RESULTS_VERSION = 1


# -- statistics ---------------------------------------------------------------------------
def client_stats(accuracy: Iterable[float], num_examples: Iterable[int]) -> dict[str, float]:
    """Sample-weighted mean, plain mean, std and range of per-client accuracies."""
    acc = np.asarray(list(accuracy), dtype=np.float64)
    n = np.asarray(list(num_examples), dtype=np.float64)
    if acc.size == 0:
        return {
            "weighted_mean": math.nan,
            "mean": math.nan,
            "std": math.nan,
            "min": math.nan,
            "max": math.nan,
        }
    return {
        "weighted_mean": float(np.average(acc, weights=n)) if n.sum() > 0 else float(acc.mean()),
        "mean": float(acc.mean()),
        "std": float(acc.std()),
        "min": float(acc.min()),
        "max": float(acc.max()),
    }


HARD_SHARE = 0.9  # a client is 'hard' (near one-hot) when its largest true share is at least this


def hard_ari(
    truth: np.ndarray, labels: np.ndarray, hard: float = HARD_SHARE
) -> tuple[float | None, int]:
    """ARI of cluster ``labels`` against argmax pi*, over the clients with max pi* >= ``hard``.

    Returns ``(ari, number of such clients)``; the ARI is ``None`` when fewer
    than two clients are hard.
    """
    from sklearn.metrics import adjusted_rand_score

    pi = np.asarray(truth, dtype=np.float64)
    labels = np.asarray(labels)
    mask = pi.max(axis=1) >= hard if len(pi) else np.zeros(0, bool)
    if int(mask.sum()) < 2:
        return None, 0
    return float(adjusted_rand_score(pi[mask].argmax(1), labels[mask])), int(mask.sum())


def _pairs(counts: np.ndarray) -> np.ndarray:
    """Sum over the last axis of C(count, 2): the pairs inside each cell."""
    c = counts.astype(np.float64)
    return (c * (c - 1) / 2).sum(axis=-1)


def ari_permutation_test(
    truth: np.ndarray, labels: np.ndarray, permutations: int = 999, seed: int = 0
) -> dict[str, Any] | None:
    """How far the ARI of ``labels`` against ``truth`` (two labelings) stands above chance.

    The null keeps both labelings' group sizes and pairs them at random:
    ``permutations`` seeded shuffles of ``labels``. The ARI is a monotone
    function of the pairs inside the contingency cells once the margins are
    fixed, so each shuffle is scored by that count, all in one ``bincount``.
    Returns the observed ARI, the permutation p-value (1 + shuffles at least
    as high) / (1 + permutations) and the null's 99th percentile; ``None``
    when the ARI is undefined (fewer than two clients, or both labelings put
    everyone in one group, or both put everyone apart).
    """
    t = np.unique(np.asarray(truth), return_inverse=True)[1].ravel()
    lab = np.unique(np.asarray(labels), return_inverse=True)[1].ravel()
    n, nt, nl = t.size, int(t.max(initial=-1)) + 1, int(lab.max(initial=-1)) + 1
    if n < 2 or lab.size != n:
        return None
    pa = float(_pairs(np.bincount(t, minlength=nt)))
    pb = float(_pairs(np.bincount(lab, minlength=nl)))
    expected = pa * pb / (n * (n - 1) / 2)
    spread = (pa + pb) / 2 - expected
    if spread <= 0:
        return None
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xA41]))
    shuffled = rng.permuted(np.broadcast_to(lab, (permutations, n)), axis=1)
    rows = np.arange(permutations)[:, None] * (nt * nl)
    cells = np.bincount((rows + t * nl + shuffled).ravel(), minlength=permutations * nt * nl)
    null = (_pairs(cells.reshape(permutations, nt * nl)) - expected) / spread
    observed = (float(_pairs(np.bincount(t * nl + lab, minlength=nt * nl))) - expected) / spread
    exceed = int(np.count_nonzero(null >= observed - 1e-12))
    return {
        "ari": observed,
        "p_value": (1 + exceed) / (1 + permutations),
        "null_q99": float(np.quantile(null, 0.99)),
        "permutations": permutations,
        "clients": n,
    }


def routing_metrics(
    weights: np.ndarray, truth: np.ndarray, hard: float = HARD_SHARE
) -> dict[str, Any]:
    """Routing error mean_k ||w_k - pi*_k||_1 and, for near-one-hot clients, the ARI.

    The adjusted Rand index of argmax w vs argmax pi* is computed over the
    clients whose largest true proportion is at least ``hard`` (hard
    clusters); ``None`` when fewer than two such clients exist.
    """
    w = np.asarray(weights, dtype=np.float64)
    pi = np.asarray(truth, dtype=np.float64)
    if w.shape != pi.shape:
        raise ValueError(f"weights {w.shape} and true mixtures {pi.shape} differ in shape")
    ari, n_hard = hard_ari(pi, w.argmax(axis=1) if len(w) else np.zeros(0, int), hard)
    return {
        "l1": float(np.abs(w - pi).sum(axis=1).mean()) if len(w) else math.nan,
        "ari": ari,
        "ari_clients": n_hard,
        "ari_threshold": hard,
    }


def finished_results(
    path: str | Path, run_config: dict[str, Any], ignore: tuple[str, ...] = ("results-path",)
) -> dict[str, Any] | None:
    """A run's results file when it exists and was written by a run with ``run_config``.

    Lets benchmarks pick up runs finished earlier (another session, another seed);
    keys in ``ignore`` (paths) need not match.
    """
    path = Path(path)
    if not path.is_file():
        return None
    res = json.loads(path.read_text())
    settings = res.get("settings", {})
    same = all(str(settings.get(k)) == str(v) for k, v in run_config.items() if k not in ignore)
    return res if same else None


def tail_mean(values: list[float], last: int = 3) -> float:
    """Mean of the last few evaluations (single evaluations are noisy).

    An evaluation that scored no client (``None`` or NaN) counts as missing; the
    mean never reaches back past the last ``last`` evaluations, so a run whose
    final evaluations scored nobody has no headline (NaN), not an older one.
    """
    vals = [v for v in values[-last:] if v is not None and not math.isnan(v)]
    return float(np.mean(vals)) if vals else math.nan


# -- files --------------------------------------------------------------------------------
def default_results_path(method: str, seed: int, root: str | Path = "outputs") -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"ripple-{method}-seed{seed}-{stamp}.json"


def status_path(results_path: str | Path) -> Path:
    """``<results>.status``: where a run says how it stands (running, failed, completed)."""
    return Path(results_path).with_suffix(".status")


def write_status(results_path: str | Path, status: str, **info: Any) -> Path | None:
    """Write ``<results>.status`` (JSON, atomically): the run's state for whoever looks.

    ``flwr run`` exits 0 whether or not the run failed; this file (beside the results
    file, replaced by every run of that results-path) says ``running`` (with the
    server's process id), ``failed`` (with the error) or ``completed``. A status that
    cannot be written is logged, never raised: it must not fail the run.
    """
    path = status_path(Path(results_path).expanduser().resolve())
    payload = {
        "status": status,
        "results": str(Path(results_path).expanduser().resolve()),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **to_jsonable(info),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.unlink(missing_ok=True)  # a leftover (or a link placed there) is never written through
        tmp.write_text(json.dumps(payload, indent=2))
        tmp.replace(path)
    except OSError as err:
        log.warning("could not write the run status %s: %s", path, err)
        return None
    return path


def write_results(path: str | Path, results: dict[str, Any], plot: bool = True) -> Path:
    """Write the results JSON (atomically) and, next to it, PNGs of accuracy and assignment."""
    path = Path(path).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"results_version": RESULTS_VERSION, **to_jsonable(results)}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    tmp.replace(path)
    if plot:
        from ripple_flwr.runs.plots import plot_assignment

        for draw, suffix in ((plot_accuracy, ".png"), (plot_assignment, ".assignment.png")):
            try:
                draw(payload, path.with_suffix(suffix))
            except Exception as err:  # a plot must never lose the results
                log.warning("could not plot %s: %s", path.with_suffix(suffix), err)
    return path


def plot_accuracy(results: dict[str, Any], png: str | Path) -> Path:
    """Personalised accuracy (weighted mean, +/- std band) over rounds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evals = results.get("evaluations", [])
    rounds = [e["round"] for e in evals]
    mean = np.array([e["accuracy"]["weighted_mean"] or np.nan for e in evals], dtype=float)
    std = np.array([e["accuracy"]["std"] or 0.0 for e in evals], dtype=float)
    fig, ax = plt.subplots(figsize=(6, 4))
    settings = results.get("settings", {})
    label = settings.get("method", "?")
    if label == "ripple":
        label += f"-{settings.get('sampling', '')} ({settings.get('router', '')})"
    ax.plot(rounds, mean, marker="o", label=label)
    ax.fill_between(rounds, mean - std, mean + std, alpha=0.2)
    ax.set_xlabel("round")
    ax.set_ylabel("personalised accuracy")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title(f"{settings.get('dataset', '')}: {settings.get('num-partitions', '')} clients")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return Path(png)
