"""Zero-shot onboarding after training (phase 4): each new client gets its model once.

Called by the ServerApp after the last round. The model comes from what the
engine already holds (Ripple: the summary the client sent once, one
batched router pass, then mixing; one-model methods: the global model): no
gradient, no model evaluation in the choice, no message to any training
client.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Any

import numpy as np
from flwr.serverapp import Grid

from ripple_flwr.app.server.evaluation.scoring import (
    best_by_loss,
    evaluate_on,
    score_stats,
)
from ripple_flwr.settings.groups import MIN_ZERO_SHOT_TEST_IMAGES

log = logging.getLogger("flwr.ripple")


def test_images(scores: list[Any]) -> dict[str, int]:
    """The zero-shot test images per new client that answered: min, median, max, total."""
    counts = sorted(int(c.num_examples) for c in scores) or [0]
    return {
        "min": counts[0],
        "median": counts[len(counts) // 2],
        "max": counts[-1],
        "total": int(sum(counts)),
    }


def onboard_new_clients(engine: Any, grid: Grid) -> dict[str, Any]:
    """Onboard the run's held-out clients and score their models; the results record.

    With ``best-by-loss`` every model the server holds is also scored on each
    new client and the one with the lowest loss kept: the oracle advantage
    the paper gives baselines, recorded beside the zero-shot score.

    A new client the router did not recognise (its summary outside the router's
    domain) got the uniform w = 1/K: ``routed_uniformly`` lists those, each as
    ``{"partition", "reason"}``; the key is there only when one was.
    """
    s = engine.settings
    last = engine.num_rounds
    engine.admit(grid, last + 1)
    new = engine.roster.new_clients
    rec: dict[str, Any] = {
        "clients": len(new),
        "partition_ids": list(new.partition_ids),
        "names": list(new.names),
    }
    if not len(new):
        log.warning(
            "new-clients=%d but no new client answered; no zero-shot score", s.data.new_clients
        )
        return rec
    t0 = time.perf_counter()
    onboarding = engine.onboard(new)
    server_seconds = time.perf_counter() - t0
    payloads, uniform = onboarding.payloads, onboarding.routed_uniformly
    if payloads is None:
        log.info("%s has no zero-shot model for new clients", type(engine).__name__)
        rec["supported"] = False
        return rec
    t0 = time.perf_counter()
    per_client, failed = evaluate_on(grid, new, payloads, last, s.robustness.round_timeout)
    embed = float(np.mean(new.client_seconds)) if new.client_seconds else 0.0
    rec.update(
        {
            "supported": True,
            "accuracy": score_stats(per_client),
            "per_client": [asdict(c) for c in per_client],
            "failed": [asdict(f) for f in failed],
            "server_seconds": server_seconds,
            "onboard_ms_per_client": 1000.0 * (embed + server_seconds / len(new)),
            "evaluation_seconds": time.perf_counter() - t0,
        }
    )
    rec["test_images_per_client"] = test_images(per_client)
    if per_client and rec["test_images_per_client"]["min"] < MIN_ZERO_SHOT_TEST_IMAGES:
        log.warning(
            "zero-shot: new clients hold %d to %d test images each (fewer than %d): each "
            "client's score moves in steps of 1/n; raise new-partition-size for a steadier "
            "figure",
            rec["test_images_per_client"]["min"],
            rec["test_images_per_client"]["max"],
            MIN_ZERO_SHOT_TEST_IMAGES,
        )
    if uniform:
        rec["routed_uniformly"] = uniform
        log.warning(
            "zero-shot: %d of %d new clients routed uniformly (w = 1/K): the router did not "
            "recognise their data (partitions %s)",
            len(uniform),
            len(new),
            ", ".join(str(u["partition"]) for u in uniform),
        )
    log.info(
        "zero-shot: %d new clients, personalised accuracy %.4f (weighted mean), "
        "%.1f ms to onboard one client (embedding %.1f ms + routing and mixing %.2f ms)",
        len(per_client),
        rec["accuracy"]["weighted_mean"],
        rec["onboard_ms_per_client"],
        1000 * embed,
        1000 * server_seconds / len(new),
    )
    refs = engine.reference_models()
    if s.evaluation.best_by_loss and len(refs) > 1:
        rec["best_by_loss"] = best_by_loss(grid, new, refs, last, s.robustness.round_timeout)
        log.info(
            "zero-shot best-by-loss over %d models (reference): accuracy %.4f",
            len(refs),
            rec["best_by_loss"]["accuracy"]["weighted_mean"],
        )
    rec.update(engine.zero_shot_extras())
    return rec
