"""Reply validation in one place: training replies and evaluation replies.

A reply is used only after its keys, shapes, dtypes, bytes and numbers were
checked against what the server sent; anything else is dropped with the
client named and the reason recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import numpy as np
from flwr.app import Message

from ripple_flwr.app.protocol.messages import (
    ACCURACY,
    ARRAYS,
    CHOSEN,
    LOSS,
    METRICS,
    NUM_EXAMPLES,
    STATE_TRAINED,
    TRAIN_LOSS,
    metrics_of,
    train_metrics_record,
)
from ripple_flwr.app.protocol.records import record_to_state
from ripple_flwr.app.server.replies.fields import (
    MAX_CLIENT_EXAMPLES,
    REPLY_ERRORS,
    as_count,
    as_number,
)
from ripple_flwr.app.server.rounds.accounting import ClientScore, Dropped
from ripple_flwr.methods.api import Accepted

log = logging.getLogger("flwr.ripple")

Reference = dict[str, tuple[tuple[int, ...], np.dtype]]
CLAIM_LIMIT = 2**63 - 1  # a count the server replaces by the client's known split size
MAX_LOSS = 1e6  # a cross-entropy beyond this is no loss an honest client reports


def state_reference(state: dict[str, np.ndarray]) -> Reference:
    """Keys, shapes and dtypes every reply must match."""
    return {k: (tuple(v.shape), v.dtype) for k, v in state.items()}


def validate_train_reply(
    msg: Message, reference: Reference
) -> tuple[dict[str, np.ndarray], int, float]:
    """(state, num-examples, train_loss) of a training reply, or ``ValueError`` saying why not."""
    if msg.has_error():
        raise ValueError(f"client error: {msg.error.reason}")
    content = msg.content
    if ARRAYS not in content.array_records:
        raise ValueError(f"reply carries no {ARRAYS!r} record")
    record = content.array_records[ARRAYS]
    if set(record.keys()) != set(reference):
        missing = sorted(set(reference) - set(record.keys()))
        extra = sorted(set(record.keys()) - set(reference))
        raise ValueError(f"model keys differ (missing {missing[:3]}, unexpected {extra[:3]})")
    for key, (shape, _) in reference.items():
        if tuple(record[key].shape) != shape:
            raise ValueError(
                f"tensor {key!r} has shape {tuple(record[key].shape)}, expected {shape}"
            )
    state = record_to_state(record)
    state = {k: state[k] for k in reference}  # server's key order
    for key, value in state.items():
        shape, dtype = reference[key]
        # The Array's declared shape was checked above; its bytes may still say otherwise.
        if value.shape != shape or value.dtype != dtype:
            raise ValueError(
                f"tensor {key!r} decodes to {value.dtype}{list(value.shape)}, "
                f"expected {dtype}{list(shape)}"
            )
        if np.issubdtype(value.dtype, np.inexact) and not np.all(np.isfinite(value)):
            raise ValueError(f"tensor {key!r} is not finite")
    metrics = metrics_of(content)
    if metrics is None or NUM_EXAMPLES not in metrics:
        raise ValueError(f"reply has no {METRICS!r} record with {NUM_EXAMPLES}")
    # Any positive integer: the server holds it to the split size from the query round anyway.
    n = as_count(metrics[NUM_EXAMPLES], NUM_EXAMPLES, high=CLAIM_LIMIT)
    loss = as_number(metrics[TRAIN_LOSS], TRAIN_LOSS, low=-MAX_LOSS, high=MAX_LOSS)
    return state, n, loss


# Optional training-reply metrics a method may read, with their bounds (validated when present).
OPTIONAL_TRAIN_METRICS = {CHOSEN: 1 << 20, STATE_TRAINED: 1 << 40}


def train_metrics(msg: Message, n: int, loss: float) -> dict[str, int | float]:
    """The reply's metrics as the server keeps them: checked, and nothing else.

    The message's own record is replaced by ``num-examples`` and ``train_loss``
    alone (what Flower's aggregation reads: an extra or missing key in one
    reply must not break it); the optional keys a method reads (IFCA's
    ``chosen``, the stateful rules' ``state-trained``) are kept beside it.
    """
    metrics = msg.content.metric_records[METRICS]
    kept: dict[str, int | float] = {NUM_EXAMPLES: n, TRAIN_LOSS: loss}
    for key, high in OPTIONAL_TRAIN_METRICS.items():
        if key in metrics:
            kept[key] = as_count(metrics[key], key, low=0, high=high)
    msg.content[METRICS] = train_metrics_record(n, loss)
    return kept


# -- extra records a method declares (SCAFFOLD's control delta) -------------------------------
def validate_extra_records(
    msg: Message, references: dict[str, Reference]
) -> dict[str, dict[str, np.ndarray]]:
    """Each declared extra ArrayRecord of a reply, checked like the model, or ``ValueError``.

    ``references`` maps a record name to the keys, shapes and dtypes it must
    have; a reply missing one, or with a mis-shaped or non-finite tensor in
    it, is dropped like any bad reply, with the record named.
    """
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, reference in references.items():
        record = msg.content.array_records.get(name)
        if record is None:
            raise ValueError(f"reply carries no {name!r} record")
        if set(record.keys()) != set(reference):
            missing = sorted(set(reference) - set(record.keys()))
            extra = sorted(set(record.keys()) - set(reference))
            raise ValueError(
                f"{name!r} keys differ (missing {missing[:3]}, unexpected {extra[:3]})"
            )
        for key, (shape, _) in reference.items():
            if tuple(record[key].shape) != shape:
                raise ValueError(
                    f"{name!r} tensor {key!r} has shape {tuple(record[key].shape)}, "
                    f"expected {shape}"
                )
        decoded = record_to_state(record)
        arrays = {}
        for key, (shape, dtype) in reference.items():
            value = decoded[key]
            if value.shape != shape or value.dtype != dtype:
                raise ValueError(
                    f"{name!r} tensor {key!r} decodes to {value.dtype}{list(value.shape)}, "
                    f"expected {dtype}{list(shape)}"
                )
            if not np.all(np.isfinite(value)):
                raise ValueError(f"{name!r} tensor {key!r} is not finite")
            arrays[key] = value
        out[name] = arrays
    return out


def match_replies(
    replies: Iterable[Message], pending: dict[str, int], what: str, server_round: int
) -> tuple[dict[int, Message], set[int]]:
    """Replies by the row of the message they answer (``reply_to_message_id``).

    A reply is matched to the message it answers, not to its sender: the
    SuperLink's error reply for a dead node comes from another node id. A reply
    to no message of this round, or a second reply to one message, is ignored.
    Returns (row -> reply, rows whose reply errored).
    """
    by_row: dict[int, Message] = {}
    errored: set[int] = set()
    for msg in replies:
        row = pending.get(str(msg.metadata.reply_to_message_id))
        if row is None or row in by_row:
            log.warning(
                "round %d: ignoring a reply (from node %d) that answers no %s message of this "
                "round",
                server_round,
                int(msg.metadata.src_node_id),
                what,
            )
            continue
        by_row[row] = msg
        if msg.has_error():
            errored.add(row)
    return by_row, errored


def check_train_replies(
    replies: Iterable[Message],
    pending: dict[str, int],
    reference: Reference,
    partition_ids: list[int],
    server_round: int,
    timeout: float,
    extra_references: dict[str, Reference] | None = None,
) -> tuple[list[Accepted], list[Dropped]]:
    """Split a round's replies into the usable ones (in row order) and the dropped ones.

    ``pending`` maps the id of each training message sent to its row. A row
    that got no reply is recorded as dropped, with that reason.
    """
    accepted: list[Accepted] = []
    dropped: list[Dropped] = []
    by_row, _ = match_replies(replies, pending, "training", server_round)
    for row in sorted(set(pending.values())):
        pid = partition_ids[row]
        msg = by_row.get(row)
        if msg is None:
            reason = f"no reply within round-timeout={timeout:g} s"
            log.warning("round %d: partition %d: %s", server_round, pid, reason)
            dropped.append(Dropped(pid, reason))
            continue
        try:
            state, n, loss = validate_train_reply(msg, reference)
            extras = validate_extra_records(msg, extra_references or {})
            metrics = train_metrics(msg, n, loss)
        except REPLY_ERRORS as err:
            log.warning("round %d: dropped reply of partition %d: %s", server_round, pid, err)
            dropped.append(Dropped(pid, str(err)))
            continue
        accepted.append(Accepted(row, state, n, loss, msg, extras, metrics))
    # Replies arrive in any order; apply them in row order so a seed gives one result.
    accepted.sort(key=lambda a: a.row)
    dropped.sort(key=lambda d: d.partition)
    return accepted, dropped


def check_score(metrics: Any, known: int | None) -> tuple[float, float, int]:
    """(accuracy, loss, test examples) of an evaluation reply, or ``ValueError`` saying why not.

    The count is the server's (``known``, the client's test split size from
    the query round), never the client's claim; the accuracy must be a share
    of that many examples.
    """
    acc = as_number(metrics[ACCURACY], ACCURACY, low=0.0, high=1.0)
    loss = as_number(metrics[LOSS], LOSS, low=-MAX_LOSS, high=MAX_LOSS)
    n = as_count(metrics[NUM_EXAMPLES], NUM_EXAMPLES, high=CLAIM_LIMIT)
    if known is None:
        n = min(n, MAX_CLIENT_EXAMPLES)
        return acc, loss, n
    correct = acc * known
    if abs(correct - round(correct)) > 1e-6 * max(1, known):
        raise ValueError(
            f"accuracy {acc!r} is not a share of the {known} test examples the client holds"
        )
    if n != known:
        log.warning("a client reported num-examples=%d for its %d test examples", n, known)
    return acc, loss, known


def check_choice(metrics: Any, count: int) -> int:
    """The candidate index a reply says it kept, or ``ValueError`` (absent, not an index)."""
    if CHOSEN not in metrics:
        raise ValueError(f"sent {count} candidate models but the reply names no {CHOSEN!r} one")
    raw = metrics[CHOSEN]
    if isinstance(raw, bool) or not isinstance(raw, int | np.integer) or not 0 <= raw < count:
        raise ValueError(f"{CHOSEN}={raw!r} is not a candidate index in [0, {count})")
    return int(raw)


def collect_evaluations(
    replies: Iterable[Message],
    pending: dict[str, int],
    partition_ids: list[int],
    known_test: list[int | None] | None = None,
    timeout: float | None = None,
    server_round: int = 0,
    num_candidates: dict[int, int] | None = None,
) -> tuple[list[ClientScore], list[Dropped]]:
    """Per-client scores (sorted by partition) and every client that was not scored, with why.

    ``pending`` maps the id of each evaluate message to its row. A client
    whose reply errored, failed :func:`check_score`, or never came is a
    failure: the record says who the headline figure does not cover. A row
    sent several candidate models (``num_candidates``) must name the one it
    kept (:func:`check_choice`).
    """
    per_client: list[ClientScore] = []
    failed: list[Dropped] = []
    by_row, _ = match_replies(replies, pending, "evaluate", server_round)
    for row in sorted(set(pending.values())):
        pid = partition_ids[row]
        msg = by_row.get(row)
        try:
            if msg is None:
                wait = "" if timeout is None else f" within round-timeout={timeout:g} s"
                raise ValueError(f"no reply{wait}")
            if msg.has_error():
                raise ValueError(f"client error: {msg.error.reason}")
            known = known_test[row] if known_test else None
            metrics = msg.content.metric_records[METRICS]
            acc, loss, n = check_score(metrics, known)
            count = (num_candidates or {}).get(row, 1)
            chosen = check_choice(metrics, count) if count > 1 else None
        except REPLY_ERRORS as err:
            failed.append(Dropped(pid, " ".join(str(err).split())))
            continue
        per_client.append(ClientScore(pid, acc, loss, n, chosen))
    per_client.sort(key=lambda c: c.partition)
    return per_client, failed
