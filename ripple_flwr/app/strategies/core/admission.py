"""Node admission: the bounded wait for nodes, the one-shot query round, late joiners.

The one-shot round maps every node to its partition (and collects the
summary Ripple routes with); the :class:`ClientRoster` keeps the usable
training clients in partition order, the held-out new clients beside them,
and admits nodes that connect later with one query each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from ripple_flwr.app.strategies.core.fields import (
    REPLY_ERRORS,
    SIZE_CAP_FACTOR,
    as_count,
    as_number,
    as_text,
    size_cap,
)
from ripple_flwr.app.strategies.core.grid import send_and_receive
from ripple_flwr.app.strategies.core.own_data import LocalData, assign_local, check_local_info
from ripple_flwr.runs.results import message_nbytes
from ripple_flwr.settings import RunSettings

log = logging.getLogger("flwr.ripple")

QUERY_TYPE = f"{MessageType.QUERY}.embed"


MAX_SECONDS = 86_400.0  # a client's reported embedding time: a day at most
NPY_HEADER_LIMIT = 4096  # bytes of a .npy header beyond the data itself
MIN_CLIENTS = 1  # below this many usable training clients a run stops with an error


class NotEnoughClientsError(RuntimeError):
    """Too few usable clients to run the configured federation."""


def wait_for_nodes(
    grid: Grid,
    expected: int,
    timeout: float,
    poll: float = 1.0,
    hint_every: float = 10.0,
    allowed: int | None = None,
    local: bool = False,
) -> list[int]:
    """Node ids once ``expected`` nodes are connected; a clear error after ``timeout`` s.

    ``allowed`` (default ``expected``) is how many nodes the run can use at
    most (training plus new clients); more than that gets a warning. ``local``:
    the nodes bring their own data (the hint says how to start one).
    """
    start = time.monotonic()
    last_hint = start
    allowed = expected if allowed is None else allowed
    while True:
        nodes = [int(n) for n in grid.get_node_ids()]
        if len(nodes) >= expected:
            if len(nodes) > allowed:
                log.warning(
                    "%d nodes connected but the run has %d partitions: nodes whose partition "
                    "is outside the run are left out",
                    len(nodes),
                    allowed,
                )
            return sorted(nodes)
        now = time.monotonic()
        if now - start >= timeout and local:
            raise NotEnoughClientsError(
                f"only {len(nodes)} of the expected {expected} nodes connected within "
                f"node-wait-timeout={timeout:g} s; start at least {expected} SuperNodes with "
                "--node-config \"data='<path>' name='<silo>'\" (docs/own-data.md), or lower "
                "num-partitions."
            )
        if now - start >= timeout:
            raise NotEnoughClientsError(
                f"only {len(nodes)} of the expected {expected} nodes connected within "
                f"node-wait-timeout={timeout:g} s. In simulation, the number of SuperNodes "
                f"must equal num-partitions + new-clients: flwr run . --federation-config "
                f"'num-supernodes={allowed}' (or lower num-partitions); in deployment, "
                f"start at least {expected} SuperNodes with --node-config 'partition-id=<i> "
                f"num-partitions={allowed}'."
            )
        if now - last_hint >= hint_every:
            log.info("waiting for nodes: %d of %d connected", len(nodes), expected)
            last_hint = now
        time.sleep(min(poll, max(0.0, timeout - (now - start))))


@dataclass
class QueryResult:
    """The usable clients, ordered by partition id, and why the others were left out."""

    node_ids: list[int]
    partition_ids: list[int]
    num_examples: list[int]
    features: np.ndarray | None
    rejected: dict[int, str] = field(default_factory=dict)
    bytes_up: list[int] = field(default_factory=list)
    client_seconds: list[float] = field(default_factory=list)
    num_test: list[int] = field(default_factory=list)  # test split sizes (0: not reported)
    sources: list[str] = field(default_factory=list)  # "benchmark" | "local", by row
    names: list[str] = field(default_factory=list)  # the nodes' own names (local data)

    def __len__(self) -> int:
        return len(self.node_ids)

    def select(self, rows: Sequence[int]) -> QueryResult:
        """The clients at ``rows`` (in that order); no rejections carried over."""
        rows = [int(r) for r in rows]
        return QueryResult(
            node_ids=[self.node_ids[r] for r in rows],
            partition_ids=[self.partition_ids[r] for r in rows],
            num_examples=[self.num_examples[r] for r in rows],
            features=None if self.features is None else self.features[rows],
            bytes_up=[self.bytes_up[r] for r in rows] if self.bytes_up else [],
            client_seconds=[self.client_seconds[r] for r in rows] if self.client_seconds else [],
            num_test=[self.num_test[r] for r in rows] if self.num_test else [],
            sources=[self.sources[r] for r in rows] if self.sources else [],
            names=[self.names[r] for r in rows] if self.names else [],
        )

    def extend(self, other: QueryResult) -> None:
        """Append ``other``'s clients (late joiners) after the current ones."""
        self.node_ids += other.node_ids
        self.partition_ids += other.partition_ids
        self.num_examples += other.num_examples
        if other.features is not None:
            self.features = (
                other.features
                if self.features is None or not len(self.features)
                else np.concatenate([self.features, other.features])
            )
        self.bytes_up += other.bytes_up
        self.client_seconds += other.client_seconds
        self.num_test += other.num_test
        self.sources += other.sources
        self.names += other.names
        self.rejected.update(other.rejected)

    def cap_sizes(self, cap: int) -> list[int]:
        """Hold every reported size to ``cap`` (a multiple of the median); the rows capped."""
        capped = [
            r
            for r in range(len(self))
            if self.num_examples[r] > cap or (self.num_test and self.num_test[r] > cap)
        ]
        self.num_examples = [min(n, cap) for n in self.num_examples]
        self.num_test = [min(n, cap) for n in self.num_test]
        return capped

    def known_train(self, row: int) -> int | None:
        """The training split size the client reported once, in the query round."""
        n = self.num_examples[row] if row < len(self.num_examples) else 0
        return int(n) if n > 0 else None

    def known_tests(self) -> list[int | None]:
        """The test split sizes reported in the query round, by row (``None``: unknown)."""
        return [int(n) if n > 0 else None for n in self.num_test] or [None] * len(self)


def validate_summary(record: RecordDict, kind: str, dim: int | None) -> np.ndarray | None:
    """The summary vector of a query reply, or ``ValueError`` saying what is wrong with it."""
    if kind == "none":
        return None
    if "summary" not in record.array_records or "phi" not in record.array_records["summary"]:
        raise ValueError(f"reply has no {kind} summary")
    array = record.array_records["summary"]["phi"]
    # Before decoding: the bytes must fit the promised length (a header may claim 2**40 floats).
    if dim is not None and (
        tuple(array.shape) != (dim,) or len(array.data) > dim * 8 + NPY_HEADER_LIMIT
    ):
        raise ValueError(
            f"{kind} is declared {tuple(array.shape)} in {len(array.data)} bytes, expected ({dim},)"
        )
    phi = array.numpy()
    if phi.ndim != 1 or (dim is not None and phi.shape[0] != dim):
        raise ValueError(f"{kind} has shape {phi.shape}, expected ({dim},)")
    if not np.issubdtype(phi.dtype, np.floating):
        raise ValueError(f"{kind} has dtype {phi.dtype}, expected floats")
    if not np.all(np.isfinite(phi)):
        raise ValueError(f"{kind} contains NaN or Inf")
    return phi.astype(np.float32, copy=False)


def _read_query_reply(
    msg: Message,
    nid: int,
    kind: str,
    dim: int | None,
    num_partitions: int,
    local: LocalData | None,
) -> tuple[tuple, int, tuple | None]:
    """One query reply's fields, converted and checked: (row, partition id, local claim).

    Raises one of ``REPLY_ERRORS`` naming the field; never anything else.
    """
    info = msg.content.config_records["info"]
    source = "benchmark" if local is None else "local"
    got = as_text(info.get("data", "benchmark"), "data", limit=16)
    if got != source:
        raise ValueError(f"node uses {got} data, the run {source} data")
    n_node = as_count(info.get("num-partitions", num_partitions), "num-partitions")
    if n_node != num_partitions:
        raise ValueError(f"node has num-partitions={n_node}, run has {num_partitions}")
    phi = validate_summary(msg.content, kind, dim)
    row = (
        nid,
        as_count(info.get("num-examples", 0), "num-examples", low=0),  # 0: not reported
        phi,
        message_nbytes(msg),
        as_number(info.get("seconds", 0.0), "seconds", low=0.0, high=MAX_SECONDS),
        # Optional (0: not reported; the evaluation's own count is then used, within bounds).
        as_count(info.get("num-test-examples", 0), "num-test-examples", low=0),
    )
    if local is not None:
        name, held_out = check_local_info(info, local)
        return row, -1, (name, nid, held_out, (*row, name))
    pid = as_count(info["partition-id"], "partition-id", low=0, high=num_partitions - 1)
    return (*row, ""), pid, None


def query_round(
    grid: Grid,
    node_ids: Sequence[int],
    kind: str,
    dim: int | None,
    num_partitions: int,
    timeout: float,
    taken: Iterable[int] = (),
    extra: dict[str, Any] | None = None,
    local: LocalData | None = None,
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
            RecordDict({"config": ConfigRecord({"summary": kind}), **(extra or {})}),
            dst_node_id=int(nid),
            message_type=QUERY_TYPE,
        )
        for nid in node_ids
    ]
    replies = send_and_receive(grid, messages, timeout)
    # Match each reply to the message it answers (ids are set when pushed), not to its sender.
    asked = {str(m.metadata.message_id): int(m.metadata.dst_node_id) for m in messages}
    rejected: dict[int, str] = {}
    rows: dict[int, tuple] = {}
    claims: dict[int, list[tuple]] = {}
    pending: list[tuple[str, int, bool, tuple]] = []
    answered = set()
    source = "benchmark" if local is None else "local"
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
        elif pid in taken:
            rejected[nid] = f"partition-id {pid} is already held by another node of the run"
        else:
            claims.setdefault(pid, []).append(row)
    for pid, claimants in claims.items():
        if len(claimants) == 1:
            rows[pid] = claimants[0]
            continue
        # Two nodes claim one partition: neither is trusted with it (first come is not proof).
        nodes = ", ".join(str(r[0]) for r in claimants)
        for r in claimants:
            rejected[r[0]] = f"partition-id {pid} is claimed by several nodes ({nodes})"
    if local is not None:
        assign_local(rows, pending, local, num_partitions, taken, rejected)
    for nid in node_ids:
        if int(nid) not in answered:
            rejected[int(nid)] = f"no reply to the query round within {timeout:g} s"
    for nid, reason in sorted(rejected.items()):
        log.warning("node %d left out of training: %s", nid, reason)
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


class ClientRoster:
    """Who takes part: the training clients (partition order) and the held-out new clients.

    Parameters
    ----------
    settings : RunSettings
        The run (partitions, new clients, timeouts, clients per round).
    summary_kind : str
        What the one-shot round asks each node for (``embedding | mean | none``).
    summary_dim : int, optional
        The summary's length, checked on every reply.
    """

    def __init__(self, settings: RunSettings, summary_kind: str, summary_dim: int | None) -> None:
        self.settings = settings
        self.summary_kind = summary_kind
        self.summary_dim = summary_dim
        self.clients: QueryResult | None = None
        self.new_clients = QueryResult([], [], [], None)
        self.known_nodes: set[int] = set()
        self.joined: list[dict[str, Any]] = []
        self.query_seconds = 0.0
        self.query_records: dict[str, Any] = {}  # sent with every query (public DP mechanism)
        self.size_cap = 0  # the most examples any client is weighted by (0: not yet known)
        self.capped: dict[int, int] = {}  # partition -> the size it claimed, when capped
        self.local: LocalData | None = None  # set when the nodes bring their own data

    def prepare(self, grid: Grid) -> QueryResult:
        """Wait for the nodes, run the one-shot round, keep the usable clients.

        Nodes holding a held-out partition (``partition-id >= num-partitions``)
        are set aside as new clients: they never train and are onboarded
        zero-shot after training.
        """
        s = self.settings
        node_ids = wait_for_nodes(
            grid,
            s.num_partitions,
            s.node_wait_timeout,
            allowed=s.total_partitions,
            local=self.local is not None,
        )
        t0 = time.perf_counter()
        everyone = query_round(
            grid,
            node_ids,
            self.summary_kind,
            self.summary_dim,
            s.total_partitions,
            s.round_timeout,
            extra=self.query_records,
            local=self.local,
        )
        self.query_seconds = time.perf_counter() - t0
        self.known_nodes.update(int(n) for n in node_ids)
        self.size_cap = size_cap(everyone.num_examples)
        self._cap(everyone)
        clients, new = split_new(everyone, s.num_partitions)
        clients.rejected = everyone.rejected
        self.new_clients = new
        reasons = "; ".join(f"node {n}: {r}" for n, r in list(clients.rejected.items())[:5])
        if len(clients) < MIN_CLIENTS:
            raise NotEnoughClientsError(
                f"no usable training client after the query round (the run needs at least "
                f"{MIN_CLIENTS}). Left out: {reasons}"
            )
        if len(clients) < s.clients_per_round:
            log.warning(
                "only %d usable clients after the query round but clients-per-round=%d: "
                "every round trains all %d. Left out: %s",
                len(clients),
                s.clients_per_round,
                len(clients),
                reasons,
            )
        log.info(
            "query round: %d clients usable, %d held out for zero-shot onboarding, "
            "%d left out (%.2f s)",
            len(clients),
            len(new),
            len(clients.rejected),
            self.query_seconds,
        )
        self.clients = clients
        return clients

    def admit_late_joiners(self, grid: Grid, server_round: int) -> QueryResult | None:
        """Query nodes that connected since the last look; return the new training clients.

        Only the newcomers get a message; the clients already in the run see
        nothing of it. A newcomer that fails its query is left out and not
        asked again. Held-out partitions among them join ``new_clients``.
        """
        fresh = sorted(int(n) for n in grid.get_node_ids() if int(n) not in self.known_nodes)
        if not fresh:
            return None
        s = self.settings
        taken = list(self.clients.partition_ids) + list(self.new_clients.partition_ids)
        t0 = time.perf_counter()
        result = query_round(
            grid,
            fresh,
            self.summary_kind,
            self.summary_dim,
            s.total_partitions,
            s.round_timeout,
            taken=taken,
            extra=self.query_records,
            local=self.local,
        )
        self.known_nodes.update(fresh)
        self._cap(result)  # a late joiner is held to the cap the first round set
        train, new = split_new(result, s.num_partitions)
        self.clients.rejected.update(result.rejected)
        if len(new):
            self.new_clients.extend(new)
        self.joined.append(
            {
                "round": server_round,
                "partitions": list(train.partition_ids),
                "new_clients": list(new.partition_ids),
                "rejected": {str(n): r for n, r in result.rejected.items()},
                "seconds": time.perf_counter() - t0,
            }
        )
        log.info(
            "round %d: %d late node(s) joined (training partitions %s, new clients %s, "
            "%d left out)",
            server_round,
            len(fresh),
            list(train.partition_ids),
            list(new.partition_ids),
            len(result.rejected),
        )
        return train if len(train) else None

    def _cap(self, result: QueryResult) -> None:
        claimed = {r: (result.num_examples[r], result.num_test[r]) for r in range(len(result))}
        for row in result.cap_sizes(self.size_cap):
            pid = result.partition_ids[row]
            self.capped[pid] = max(claimed[row])
            log.warning(
                "partition %d reported %s examples; it is weighted as %d (%.0fx the median)",
                pid,
                "/".join(str(v) for v in claimed[row]),
                self.size_cap,
                SIZE_CAP_FACTOR,
            )

    def to_dict(self) -> dict[str, Any]:
        """The roster as plain data (for a server checkpoint)."""
        return {
            "clients": asdict(self.clients),
            "new_clients": asdict(self.new_clients),
            "known_nodes": sorted(self.known_nodes),
            "joined": self.joined,
            "query_seconds": self.query_seconds,
            "size_cap": self.size_cap,
        }

    def restore(self, saved: dict[str, Any], node_of: dict[int, int]) -> None:
        """The saved training clients, with node ids from this process's query round where known.

        Held-out new clients are not restored: they never trained, and those of
        this process's query round (possibly other ones, with other data:
        ``new-clients`` and ``alpha-new`` may change on resume) are the ones
        to onboard, with the summaries they just sent.
        """

        def result(d: dict[str, Any]) -> QueryResult:
            q = QueryResult(**d)
            q.node_ids = [
                node_of.get(p, n) for p, n in zip(q.partition_ids, q.node_ids, strict=True)
            ]
            q.rejected = {int(k): v for k, v in q.rejected.items()}
            return q

        self.clients = result(saved["clients"])
        self.size_cap = int(saved.get("size_cap") or size_cap(self.clients.num_examples))
        self.known_nodes |= {int(n) for n in saved["known_nodes"]}
        self.joined = list(saved["joined"])

    def record(self) -> dict[str, Any]:
        """Who took part, for the results file."""
        c = self.clients
        return {
            "partition_ids": list(c.partition_ids) if c else [],
            "node_ids": [str(n) for n in c.node_ids] if c else [],
            "data_sources": list(c.sources) if c else [],
            "names": list(c.names) if c else [],
            "left_out": {str(n): r for n, r in (c.rejected.items() if c else [])},
            "size_cap": self.size_cap,
            "sizes_capped": {str(p): n for p, n in sorted(self.capped.items())},
        }
