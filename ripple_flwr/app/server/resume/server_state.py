"""The engine's whole server state, saved after a round and restored on resume.

:func:`server_state` gathers what a run needs to continue (the round, the settings, the
sampler, the ledger, the roster and the method's declared fields as plain data);
:func:`restore_server_state` puts it back after this process's own query round, taking
only the declared fields, each checked (:func:`~.restore.restored_fields`).
"""

from __future__ import annotations

from typing import Any

from ripple_flwr.app.server.resume.plain import to_plain
from ripple_flwr.app.server.resume.restore import restored_fields


def server_state(engine: Any, server_round: int) -> dict[str, Any]:
    """Everything the server needs to continue after ``server_round``."""
    return {
        "round": server_round,
        "method": engine.settings.method,
        "settings": engine.settings.to_dict(),
        "rng": engine.sampler.rng_state(),
        "ledger": engine.book.ledger.to_dict(),
        "roster": engine.roster.to_dict(),
        "fields": {name: to_plain(name, value) for name, value in engine.state_values().items()},
    }


def restore_server_state(engine: Any, state: dict[str, Any]) -> None:
    """Continue from :func:`server_state` (after this process's own query round).

    The saved clients keep their rows (partition order); their node ids come from
    this process's query round, so restarted SuperNodes are found.
    """
    fields = restored_fields(engine, state["fields"])  # declared and of their kind, or refused
    clients = engine.clients
    fresh = {p: n for p, n in zip(clients.partition_ids, clients.node_ids, strict=True)}
    engine.roster.restore(state["roster"], fresh)
    engine.sampler.restore_rng(state["rng"])
    engine.book.restore(state["ledger"])
    engine.restore_state_values(fields)
    engine.round_offset = int(state["round"])
