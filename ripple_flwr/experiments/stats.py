"""Table cells of ripple-tables: what one run gives, statistics over seeds, best K.

A cell keeps every seed's number and prints the mean +- 2 sigma over the seeds
(the seed spread, :mod:`ripple_flwr.runs.statistics`); a single seed prints its
value alone. Nothing here trains: :func:`summarise` reads a run's results dict
(``ripple_flwr.runs.results``) once into its *summary*, the few numbers and the
curve the tables use, and every cell is built from summaries. A summary is a
few KB, so ``--keep`` commits them and a table can be rebuilt on a machine
that never held the results files.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from ripple_flwr.runs.results import HARD_SHARE, ari_permutation_test, hard_ari, tail_mean
from ripple_flwr.runs.statistics import seed_stats

# The numbers of a Table 1 cell that are summarised over seeds.
TABLE1_METRICS = (
    "final_accuracy",
    "first_round_target",
    "bytes_ratio_vs_fedavg",
    "ari_hard",
    "ari_all",
    "ari_p_hard",
    "ari_p_all",
    "wall_seconds",
)


def _number(v: Any) -> float | None:
    """``v`` as a float; ``None`` for a missing value (None or NaN)."""
    if v is None:
        return None
    v = float(v)
    return None if math.isnan(v) else v


def fmt(v: float | None, spec: str = ".1f", scale: float = 1.0) -> str:
    """``v`` formatted (times ``scale``), or ``n/a``."""
    v = _number(v)
    return "n/a" if v is None else format(v * scale, spec)


def fmt_stat(stats: Mapping[str, Any] | None, spec: str = ".1f", scale: float = 1.0) -> str:
    """``mean ± 2 sigma`` of a cell, its one value alone, or ``n/a``."""
    if not stats or stats["mean"] is None:
        return "n/a"
    text = fmt(stats["mean"], spec, scale)
    if stats["sigma"] is not None:
        text += f" ± {fmt(2 * stats['sigma'], spec, scale)}"
    return text


def best_k(by_k: Mapping[int, Mapping[str, Any]], key: str = "final_accuracy") -> int | None:
    """The K of the highest mean ``key`` over its seeds (ties: the smaller K); None if none ran."""
    done = [(k, cell[key]["mean"]) for k, cell in by_k.items() if cell[key]["mean"] is not None]
    if not done:
        return None
    return min(done, key=lambda kv: (-kv[1], kv[0]))[0]


# -- one run ----------------------------------------------------------------------------------
def curve(results: Mapping[str, Any]) -> tuple[list[int], list[float]]:
    """(rounds, weighted-mean personalised accuracy) of one run; NaN where nobody was scored."""
    acc = results["accuracy_per_round"]
    rounds = sorted(int(r) for r in acc)
    return rounds, [_nan(acc[str(r)]["weighted_mean"]) for r in rounds]


def _nan(v: Any) -> float:
    n = _number(v)
    return math.nan if n is None else n


Clusters = tuple[np.ndarray, np.ndarray, str]  # (true mixtures, cluster labels, when)


def cluster_labels(res: Mapping[str, Any]) -> Clusters | None:
    """(true mixtures, cluster labels, when) of the run's clients; ``None`` for a run without.

    The truth is the results file's ``federation.true_label_mixtures``: the
    clients' class mixtures, or their domain mixtures with ``label-kind =
    "domain"`` (the rotation of ``rotated-*``), unfolded, so a run at K = 2
    is scored against the dominant class and not class mod 2 (results files
    from before it was recorded: ``true_mixtures``, folded to the run's K).
    Ripple's clusters are argmax w before round 1, a clustered baseline's its
    assignment at the end.
    """
    fed = res["federation"]
    truth = np.asarray(fed.get("true_label_mixtures") or fed["true_mixtures"], dtype=float)
    if "assignment" in res:
        rec = res["assignment"]
        labels, pids = np.asarray(rec["labels"]), np.asarray(rec["partition_ids"])
        return truth[pids], labels, "end"
    if (res.get("routing") or {}).get("weights") is not None:
        w = np.asarray(res["routing"]["weights"], dtype=float)
        return (
            truth[np.asarray(res["clients"]["partition_ids"])],
            w.argmax(axis=1),
            "before round 1",
        )
    return None


def _aris(found: Clusters | None) -> tuple[float | None, float | None, str]:
    if found is None:
        return None, None, ""
    truth, labels, when = found
    hard, _ = hard_ari(truth, labels)
    every, _ = hard_ari(truth, labels, hard=0.0)
    return hard, every, when


def clusters_ari(res: Mapping[str, Any]) -> tuple[float | None, float | None, str]:
    """(ARI over near-one-hot clients, ARI over all clients, when) against the dominant label."""
    return _aris(cluster_labels(res))


def ari_tests(found: Clusters | None, seed: int) -> dict[str, Any] | None:
    """The clusters, and permutation tests of their ARI against chance (hard clients, all).

    ``found`` is :func:`cluster_labels`'s answer. Kept in the summary so the
    test can be redone from it: each client's cluster, dominant true label and
    whether it is hard (largest true share >= ``HARD_SHARE``, as ``hard_ari``).
    The shuffles are seeded by the run's ``seed``.
    """
    if found is None:
        return None
    truth, labels, _ = found
    dominant, hard = truth.argmax(axis=1), truth.max(axis=1) >= HARD_SHARE
    return {
        "labels": [int(v) for v in labels],
        "dominant": [int(v) for v in dominant],
        "hard": [int(v) for v in hard],
        "hard_test": ari_permutation_test(dominant[hard], labels[hard], seed=seed),
        "all_test": ari_permutation_test(dominant, labels, seed=seed),
    }


def bytes_ratio(res: Mapping[str, Any]) -> float:
    """Mean bytes per round (down + up) over FedAvg's: 2 x clients-per-round models."""
    per_round = [v["down"] + v["up"] for v in res["bytes_per_round"].values()]
    fedavg = 2 * res["settings"]["clients-per-round"] * res["model_bytes"]
    return float(np.mean(per_round)) / fedavg


SUMMARY = "ripple-flwr table run summary"  # the ``kind`` of a summary file


def is_summary(res: Mapping[str, Any]) -> bool:
    """Whether ``res`` is a run's summary (:func:`summarise`) rather than its results dict."""
    return res.get("kind") == SUMMARY


def summarise(res: Mapping[str, Any]) -> dict[str, Any]:
    """What the tables read of one finished run, with its settings (so ``--reuse`` can match it).

    The accuracy curve and its final accuracy (mean of the last 3 evaluations),
    bytes per round against FedAvg's, the ARI of its clusters, wall time, models
    held and, for a run with new clients, the zero-shot numbers.
    """
    if is_summary(res):
        return dict(res)
    rounds, acc = curve(res)
    found = cluster_labels(res)  # once: the ARIs and their tests read the same clusters
    hard, every, when = _aris(found)
    out: dict[str, Any] = {
        "kind": SUMMARY,
        "settings": dict(res["settings"]),
        "curve": {"rounds": rounds, "accuracy": [_number(a) for a in acc]},
        "final_accuracy": _number(tail_mean(acc)),
        "bytes_ratio_vs_fedavg": bytes_ratio(res),
        "ari_hard": hard,
        "ari_all": every,
        "ari_when": when,
        "clusters": ari_tests(found, int(res["settings"].get("seed", 0))),
        "wall_seconds": float(res["timings"]["total"]),
        "models": int(res["num_models"]),
    }
    if (res.get("zero_shot") or {}).get("accuracy"):  # new clients were onboarded (Table 2)
        ref = res["zero_shot"].get("best_by_loss")
        out["zero_shot"] = {
            "zero_shot_accuracy": res["zero_shot"]["accuracy"]["weighted_mean"],
            "best_cluster_by_train_loss": ref["accuracy"]["weighted_mean"] if ref else None,
        }
    return out


def summary_curve(summary: Mapping[str, Any]) -> tuple[list[int], list[float]] | None:
    """(rounds, accuracy) of a summary, NaN where nobody was scored; ``None`` if it kept none."""
    c = summary.get("curve")
    if not c:
        return None
    return list(c["rounds"]), [_nan(a) for a in c["accuracy"]]


def ari_p(summary: Mapping[str, Any], part: str) -> float | None:
    """The permutation p-value of a summary's ARI over ``part`` (hard / all); None if not kept."""
    test = (summary.get("clusters") or {}).get(f"{part}_test")
    return None if test is None else test["p_value"]


def run_metrics(summary: Mapping[str, Any], target: float) -> dict[str, Any]:
    """The Table 1 numbers of one finished run (its summary)."""
    rounds, acc = summary_curve(summary) or ([], [])
    hit = [r for r, a in zip(rounds, acc, strict=True) if a >= target]
    return {
        "final_accuracy": summary["final_accuracy"],
        "first_round_target": hit[0] if hit else None,
        **{key: summary.get(key) for key in ("bytes_ratio_vs_fedavg", "ari_hard", "ari_all")},
        "ari_when": summary.get("ari_when") or "",
        **{f"ari_p_{part}": ari_p(summary, part) for part in ("hard", "all")},
        "wall_seconds": summary.get("wall_seconds"),
        "models": summary.get("models"),
    }


def table1_cell(runs: Mapping[int, Mapping[str, Any] | None], target: float) -> dict[str, Any]:
    """One Table 1 row over seeds: each metric's per-seed values, mean and sigma.

    ``runs`` maps each seed to its run's summary, ``None`` where the run is missing
    (``--reuse-only``): those seeds are listed in ``seeds_missing``.
    """
    done = {seed: run_metrics(res, target) for seed, res in runs.items() if res is not None}
    cell: dict[str, Any] = {
        "seeds_done": list(done),
        "seeds_missing": [seed for seed, res in runs.items() if res is None],
    }
    for key in TABLE1_METRICS:
        cell[key] = seed_stats({seed: m[key] for seed, m in done.items()})
    cell["models"] = {str(seed): m["models"] for seed, m in done.items()}
    cell["ari_when"] = next((m["ari_when"] for m in done.values() if m["ari_when"]), "")
    return cell


def seed_curves(runs: Mapping[int, Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """Every seed's accuracy curve, and their mean, min and max per evaluation (None if none ran).

    ``runs`` are summaries (``None`` where missing).

    Seeds whose evaluation rounds differ from the first seed's are left out; an
    evaluation nobody was scored at is ``None``.
    """
    curves = {seed: summary_curve(res) for seed, res in runs.items() if res is not None}
    curves = {seed: c for seed, c in curves.items() if c is not None}
    if not curves:
        return None
    rounds = next(iter(curves.values()))[0]
    per_seed = {str(s): acc for s, (r, acc) in curves.items() if r == rounds}
    stack = np.asarray(list(per_seed.values()), dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a round nobody scored in any seed
        summary = {"mean": np.nanmean(stack, 0), "min": np.nanmin(stack, 0)}
        summary["max"] = np.nanmax(stack, 0)
    return {
        "rounds": rounds,
        "per_seed": {s: [_number(a) for a in acc] for s, acc in per_seed.items()},
        **{key: [_number(a) for a in vals] for key, vals in summary.items()},
    }
