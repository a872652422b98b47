"""Shared machinery of every strategy of the app: nodes, the one-shot round, replies, bookkeeping.

One mixin, :class:`FederationRun`, gives each strategy (Ripple, the oracle,
FedAvg, local-only) the same run: a bounded wait for the nodes, the one-shot
query round that maps nodes to partitions (and collects the summaries Ripple
routes with), seeded client sampling, reply validation in one place, and
personalised evaluation every ``eval-every`` rounds with byte and time
accounting. A strategy only says which model each client receives and how
the replies update the server state.
"""

from __future__ import annotations

import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid

from ripple_flwr.config import RunSettings
from ripple_flwr.mixing import uniform_sample
from ripple_flwr.records import record_to_state, state_to_record
from ripple_flwr.results import array_nbytes, arrayrecord_nbytes, client_stats, message_nbytes

log = logging.getLogger("flwr.ripple")

QUERY_TYPE = f"{MessageType.QUERY}.embed"
_SAMPLER_KEY = 0x5A4D  # SeedSequence key of the client sampler (same for every method)


class NotEnoughClientsError(RuntimeError):
    """Too few usable clients to run the configured federation."""


# -- grid helpers -----------------------------------------------------------------------------
def send_and_receive(
    grid: Grid, messages: Sequence[Message], timeout: float, poll: float = 0.1
) -> list[Message]:
    """Push, then pull replies until all arrived or ``timeout`` passed.

    Flower's own ``send_and_receive`` sleeps 3 s between pulls, which would
    dominate short rounds; this polls every ``poll`` seconds instead.
    """
    messages = list(messages)
    if not messages:
        return []
    pending = {mid for mid in grid.push_messages(messages) if mid}
    replies: list[Message] = []
    end = time.monotonic() + timeout
    while pending:
        got = list(grid.pull_messages(list(pending)))
        replies.extend(got)
        pending.difference_update(m.metadata.reply_to_message_id for m in got)
        if not pending or time.monotonic() >= end:
            break
        time.sleep(poll)
    return replies


class PollingGrid(Grid):
    """A grid that forwards everything to ``inner`` but polls replies quickly."""

    def __init__(self, inner: Grid, poll: float = 0.1) -> None:
        self.inner = inner
        self.poll = poll

    def set_run(self, run) -> None:  # pragma: no cover - the runtime sets it on the inner grid
        self.inner.set_run(run)

    @property
    def run(self):  # pragma: no cover
        return self.inner.run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return self.inner.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self.inner.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.inner.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.inner.pull_messages(message_ids)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        return send_and_receive(
            self.inner, list(messages), math.inf if timeout is None else timeout, self.poll
        )


def wait_for_nodes(
    grid: Grid,
    expected: int,
    timeout: float,
    poll: float = 1.0,
    hint_every: float = 10.0,
    allowed: int | None = None,
) -> list[int]:
    """Node ids once ``expected`` nodes are connected; a clear error after ``timeout`` s.

    ``allowed`` (default ``expected``) is how many nodes the run can use at
    most (training plus new clients); more than that gets a warning.
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


# -- the one-shot round ----------------------------------------------------------------------
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
        self.rejected.update(other.rejected)


def validate_summary(record: RecordDict, kind: str, dim: int | None) -> np.ndarray | None:
    """The summary vector of a query reply, or ``ValueError`` saying what is wrong with it."""
    if kind == "none":
        return None
    if "summary" not in record.array_records or "phi" not in record.array_records["summary"]:
        raise ValueError(f"reply has no {kind} summary")
    phi = record.array_records["summary"]["phi"].numpy()
    if phi.ndim != 1 or (dim is not None and phi.shape[0] != dim):
        raise ValueError(f"{kind} has shape {phi.shape}, expected ({dim},)")
    if not np.issubdtype(phi.dtype, np.floating):
        raise ValueError(f"{kind} has dtype {phi.dtype}, expected floats")
    if not np.all(np.isfinite(phi)):
        raise ValueError(f"{kind} contains NaN or Inf")
    return phi.astype(np.float32, copy=False)


def query_round(
    grid: Grid,
    node_ids: Sequence[int],
    kind: str,
    dim: int | None,
    num_partitions: int,
    timeout: float,
    taken: Iterable[int] = (),
) -> QueryResult:
    """Ask every node once for its partition id (and summary); validate every reply.

    ``num_partitions`` counts every partition of the run (training and new
    clients). A node that errors, does not answer within ``timeout``, reports
    a partition outside the run or one already taken (here or in ``taken``),
    or sends a summary of the wrong length or with NaN/Inf is left out with
    its reason logged; its summary never reaches the router.
    """
    taken = set(int(t) for t in taken)
    messages = [
        Message(
            RecordDict({"config": ConfigRecord({"summary": kind})}),
            dst_node_id=int(nid),
            message_type=QUERY_TYPE,
        )
        for nid in node_ids
    ]
    replies = send_and_receive(grid, messages, timeout)
    rejected: dict[int, str] = {}
    rows: dict[int, tuple[int, int, np.ndarray | None, int, float]] = {}
    answered = set()
    for msg in replies:
        nid = int(msg.metadata.src_node_id)
        answered.add(nid)
        if msg.has_error():
            rejected[nid] = f"error in query round: {msg.error.reason}"
            continue
        try:
            info = msg.content.config_records["info"]
            pid = int(info["partition-id"])
            if not 0 <= pid < num_partitions:
                raise ValueError(f"partition-id {pid} outside [0, {num_partitions})")
            if int(info.get("num-partitions", num_partitions)) != num_partitions:
                raise ValueError(
                    f"node has num-partitions={info['num-partitions']}, run has {num_partitions}"
                )
            if pid in rows:
                raise ValueError(f"partition-id {pid} already held by node {rows[pid][0]}")
            if pid in taken:
                raise ValueError(f"partition-id {pid} already held by another node of the run")
            phi = validate_summary(msg.content, kind, dim)
        except (KeyError, ValueError, TypeError) as err:
            rejected[nid] = f"invalid query reply: {err}"
            continue
        rows[pid] = (
            nid,
            int(info.get("num-examples", 0)),
            phi,
            message_nbytes(msg),
            float(info.get("seconds", 0.0)),
        )
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
    )


# -- train replies ------------------------------------------------------------------------------
def validate_train_reply(
    msg: Message, reference: dict[str, tuple[tuple[int, ...], np.dtype]]
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


def state_reference(state: dict[str, np.ndarray]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    return {k: (tuple(v.shape), v.dtype) for k, v in state.items()}


# -- the run mixin ------------------------------------------------------------------------------
@dataclass
class Accepted:
    """One valid training reply: the row (client) it came from and what it carried."""

    row: int
    state: dict[str, np.ndarray]
    num_examples: int
    train_loss: float
    message: Message


class FederationRun(ABC):
    """Mixin for a :class:`flwr.serverapp.strategy.Strategy` run over the app's clients.

    Subclasses set ``summary_kind`` and implement :meth:`train_payloads`,
    :meth:`apply_updates` and :meth:`eval_payloads`; they may override
    :meth:`setup` and :meth:`sample_rows`.
    """

    summary_kind: str = "none"
    summary_dim: int | None = None

    def _init_run(self, settings: RunSettings, reference: dict[str, np.ndarray]) -> None:
        self.settings = settings
        self.reference = state_reference(reference)
        self.rng = np.random.default_rng(np.random.SeedSequence([settings.seed, _SAMPLER_KEY]))
        self.clients: QueryResult | None = None
        self.num_rounds = settings.num_server_rounds
        self.history: dict[str, Any] = {"rounds": [], "evaluations": []}
        self.timings = {"query": 0.0, "rounds": 0.0, "evaluation": 0.0}
        self._pending: dict[int, int] = {}
        self._current: dict[str, Any] = {}
        self._eval_pending: dict[int, int] = {}
        self._eval_current: dict[str, Any] = {}
        self.new_clients: QueryResult = QueryResult([], [], [], None)
        self.known_nodes: set[int] = set()
        self.joined: list[dict[str, Any]] = []
        self.zero_shot_record: dict[str, Any] = {}
        self.final_global: ArrayRecord | None = None

    # -- hooks ---------------------------------------------------------------------------
    def setup(self, clients: QueryResult) -> None:
        """Called once after the query round, before round 1 (nothing to do by default)."""
        return None

    def sample_rows(self, server_round: int) -> np.ndarray:
        """Rows (clients) trained this round: uniform without replacement by default."""
        return uniform_sample(len(self.clients), self.settings.clients_per_round, self.rng)

    @abstractmethod
    def train_payloads(self, rows: np.ndarray, arrays: ArrayRecord) -> list[ArrayRecord]:
        """One model per sampled row, in row order."""

    @abstractmethod
    def apply_updates(self, server_round: int, accepted: list[Accepted]) -> ArrayRecord | None:
        """Fold the validated replies of a round into the server's models."""

    @abstractmethod
    def eval_payloads(self, arrays: ArrayRecord) -> list[ArrayRecord]:
        """The model each client is evaluated with, in client order."""

    def add_clients(self, joined: QueryResult) -> None:
        """Training clients that connected after the one-shot round join from the next round."""
        self.clients.extend(joined)

    def onboard_payloads(self, new: QueryResult) -> list[ArrayRecord] | None:
        """The zero-shot model of each new client (``None``: the method has none)."""
        return None

    def reference_models(self) -> list[ArrayRecord]:
        """Every model the server holds, for the best-by-loss reference (none by default)."""
        return []

    # -- run -----------------------------------------------------------------------------
    def prepare(self, grid: Grid) -> QueryResult:
        """Wait for the nodes, run the one-shot round, keep the usable clients.

        Nodes holding a held-out partition (``partition-id >= num-partitions``)
        are set aside as new clients: they never train and are onboarded
        zero-shot after training.
        """
        s = self.settings
        node_ids = wait_for_nodes(
            grid, s.num_partitions, s.node_wait_timeout, allowed=s.total_partitions
        )
        t0 = time.perf_counter()
        everyone = query_round(
            grid, node_ids, self.summary_kind, self.summary_dim, s.total_partitions, s.round_timeout
        )
        self.timings["query"] = time.perf_counter() - t0
        self.known_nodes.update(int(n) for n in node_ids)
        clients, new = self._split_new(everyone)
        clients.rejected = everyone.rejected
        self.new_clients = new
        if len(clients) < s.clients_per_round:
            reasons = "; ".join(f"node {n}: {r}" for n, r in list(clients.rejected.items())[:5])
            raise NotEnoughClientsError(
                f"only {len(clients)} usable clients after the query round, but "
                f"clients-per-round={s.clients_per_round}. Left out: {reasons}"
            )
        log.info(
            "query round: %d clients usable, %d held out for zero-shot onboarding, "
            "%d left out (%.2f s)",
            len(clients),
            len(new),
            len(clients.rejected),
            self.timings["query"],
        )
        self.clients = clients
        self.setup(clients)
        return clients

    def _split_new(self, result: QueryResult) -> tuple[QueryResult, QueryResult]:
        """(training clients, new clients) of a query round, by partition id."""
        n = self.settings.num_partitions
        train = [i for i, p in enumerate(result.partition_ids) if p < n]
        new = [i for i, p in enumerate(result.partition_ids) if p >= n]
        return result.select(train), result.select(new)

    def admit_late_joiners(self, grid: Grid, server_round: int) -> None:
        """Query nodes that connected since the last look; they join from this round on.

        Only the newcomers get a message; the clients already in the run see
        nothing of it. A newcomer that fails its query is left out and not asked again.
        """
        fresh = sorted(int(n) for n in grid.get_node_ids() if int(n) not in self.known_nodes)
        if not fresh:
            return
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
        )
        self.known_nodes.update(fresh)
        train, new = self._split_new(result)
        self.clients.rejected.update(result.rejected)
        if len(train):
            self.add_clients(train)
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

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float | None = None,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn=None,
    ):
        """The one-shot round, then Flower's round loop on a quickly polling grid.

        ``timeout`` (per round) defaults to the run's ``round-timeout``.
        """
        self.num_rounds = num_rounds
        timeout = self.settings.round_timeout if timeout is None else timeout
        if self.clients is None:
            self.prepare(grid)
        result = super().start(  # type: ignore[misc]
            PollingGrid(grid),
            initial_arrays,
            num_rounds,
            timeout,
            train_config,
            evaluate_config,
            evaluate_fn,
        )
        self.final_global = result.arrays
        if self.settings.new_clients:
            self.zero_shot(grid)
        return result

    # -- training --------------------------------------------------------------------------
    def _train_config(self, server_round: int) -> ConfigRecord:
        s = self.settings
        return ConfigRecord(
            {
                "server-round": server_round,
                "lr": float(s.lr),
                "momentum": float(s.momentum),
                "local-epochs": s.local_epochs,
                "batch-size": s.batch_size,
            }
        )

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One message per sampled client, each carrying the model that client receives."""
        self.admit_late_joiners(grid, server_round)
        t0 = time.perf_counter()
        rows = self.sample_rows(server_round)
        payloads = self.train_payloads(rows, arrays)
        cfg = self._train_config(server_round)
        messages = []
        self._pending = {}
        for row, payload in zip(rows, payloads, strict=True):
            nid = self.clients.node_ids[int(row)]
            self._pending[nid] = int(row)
            messages.append(
                Message(
                    RecordDict({"arrays": payload, "config": cfg}),
                    dst_node_id=nid,
                    message_type=MessageType.TRAIN,
                )
            )
        bytes_down = sum(arrayrecord_nbytes(p) for p in payloads)
        self._current = {
            "round": server_round,
            "sampled": [self.clients.partition_ids[int(r)] for r in rows],
            "bytes_down": bytes_down,
            "server_seconds": time.perf_counter() - t0,
            "t_start": time.perf_counter(),
        }
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Validate every reply in one place, drop the bad ones, then apply the good ones."""
        t0 = time.perf_counter()
        replies = list(replies)
        accepted: list[Accepted] = []
        dropped: list[dict[str, Any]] = []
        seen = set()
        bytes_up = 0
        for msg in replies:
            nid = int(msg.metadata.src_node_id)
            bytes_up += message_nbytes(msg)
            row = self._pending.get(nid)
            if row is None or nid in seen:
                log.warning("round %d: ignoring unexpected reply from node %d", server_round, nid)
                continue
            seen.add(nid)
            try:
                state, n, loss = validate_train_reply(msg, self.reference)
            except ValueError as err:
                pid = self.clients.partition_ids[row]
                log.warning("round %d: dropped reply of partition %d: %s", server_round, pid, err)
                dropped.append({"partition": pid, "reason": str(err)})
                continue
            accepted.append(Accepted(row, state, n, loss, msg))
        for nid, row in self._pending.items():
            if nid not in seen:
                pid = self.clients.partition_ids[row]
                reason = f"no reply within round-timeout={self.settings.round_timeout:g} s"
                log.warning("round %d: partition %d: %s", server_round, pid, reason)
                dropped.append({"partition": pid, "reason": reason})
        arrays = self.apply_updates(server_round, accepted) if accepted else None
        total = sum(a.num_examples for a in accepted)
        losses = [(a.train_loss, a.num_examples) for a in accepted if math.isfinite(a.train_loss)]
        loss = sum(v * n for v, n in losses) / sum(n for _, n in losses) if losses else math.nan
        cur = self._current
        cur["server_seconds"] += time.perf_counter() - t0
        cur.update(
            {
                "wall_seconds": time.perf_counter() - cur.pop("t_start", time.perf_counter()),
                "bytes_up": bytes_up,
                "received": len(accepted),
                "dropped": dropped,
                "train_loss": loss,
                "num_examples": total,
            }
        )
        self.timings["rounds"] += cur["wall_seconds"]
        self.history["rounds"].append(cur)
        log.info(
            "round %d/%d: %d/%d replies used, train loss %.4f, %.2f MB down, %.2f MB up",
            server_round,
            self.num_rounds,
            len(accepted),
            len(self._pending),
            loss,
            cur["bytes_down"] / 2**20,
            bytes_up / 2**20,
        )
        metrics = MetricRecord({"train_loss": loss, "num-examples": total}) if accepted else None
        return arrays, metrics

    # -- evaluation ------------------------------------------------------------------------
    def is_eval_round(self, server_round: int) -> bool:
        return server_round % self.settings.eval_every == 0 or server_round == self.num_rounds

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Every client gets the model it would receive, on eval rounds only."""
        if not self.is_eval_round(server_round):
            return []
        payloads = self.eval_payloads(arrays)
        messages = evaluate_messages(self.clients.node_ids, payloads, server_round)
        self._eval_pending = {int(nid): row for row, nid in enumerate(self.clients.node_ids)}
        self._eval_current = {
            "round": server_round,
            "bytes_down": sum(arrayrecord_nbytes(p) for p in payloads),
            "t_start": time.perf_counter(),
        }
        return messages

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Sample-weighted mean and spread of the clients' personalised accuracies."""
        if not self._eval_pending:
            return None
        per_client, failed = collect_evaluations(replies, self._eval_pending, self.clients)
        self._eval_pending = {}
        acc = client_stats(
            [c["accuracy"] for c in per_client], [c["num_examples"] for c in per_client]
        )
        loss = client_stats(
            [c["loss"] for c in per_client], [c["num_examples"] for c in per_client]
        )
        cur = self._eval_current
        cur["wall_seconds"] = time.perf_counter() - cur.pop("t_start", time.perf_counter())
        cur.update({"accuracy": acc, "loss": loss, "clients": per_client, "failed": failed})
        self.timings["evaluation"] += cur["wall_seconds"]
        self.history["evaluations"].append(cur)
        log.info(
            "round %d/%d: personalised accuracy %.4f (weighted mean over %d clients, "
            "std %.4f, min %.4f)",
            server_round,
            self.num_rounds,
            acc["weighted_mean"],
            len(per_client),
            acc["std"],
            acc["min"],
        )
        if not per_client:
            return None
        return MetricRecord(
            {
                "accuracy": acc["weighted_mean"],
                "accuracy-std": acc["std"],
                "loss": loss["weighted_mean"],
                "num-examples": sum(c["num_examples"] for c in per_client),
            }
        )

    # -- zero-shot onboarding ------------------------------------------------------------
    def zero_shot(self, grid: Grid) -> None:
        """After training: each new client gets its zero-shot model once and scores it.

        The model comes from the summary the client sent once (one batched
        router pass, then mixing): no gradient, no model evaluation in the
        choice, no message to any training client. With ``best-by-loss`` every
        model the server holds is also scored on each new client and the one
        with the lowest loss kept: the oracle advantage the paper gives baselines.
        """
        s = self.settings
        self.admit_late_joiners(grid, self.num_rounds + 1)
        new = self.new_clients
        rec: dict[str, Any] = {"clients": len(new), "partition_ids": list(new.partition_ids)}
        self.zero_shot_record = rec
        if not len(new):
            log.warning(
                "new-clients=%d but no new client answered; no zero-shot score", s.new_clients
            )
            return
        t0 = time.perf_counter()
        payloads = self.onboard_payloads(new)
        server_seconds = time.perf_counter() - t0
        if payloads is None:
            log.info("%s has no zero-shot model for new clients", type(self).__name__)
            rec["supported"] = False
            return
        t0 = time.perf_counter()
        per_client, failed = evaluate_on(grid, new, payloads, self.num_rounds, s.round_timeout)
        embed = float(np.mean(new.client_seconds)) if new.client_seconds else 0.0
        rec.update(
            {
                "supported": True,
                "accuracy": client_stats(
                    [c["accuracy"] for c in per_client], [c["num_examples"] for c in per_client]
                ),
                "per_client": per_client,
                "failed": failed,
                "server_seconds": server_seconds,
                "onboard_ms_per_client": 1000.0 * (embed + server_seconds / len(new)),
                "evaluation_seconds": time.perf_counter() - t0,
            }
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
        refs = self.reference_models()
        if s.best_by_loss and len(refs) > 1:
            rec["best_by_loss"] = best_by_loss(grid, new, refs, self.num_rounds, s.round_timeout)
            log.info(
                "zero-shot best-by-loss over %d models (reference): accuracy %.4f",
                len(refs),
                rec["best_by_loss"]["accuracy"]["weighted_mean"],
            )

    def summary(self) -> None:
        s = self.settings
        log.info(
            "\t├──> %s: %d clients/round of %d, %d rounds, eval every %d, seed %d",
            type(self).__name__,
            s.clients_per_round,
            s.num_partitions,
            self.num_rounds,
            s.eval_every,
            s.seed,
        )

    # -- results ---------------------------------------------------------------------------
    def run_record(self) -> dict[str, Any]:
        """What the results file needs from the strategy."""
        c = self.clients
        return {
            "clients": {
                "partition_ids": list(c.partition_ids) if c else [],
                "node_ids": [str(n) for n in c.node_ids] if c else [],
                "left_out": {str(n): r for n, r in (c.rejected.items() if c else [])},
            },
            "rounds": self.history["rounds"],
            "evaluations": self.history["evaluations"],
            "timings": dict(self.timings),
            "late_joiners": self.joined,
            "zero_shot": self.zero_shot_record,
        }


def collect_evaluations(
    replies: Iterable[Message], pending: dict[int, int], clients: QueryResult
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per-client metrics of evaluate replies (sorted by partition) and the failures."""
    per_client, failed = [], []
    for msg in replies:
        row = pending.get(int(msg.metadata.src_node_id))
        if row is None:
            continue
        pid = clients.partition_ids[row]
        try:
            if msg.has_error():
                raise ValueError(msg.error.reason)
            m = msg.content.metric_records["metrics"]
            acc, loss, n = float(m["accuracy"]), float(m["loss"]), int(m["num-examples"])
            if not (math.isfinite(acc) and n > 0):
                raise ValueError(f"bad metrics {dict(m)}")
        except (KeyError, ValueError, TypeError) as err:
            failed.append({"partition": pid, "reason": str(err)})
            continue
        per_client.append({"partition": pid, "accuracy": acc, "loss": loss, "num_examples": n})
    per_client.sort(key=lambda c: c["partition"])
    return per_client, failed


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
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Send ``payloads[i]`` to client ``i`` for evaluation on its own test split."""
    messages = evaluate_messages(clients.node_ids, payloads, server_round)
    pending = {int(nid): row for row, nid in enumerate(clients.node_ids)}
    replies = send_and_receive(grid, messages, timeout)
    per_client, failed = collect_evaluations(replies, pending, clients)
    answered = {c["partition"] for c in per_client} | {f["partition"] for f in failed}
    failed += [
        {"partition": p, "reason": f"no reply within {timeout:g} s"}
        for p in clients.partition_ids
        if p not in answered
    ]
    return per_client, failed


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
            if c["partition"] not in best or c["loss"] < best[c["partition"]]["loss"]:
                best[c["partition"]] = {**c, "model": m}
    chosen = [best[p] for p in sorted(best)]
    return {
        "accuracy": client_stats(
            [c["accuracy"] for c in chosen], [c["num_examples"] for c in chosen]
        ),
        "per_client": chosen,
        "models": len(models),
    }


def states_to_records(states: Sequence[dict[str, np.ndarray]]) -> list[ArrayRecord]:
    return [state_to_record(s) for s in states]


def summary_nbytes(phi: np.ndarray | None) -> int:
    return 0 if phi is None else array_nbytes(phi)
