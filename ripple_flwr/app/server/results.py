"""The results file's record of a finished run, built from the engine's own record.

:func:`results_record` is the one place that decides the file's fields and their order;
``run.py`` writes it (:func:`ripple_flwr.runs.results.write_results`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ripple_flwr.app.protocol.messages import TRAIN_LOSS
from ripple_flwr.runs.results import tail_mean
from ripple_flwr.settings import RunSettings

# What the run itself knows (not the engine), in the order the file lists it.
SOURCES = (
    "num_partitions_from",
    "server_folders",
    "federation",
    "checkpoint",
    "pretrained",
    "embedding_dp",
)


def accuracy_per_round(evaluations: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each evaluation's accuracy, its spread and the share of clients it covers."""
    return {
        str(e["round"]): {
            "weighted_mean": e["accuracy"]["weighted_mean"],
            "mean": e["accuracy"]["mean"],
            "std": e["accuracy"]["std"],
            "scored": e["scored"],
            "expected": e["expected"],
            "population": e["population"],
            "coverage": e["coverage"],
        }
        for e in evaluations
    }


def results_record(
    engine: Any,
    settings: RunSettings,
    record: dict[str, Any],
    *,
    model_bytes: int,
    sources: dict[str, Any],
    timings: dict[str, float],
) -> dict[str, Any]:
    """The results file's fields for a finished run.

    Parameters
    ----------
    engine : Engine
        The run's engine, after its rounds (its clients, model count).
    settings : RunSettings
        The run's settings, as settled.
    record : dict
        ``engine.run_record()`` plus ``zero_shot``.
    model_bytes : int
        Bytes of one model's arrays.
    sources : dict
        The :data:`SOURCES` fields and ``saved_run``.
    timings : dict
        ``data``, ``pretrain_or_load`` and ``total`` seconds (the rest from ``record``).
    """
    clients = engine.clients
    # The headline: each client's accuracy counts once, unless the run asks for example weights.
    score = "weighted_mean" if settings.evaluation.headline_weighting == "examples" else "mean"
    accuracy = [e["accuracy"][score] for e in record["evaluations"]]
    zero_shot = record["zero_shot"]
    results = {
        "status": "completed",
        "settings": settings.to_dict(),
        **{key: sources[key] for key in SOURCES},
        "model_bytes": model_bytes,
        "embedding_bytes_per_client": (
            int(np.mean(clients.bytes_up)) if clients and clients.bytes_up else 0
        ),
        "final_accuracy": tail_mean(accuracy, 3),
        # The share of clients the final figure covers (its last three evaluations).
        "final_accuracy_coverage": min(
            (e["coverage"] for e in record["evaluations"][-3:]), default=0.0
        ),
        "accuracy_per_round": accuracy_per_round(record["evaluations"]),
        "saved_run": sources["saved_run"],
        "num_models": engine.num_models,
        "final_accuracy_weighting": settings.evaluation.headline_weighting,
        "zero_shot_accuracy": (zero_shot.get("accuracy") or {}).get(score),
        # A round's record keeps the mean training loss under the reply's own key.
        "train_loss_per_round": {str(r["round"]): r[TRAIN_LOSS] for r in record["rounds"]},
        "bytes_per_round": {
            str(r["round"]): {"down": r["bytes_down"], "up": r["bytes_up"]}
            for r in record["rounds"]
        },
        **record,
    }
    kept = record["timings"]
    results["timings"] = {
        "data": timings["data"],
        "pretrain_or_load": timings["pretrain_or_load"],
        "query": kept["query"],
        "rounds": kept["rounds"],
        "evaluation": kept["evaluation"],
        "total": timings["total"],
    }
    return results
