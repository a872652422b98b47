"""Personalised evaluation: each client scores the model it is given on its own test split."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from ripple_flwr.results import client_stats
from ripple_flwr.strategies.accounting import ClientScore, Dropped
from ripple_flwr.strategies.admission import QueryResult
from ripple_flwr.strategies.grid import send_and_receive
from ripple_flwr.strategies.replies import collect_evaluations


def score_stats(scores: Sequence[ClientScore], key: str = "accuracy") -> dict[str, float]:
    """Sample-weighted mean, mean, spread and range of the clients' ``key``."""
    return client_stats([getattr(c, key) for c in scores], [c.num_examples for c in scores])


def evaluate_messages(
    node_ids: Sequence[int], payloads: Sequence[ArrayRecord], server_round: int
) -> list[Message]:
    """One evaluate message per node, carrying the model that node is scored with."""
    cfg = ConfigRecord({"server-round": server_round})
    return [
        Message(
            RecordDict({"arrays": payload, "config": cfg}),
            dst_node_id=nid,
            message_type=MessageType.EVALUATE,
        )
        for nid, payload in zip(node_ids, payloads, strict=True)
    ]


def evaluate_on(
    grid: Grid,
    clients: QueryResult,
    payloads: Sequence[ArrayRecord],
    server_round: int,
    timeout: float,
) -> tuple[list[ClientScore], list[Dropped]]:
    """Send ``payloads[i]`` to client ``i`` for evaluation on its own test split."""
    messages = evaluate_messages(clients.node_ids, payloads, server_round)
    replies = send_and_receive(grid, messages, timeout)
    pending = {str(m.metadata.message_id): row for row, m in enumerate(messages)}
    return collect_evaluations(
        replies, pending, clients.partition_ids, clients.known_tests(), timeout, server_round
    )


def best_by_loss(
    grid: Grid,
    clients: QueryResult,
    models: Sequence[ArrayRecord],
    server_round: int,
    timeout: float,
) -> dict[str, Any]:
    """Each client scores every model; keep the lowest-loss one per client (a reference)."""
    best: dict[int, dict[str, Any]] = {}
    for m, model in enumerate(models):
        per_client, _ = evaluate_on(grid, clients, [model] * len(clients), server_round, timeout)
        for c in per_client:
            if c.partition not in best or c.loss < best[c.partition]["loss"]:
                best[c.partition] = {**asdict(c), "model": m}
    chosen = [best[p] for p in sorted(best)]
    return {
        "accuracy": client_stats(
            [c["accuracy"] for c in chosen], [c["num_examples"] for c in chosen]
        ),
        "per_client": chosen,
        "models": len(models),
    }
