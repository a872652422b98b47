"""Reply validation in one place: training replies and evaluation replies.

A reply is used only after its keys, shapes, dtypes, bytes and numbers were
checked against what the server sent; anything else is dropped with the
client named and the reason recorded.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from flwr.app import Message

from ripple_flwr.records import record_to_state
from ripple_flwr.strategies.accounting import ClientScore, Dropped

log = logging.getLogger("flwr.ripple")

Reference = dict[str, tuple[tuple[int, ...], np.dtype]]


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
    if "arrays" not in content.array_records:
        raise ValueError("reply carries no 'arrays' record")
    record = content.array_records["arrays"]
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
    metrics = content.metric_records.get("metrics")
    if metrics is None or "num-examples" not in metrics:
        raise ValueError("reply has no 'metrics' record with num-examples")
    n = metrics["num-examples"]
    if isinstance(n, list) or not n > 0:
        raise ValueError(f"num-examples must be a positive number, got {n!r}")
    loss = float(metrics.get("train_loss", math.nan))
    return state, int(n), loss


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


@dataclass
class Accepted:
    """One valid training reply: the row (client) it came from and what it carried."""

    row: int
    state: dict[str, np.ndarray]
    num_examples: int
    train_loss: float
    message: Message
    # Extra ArrayRecords a method declared (SCAFFOLD's control delta), validated like the model.
    extras: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)


def check_train_replies(
    replies: Iterable[Message],
    pending: dict[int, int],
    reference: Reference,
    partition_ids: list[int],
    server_round: int,
    timeout: float,
    extra_references: dict[str, Reference] | None = None,
) -> tuple[list[Accepted], list[Dropped]]:
    """Split a round's replies into the usable ones (in row order) and the dropped ones.

    ``pending`` maps each node sent a training message to its row. Replies
    from other nodes, or a second reply from one node, are ignored; a node
    that did not answer is recorded as dropped.
    """
    accepted: list[Accepted] = []
    dropped: list[Dropped] = []
    seen: set[int] = set()
    for msg in replies:
        nid = int(msg.metadata.src_node_id)
        row = pending.get(nid)
        if row is None or nid in seen:
            log.warning("round %d: ignoring unexpected reply from node %d", server_round, nid)
            continue
        seen.add(nid)
        try:
            state, n, loss = validate_train_reply(msg, reference)
            extras = validate_extra_records(msg, extra_references or {})
        except ValueError as err:
            pid = partition_ids[row]
            log.warning("round %d: dropped reply of partition %d: %s", server_round, pid, err)
            dropped.append(Dropped(pid, str(err)))
            continue
        accepted.append(Accepted(row, state, n, loss, msg, extras))
    for nid, row in pending.items():
        if nid not in seen:
            pid = partition_ids[row]
            reason = f"no reply within round-timeout={timeout:g} s"
            log.warning("round %d: partition %d: %s", server_round, pid, reason)
            dropped.append(Dropped(pid, reason))
    # Replies arrive in any order; apply them in row order so a seed gives one result.
    accepted.sort(key=lambda a: a.row)
    dropped.sort(key=lambda d: d.partition)
    return accepted, dropped


def collect_evaluations(
    replies: Iterable[Message], pending: dict[int, int], partition_ids: list[int]
) -> tuple[list[ClientScore], list[Dropped]]:
    """Per-client scores of evaluate replies (sorted by partition) and the failures."""
    per_client: list[ClientScore] = []
    failed: list[Dropped] = []
    for msg in replies:
        row = pending.get(int(msg.metadata.src_node_id))
        if row is None:
            continue
        pid = partition_ids[row]
        try:
            if msg.has_error():
                raise ValueError(msg.error.reason)
            m = msg.content.metric_records["metrics"]
            acc, loss, n = float(m["accuracy"]), float(m["loss"]), int(m["num-examples"])
            if not (math.isfinite(acc) and n > 0):
                raise ValueError(f"bad metrics {dict(m)}")
        except (KeyError, ValueError, TypeError) as err:
            failed.append(Dropped(pid, str(err)))
            continue
        per_client.append(ClientScore(pid, acc, loss, n))
    per_client.sort(key=lambda c: c.partition)
    failed.sort(key=lambda d: d.partition)
    return per_client, failed
