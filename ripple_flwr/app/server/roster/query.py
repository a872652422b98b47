"""The one-shot query round: one message to each node, every reply read and checked.

:func:`query_round` asks nodes for their partition id, split sizes and (unless
the kind is ``none``) their summary; :class:`QueryResult` holds the usable
clients in partition order. Who is asked when is
:class:`~ripple_flwr.app.server.roster.admission.ClientRoster`'s business.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

from ripple_flwr.app.protocol.messages import (
    CONFIG,
    DATA_SOURCE,
    NUM_EXAMPLES,
    NUM_PARTITIONS,
    NUM_TEST_EXAMPLES,
    PARTITION_ID,
    QUERY,
    SECONDS,
    QueryReply,
    query_config,
    summary_array,
)
from ripple_flwr.app.server.replies.fields import (
    REPLY_ERRORS,
    as_count,
    as_number,
    as_text,
)
from ripple_flwr.app.server.roster.claims import binding_refusal
from ripple_flwr.app.server.roster.own_data import (
    LocalData,
    assign_local,
    check_local_info,
)
from ripple_flwr.app.server.rounds.grid import send_and_receive
from ripple_flwr.methods.api import QueryResult, SummaryRows
from ripple_flwr.runs.results import message_nbytes

log = logging.getLogger("flwr.ripple")

QUERY_TYPE = QUERY  # the one-shot round's message type (ripple_flwr.app.protocol)

MAX_SECONDS = 86_400.0  # a client's reported embedding time: a day at most
NPY_HEADER_LIMIT = 4096  # bytes of a .npy header beyond the data itself


def validate_summary(
    record: RecordDict, kind: str, dim: int | SummaryRows | None
) -> np.ndarray | None:
    """The summary vector of a query reply, or ``ValueError`` saying what is wrong with it.

    ``dim``: the summary's length, or :class:`SummaryRows` (a varying number of rows, at
    most ``most``: returned padded with zero rows to ``most x width``), or ``None`` (any).
    """
    if kind == "none":
        return None
    array = summary_array(record)
    if array is None:
        raise ValueError(f"reply has no {kind} summary")
    if isinstance(dim, SummaryRows):
        return _summary_rows(array, kind, dim)
    # Before decoding: the bytes must fit the promised length (a header may claim 2**40 floats).
    if dim is not None and (
        tuple(array.shape) != (dim,) or len(array.data) > dim * 8 + NPY_HEADER_LIMIT
    ):
        raise ValueError(
            f"{kind} is declared {tuple(array.shape)} in {len(array.data)} bytes, expected ({dim},)"
        )
    return _finite_floats(array, kind, dim)


def _finite_floats(array: Any, kind: str, length: int | None) -> np.ndarray:
    """The decoded summary: one vector of ``length`` floats (``None``: any), as finite
    float32, or ``ValueError`` naming what is wrong (after the header's checks)."""
    phi = array.numpy()
    if phi.ndim != 1 or (length is not None and phi.shape[0] != length):
        raise ValueError(f"{kind} has shape {phi.shape}, expected ({length},)")
    if not np.issubdtype(phi.dtype, np.floating):
        raise ValueError(f"{kind} has dtype {phi.dtype}, expected floats")
    with np.errstate(over="ignore"):  # a float64 beyond float32's range becomes inf: refused
        phi = phi.astype(np.float32, copy=False)
    if not np.all(np.isfinite(phi)):
        raise ValueError(f"{kind} contains NaN or Inf (or a value beyond float32's range)")
    return phi


def _summary_rows(array: Any, kind: str, rows: SummaryRows) -> np.ndarray:
    """A summary of whole rows, at most ``rows.most``, finite; padded to ``rows.size``."""
    shape = tuple(array.shape)
    # Before decoding: the declared length and the bytes must fit the most rows allowed.
    if len(shape) != 1:
        raise ValueError(f"{kind} is declared {shape}, expected one flat vector of rows")
    length = int(shape[0])
    if length % rows.width:
        raise ValueError(
            f"{kind} has {length} floats, not a whole number of {rows.width}-float vectors"
        )
    if length // rows.width > rows.most:
        raise ValueError(
            f"{kind} sends {length // rows.width} vectors, more than the {rows.most} allowed"
        )
    if len(array.data) > length * 8 + NPY_HEADER_LIMIT:
        raise ValueError(f"{kind} is declared ({length},) in {len(array.data)} bytes")
    phi = _finite_floats(array, kind, length)
    out = np.zeros(rows.size, dtype=np.float32)
    out[:length] = phi
    return out


def _read_query_reply(
    msg: Message,
    nid: int,
    kind: str,
    dim: int | SummaryRows | None,
    num_partitions: int,
    local: LocalData | None,
) -> tuple[tuple, int, tuple | None]:
    """One query reply's fields, converted and checked: (row, partition id, local claim).

    Raises one of ``REPLY_ERRORS`` naming the field; never anything else.
    """
    reply = QueryReply.read(msg.content)  # every field as sent: checked here, one by one
    source = "benchmark" if local is None else "local"
    got = as_text(_or(reply.data, "benchmark"), DATA_SOURCE, limit=16)
    if got != source:
        raise ValueError(f"node uses {got} data, the run {source} data")
    n_node = as_count(_or(reply.num_partitions, num_partitions), NUM_PARTITIONS)
    if n_node != num_partitions:
        raise ValueError(f"node has num-partitions={n_node}, run has {num_partitions}")
    phi = validate_summary(msg.content, kind, dim)
    row = (
        nid,
        as_count(_or(reply.num_examples, 0), NUM_EXAMPLES, low=0),  # 0: not reported
        phi,
        message_nbytes(msg),
        as_number(_or(reply.seconds, 0.0), SECONDS, low=0.0, high=MAX_SECONDS),
        # Optional (0: not reported; the evaluation's own count is then used, within bounds).
        as_count(_or(reply.num_test_examples, 0), NUM_TEST_EXAMPLES, low=0),
    )
    if local is not None:
        name, held_out = check_local_info(reply.local, local)
        return row, -1, (name, nid, held_out, (*row, name))
    if reply.partition_id is None:
        raise KeyError(PARTITION_ID)
    pid = as_count(reply.partition_id, PARTITION_ID, low=0, high=num_partitions - 1)
    return (*row, ""), pid, None


def _or(raw: Any, default: Any) -> Any:
    """A reply's field as sent, or ``default`` where the reply left it out (``None``)."""
    return default if raw is None else raw


def query_round(
    grid: Grid,
    node_ids: Sequence[int],
    kind: str,
    dim: int | SummaryRows | None,
    num_partitions: int,
    timeout: float,
    taken: Iterable[int] = (),
    extra: dict[str, Any] | None = None,
    local: LocalData | None = None,
    bound: dict[int, int] | None = None,
) -> QueryResult:
    """Ask every node once for its partition id (and summary); validate every reply.

    ``num_partitions`` counts every partition of the run (training and new
    clients). A node that errors, does not answer within ``timeout``, reports
    a partition outside the run or one already taken (here or in ``taken``),
    or sends a summary of the wrong length or with NaN/Inf is left out with
    its reason logged; its summary never reaches the router. ``extra``
    records go to every node with the question (the public parameters of the
    embedding's differential privacy; a local-data run's classes and shape).
    With ``local``, nodes bring their own data: each must report the run's
    classes and image shape, and the server gives them their partition slots.
    """
    taken = set(int(t) for t in taken)
    messages = [
        Message(
            RecordDict({CONFIG: query_config(kind), **(extra or {})}),
            dst_node_id=int(nid),
            message_type=QUERY_TYPE,
        )
        for nid in node_ids
    ]
    replies = send_and_receive(grid, messages, timeout)
    rejected: dict[int, str] = {}
    claims, pending, answered = _read_replies(
        messages, replies, (kind, dim, num_partitions, local), taken, bound, rejected
    )
    rows = _settle_claims(claims, rejected)
    if local is not None:
        assign_local(rows, pending, local, num_partitions, taken, rejected)
    for nid in node_ids:
        if int(nid) not in answered:
            rejected[int(nid)] = f"no reply to the query round within {timeout:g} s"
    for nid, reason in sorted(rejected.items()):
        log.warning("node %d left out of training: %s", nid, reason)
    return _result(rows, kind, rejected, "benchmark" if local is None else "local")


def _read_replies(
    messages: list[Message],
    replies: Iterable[Message],
    expected: tuple[str, int | None, int, LocalData | None],
    taken: set[int],
    bound: dict[int, int] | None,
    rejected: dict[int, str],
) -> tuple[dict[int, list[tuple]], list[tuple], set[int]]:
    """Each reply read and checked once: the partition claims, local claims, who answered."""
    kind, dim, num_partitions, local = expected
    # Match each reply to the message it answers (ids are set when pushed), not to its sender.
    asked = {str(m.metadata.message_id): int(m.metadata.dst_node_id) for m in messages}
    claims: dict[int, list[tuple]] = {}
    pending: list[tuple] = []
    answered: set[int] = set()
    for msg in replies:
        nid = asked.get(str(msg.metadata.reply_to_message_id))
        if nid is None or nid in answered:
            log.warning(
                "ignoring a reply (from node %d) that answers no query of this round",
                int(msg.metadata.src_node_id),
            )
            continue
        answered.add(nid)
        if msg.has_error():
            rejected[nid] = f"error in query round: {msg.error.reason}"
            continue
        try:
            row, pid, local_claim = _read_query_reply(msg, nid, kind, dim, num_partitions, local)
        except REPLY_ERRORS as err:
            rejected[nid] = f"invalid query reply: {' '.join(str(err).split())}"
            continue
        if local_claim is not None:
            pending.append(local_claim)
        elif (refusal := binding_refusal(bound, nid, pid)) is not None:
            rejected[nid] = refusal
        elif pid in taken:
            rejected[nid] = f"partition-id {pid} is already held by another node of the run"
        else:
            claims.setdefault(pid, []).append(row)
    return claims, pending, answered


def _settle_claims(claims: dict[int, list[tuple]], rejected: dict[int, str]) -> dict[int, tuple]:
    """One claimant per partition keeps it; two nodes claiming one partition both lose it."""
    rows: dict[int, tuple] = {}
    for pid, claimants in claims.items():
        if len(claimants) == 1:
            rows[pid] = claimants[0]
            continue
        # Two nodes claim one partition: neither is trusted with it (first come is not proof).
        nodes = ", ".join(str(r[0]) for r in claimants)
        for r in claimants:
            rejected[r[0]] = f"partition-id {pid} is claimed by several nodes ({nodes})"
    return rows


def _result(
    rows: dict[int, tuple], kind: str, rejected: dict[int, str], source: str
) -> QueryResult:
    """The admitted nodes in partition order, with their summaries stacked."""
    order = sorted(rows)
    feats = None
    if kind != "none" and order:
        feats = np.stack([rows[p][2] for p in order])
    return QueryResult(
        node_ids=[rows[p][0] for p in order],
        partition_ids=order,
        num_examples=[rows[p][1] for p in order],
        features=feats,
        rejected=rejected,
        bytes_up=[rows[p][3] for p in order],
        client_seconds=[rows[p][4] for p in order],
        num_test=[rows[p][5] for p in order],
        sources=[source] * len(order),
        names=[rows[p][6] for p in order],
    )


def split_new(result: QueryResult, num_partitions: int) -> tuple[QueryResult, QueryResult]:
    """(training clients, new clients) of a query round, by partition id."""
    train = [i for i, p in enumerate(result.partition_ids) if p < num_partitions]
    new = [i for i, p in enumerate(result.partition_ids) if p >= num_partitions]
    return result.select(train), result.select(new)
