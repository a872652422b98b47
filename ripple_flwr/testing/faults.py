"""Hostile and broken clients, for robustness tests and benchmarks.

Each fault rewrites what an honest ClientApp replied (``fault(msg, reply)``
returns the reply the server gets, or ``None`` for no reply), so any
method, grid or deployment can run with one misbehaving client: pass them
as ``InProcessGrid(faults={partition_id: fault})`` or wrap the handlers of a
ClientApp with :func:`wrap_handler`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, MetricRecord, RecordDict

from ripple_flwr.app.protocol.messages import (
    ACCURACY,
    CONFIG,
    INFO,
    METRICS,
    NUM_EXAMPLES,
    NUM_TEST_EXAMPLES,
    SERVER_ROUND,
)
from ripple_flwr.app.protocol.records import record_to_state, state_to_record

Fault = Callable[[Message, Message | None], Message | None]


def _replace(reply: Message, msg: Message, **records) -> Message:
    content = RecordDict({**dict(reply.content.items()), **records})
    return Message(content, reply_to=msg)


def _on(kind: str, rewrite: Callable[[Message, Message], Message | None]) -> Fault:
    def fault(msg: Message, reply: Message | None) -> Message | None:
        if reply is None or reply.has_error() or not msg.metadata.message_type.startswith(kind):
            return reply
        return rewrite(msg, reply)

    return fault


def scaled_weights(factor: float) -> Fault:
    """Training replies whose floating-point weights are multiplied by ``factor``."""

    def rewrite(msg: Message, reply: Message) -> Message:
        state = record_to_state(reply.content.array_records["arrays"])
        bad = {
            k: (v * np.asarray(factor, dtype=v.dtype) if np.issubdtype(v.dtype, np.inexact) else v)
            for k, v in state.items()
        }
        return _replace(reply, msg, arrays=state_to_record(bad))

    return _on("train", rewrite)


def constant_weights(value: float = 1e30) -> Fault:
    """Training replies whose floating-point weights are all ``value`` (finite, enormous)."""

    def rewrite(msg: Message, reply: Message) -> Message:
        state = record_to_state(reply.content.array_records["arrays"])
        bad = {
            k: (np.full_like(v, value) if np.issubdtype(v.dtype, np.inexact) else v)
            for k, v in state.items()
        }
        return _replace(reply, msg, arrays=state_to_record(bad))

    return _on("train", rewrite)


def inflated_count(num_examples: int = 10**12) -> Fault:
    """Training replies that claim ``num_examples`` training examples."""

    def rewrite(msg: Message, reply: Message) -> Message:
        metrics = dict(reply.content.metric_records[METRICS])
        metrics[NUM_EXAMPLES] = int(num_examples)
        return _replace(reply, msg, metrics=MetricRecord(metrics))

    return _on("train", rewrite)


def fake_evaluation(accuracy: float = 1.0, num_examples: int = 10**9) -> Fault:
    """Evaluation replies that claim ``accuracy`` on ``num_examples`` test examples."""

    def rewrite(msg: Message, reply: Message) -> Message:
        metrics = dict(reply.content.metric_records[METRICS])
        metrics.update({ACCURACY: float(accuracy), NUM_EXAMPLES: int(num_examples)})
        return _replace(reply, msg, metrics=MetricRecord(metrics))

    return _on("evaluate", rewrite)


def bad_embedding() -> Fault:
    """Query replies whose summary contains NaN."""

    def rewrite(msg: Message, reply: Message) -> Message:
        if "summary" not in reply.content.array_records:
            return reply
        phi = reply.content.array_records["summary"]["phi"].numpy().copy()
        phi[0] = np.nan
        return _replace(reply, msg, summary=ArrayRecord({"phi": Array(phi)}))

    return _on("query", rewrite)


def far_embedding(value: float = 3e38) -> Fault:
    """Query replies whose summary is finite but far outside any real one (all ``value``)."""

    def rewrite(msg: Message, reply: Message) -> Message:
        if "summary" not in reply.content.array_records:
            return reply
        phi = reply.content.array_records["summary"]["phi"].numpy()
        far = np.full_like(phi, value)
        return _replace(reply, msg, summary=ArrayRecord({"phi": Array(far)}))

    return _on("query", rewrite)


def huge_control(value: float = 1e30) -> Fault:
    """SCAFFOLD training replies whose control delta is ``value`` everywhere (finite)."""

    def rewrite(msg: Message, reply: Message) -> Message:
        if "control" not in reply.content.array_records:
            return reply
        control = record_to_state(reply.content.array_records["control"])
        bad = {k: np.full_like(v, value) for k, v in control.items()}
        return _replace(reply, msg, control=state_to_record(bad))

    return _on("train", rewrite)


MISSING = object()  # set_field's value that deletes the field


def set_field(kind: str, record: str, key: str, value: object) -> Fault:
    """Replies of ``kind`` whose ``record`` (a config or metric record) has ``key`` = ``value``.

    ``value`` may be anything the record type can carry (a string, ``inf``, a
    list, ...); :data:`MISSING` deletes the key. For the reply fuzz tests.
    """

    def rewrite(msg: Message, reply: Message) -> Message:
        content = reply.content
        if record in content.config_records:
            old, cls = content.config_records[record], ConfigRecord
        elif record in content.metric_records:
            old, cls = content.metric_records[record], MetricRecord
        else:
            return reply
        fields = dict(old)
        if value is MISSING:
            fields.pop(key, None)
        else:
            fields[key] = value
        return _replace(reply, msg, **{record: cls(fields)})

    return _on(kind, rewrite)


def query_sizes(num_examples: int = 10**12, num_test: int = 10**9) -> Fault:
    """Query replies that claim enormous training and test splits (to buy weight)."""
    return combine(
        set_field("query", INFO, NUM_EXAMPLES, int(num_examples)),
        set_field("query", INFO, NUM_TEST_EXAMPLES, int(num_test)),
    )


def dead_after(server_round: int, error: bool = True) -> Fault:
    """A node that dies after ``server_round``: error replies (as the SuperLink sends) or none."""

    def fault(msg: Message, reply: Message | None) -> Message | None:
        cfg = msg.content.config_records.get(CONFIG, ConfigRecord())
        if int(cfg.get(SERVER_ROUND, 0)) <= server_round:
            return reply
        if not error:
            return None
        return Message(Error(code=0, reason="node unavailable (simulated kill)"), reply_to=msg)

    return fault


def absent() -> Fault:
    """A node that never trains (every training reply an error) but answers everything else.

    The baseline a defence that drops a culprit can at best reach: the run
    without the culprit's training.
    """

    def rewrite(msg: Message, reply: Message) -> Message:
        return Message(Error(code=0, reason="absent from training (baseline)"), reply_to=msg)

    return _on("train", rewrite)


def combine(*faults: Fault) -> Fault:
    """Apply several faults in turn."""

    def fault(msg: Message, reply: Message | None) -> Message | None:
        for f in faults:
            reply = f(msg, reply)
        return reply

    return fault


FAULTS: dict[str, Callable[[], Fault]] = {
    "huge-weights": lambda: constant_weights(1e30),
    "scaled-weights": lambda: scaled_weights(1e6),
    # Below the model's own norm: an update of 0.99 (0.05) of it, every round.
    "doubled-weights": lambda: scaled_weights(1.99),
    "growing-weights": lambda: scaled_weights(1.05),
    "inflated-count": lambda: inflated_count(10**12),
    "fake-evaluation": lambda: fake_evaluation(1.0, 10**9),
    "bad-embedding": bad_embedding,
    "far-embedding": far_embedding,
    "huge-control": huge_control,
    "query-sizes": lambda: combine(query_sizes(), inflated_count(10**12), fake_evaluation(1.0)),
    # Within the absolute bound (10^8), so held to 4 x the median instead of refused.
    "capped-sizes": lambda: combine(
        query_sizes(10**8, 10**8), inflated_count(10**8), fake_evaluation(1.0, 10**8)
    ),
    "killed": lambda: dead_after(1, error=True),
    "absent": absent,
}


def wrap_handler(handler: Callable, fault: Fault) -> Callable:
    """A ClientApp handler whose replies go through ``fault`` (for a hostile SuperNode)."""

    def hostile(msg: Message, context) -> Message:
        reply = fault(msg, handler(msg, context))
        if reply is None:
            raise TimeoutError("hostile client: no reply")
        return reply

    return hostile
