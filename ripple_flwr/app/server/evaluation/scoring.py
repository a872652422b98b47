"""Personalised evaluation: each client scores the model it is given on its own test split.

A client sent several candidate models (:mod:`ripple_flwr.app.client.candidates`)
first keeps the one with the lowest loss on its training split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from flwr.app import ArrayRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from ripple_flwr.app.protocol.candidates import Payload, payload_records, payload_size
from ripple_flwr.app.protocol.messages import evaluate_config
from ripple_flwr.app.server.replies.validation import collect_evaluations
from ripple_flwr.app.server.roster.query import QueryResult
from ripple_flwr.app.server.rounds.accounting import ClientScore, Dropped
from ripple_flwr.app.server.rounds.grid import send_and_receive
from ripple_flwr.runs.results import client_stats


def score_stats(scores: Sequence[ClientScore], key: str = "accuracy") -> dict[str, float]:
    """Sample-weighted mean, mean, spread and range of the clients' ``key``."""
    return client_stats([getattr(c, key) for c in scores], [c.num_examples for c in scores])


def evaluate_messages(
    node_ids: Sequence[int], payloads: Sequence[Payload], server_round: int
) -> list[Message]:
    """One evaluate message per node, carrying the model (or candidates) it is scored with."""
    cfg = evaluate_config(server_round)
    return [
        Message(
            RecordDict({**payload_records(payload), "config": cfg}),
            dst_node_id=nid,
            message_type=MessageType.EVALUATE,
        )
        for nid, payload in zip(node_ids, payloads, strict=True)
    ]


def evaluate_on(
    grid: Grid,
    clients: QueryResult,
    payloads: Sequence[Payload],
    server_round: int,
    timeout: float,
) -> tuple[list[ClientScore], list[Dropped]]:
    """Send ``payloads[i]`` to client ``i`` for evaluation on its own test split."""
    messages = evaluate_messages(clients.node_ids, payloads, server_round)
    replies = send_and_receive(grid, messages, timeout)
    pending = {str(m.metadata.message_id): row for row, m in enumerate(messages)}
    counts = {row: payload_size(p) for row, p in enumerate(payloads)}
    return collect_evaluations(
        replies,
        pending,
        clients.partition_ids,
        clients.known_tests(),
        timeout,
        server_round,
        num_candidates=counts,
    )


def best_by_loss(
    grid: Grid,
    clients: QueryResult,
    models: Sequence[ArrayRecord],
    server_round: int,
    timeout: float,
) -> dict[str, Any]:
    """Each client keeps the model with the lowest loss on its *training* split (a reference).

    All models go to each client in one message; the client chooses on its
    training split and reports the chosen model's test accuracy, so the test
    labels never take part in the choice.
    """
    per_client, failed = evaluate_on(
        grid, clients, [list(models)] * len(clients), server_round, timeout
    )
    chosen = [{**asdict(c), "model": c.chosen} for c in per_client]
    return {
        "accuracy": client_stats(
            [c["accuracy"] for c in chosen], [c["num_examples"] for c in chosen]
        ),
        "per_client": chosen,
        "failed": [asdict(f) for f in failed],
        "models": len(models),
        "chosen_on": "training split",
    }
