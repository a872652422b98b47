"""What every method of the app shares: admission, seeded sampling, evaluation, accounting,
its declared options and state, and the one round loop.

:class:`AppStrategy` is a Flower ``Strategy``. Its ``__init__`` is cooperative
(``super().__init__(**kwargs)`` reaches the Flower class that follows it in a
method's bases, as Flower's own classes chain), and so is :meth:`summary`.
It owns no training rule:
:class:`~ripple_flwr.app.strategies.core.server_models.ServerModels` (methods
whose models live in the strategy: Ripple, local-only) and
:class:`~ripple_flwr.app.strategies.core.flower.FlowerModel` (Flower's one-model
strategies, run as Flower wrote them) add the two halves of a round.

A method declares, in its own class body:

- ``options``: the run-config keys it reads (:class:`~ripple_flwr.settings.Option`);
- ``state_fields``: the attributes it keeps between rounds, saved and restored
  on resume by one mechanism (numpy arrays, dicts, lists, scalars and Flower's
  ``ArrayRecord``); the lists of all bases are joined;
- ``check_settings``: its own rules on the settings (Krum: ``clients-per-round``).
"""

from __future__ import annotations

import logging
import math
import time
from abc import abstractmethod
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from ripple_flwr.aggregation.mixing import uniform_sample
from ripple_flwr.aggregation.robust import (
    out_of_bound,
    out_of_rescale,
    state_norm,
    update_stats,
)
from ripple_flwr.app.candidates import Payload, payload_nbytes, payload_size
from ripple_flwr.app.records import record_to_state, state_to_record
from ripple_flwr.app.strategies.core.accounting import (
    Dropped,
    EvaluationRecord,
    Ledger,
    RoundRecord,
)
from ripple_flwr.app.strategies.core.admission import ClientRoster, QueryResult
from ripple_flwr.app.strategies.core.evaluation import evaluate_messages, score_stats
from ripple_flwr.app.strategies.core.grid import PollingGrid
from ripple_flwr.app.strategies.core.loop import run_rounds
from ripple_flwr.app.strategies.core.replies import (
    Accepted,
    Reference,
    check_train_replies,
    collect_evaluations,
    state_reference,
)
from ripple_flwr.app.strategies.core.restore import restored_fields
from ripple_flwr.app.strategies.core.state import to_plain
from ripple_flwr.runs.results import message_nbytes
from ripple_flwr.runs.resume import save_server_state
from ripple_flwr.settings import Option, RunSettings

log = logging.getLogger("flwr.ripple")

_SAMPLER_KEY = 0x5A4D  # SeedSequence key of the client sampler (same for every method)
# Rounds of accepted update norms and radial steps the update bound remembers.
HISTORY_ROUNDS = 5


def states_to_records(states: Sequence[dict[str, np.ndarray]]) -> list[ArrayRecord]:
    return [state_to_record(s) for s in states]


def client_train_config(settings: RunSettings) -> ConfigRecord:
    """What every training message carries besides the model (Flower's strategies add theirs)."""
    return ConfigRecord(
        {
            "lr": float(settings.lr),
            "momentum": float(settings.momentum),
            "local-epochs": settings.local_epochs,
            "batch-size": settings.batch_size,
        }
    )


class AppStrategy(Strategy):
    """A Flower strategy run over the app's clients.

    Subclasses implement :meth:`eval_payloads`; they may override
    :meth:`setup`, :meth:`sample_rows`, :meth:`add_clients`,
    :meth:`onboard_payloads` and :meth:`reference_models`, and declare
    ``options``, ``state_fields`` and :meth:`check_settings`.
    """

    summary_kind: str = "none"
    summary_dim: int | None = None
    round_offset: int = 0  # rounds already done before this process (a resumed run)
    checkpoint_path: Path | None = None  # where the server state goes every checkpoint-every
    # The run-config keys the method reads; each class lists its own, all bases are joined.
    options: tuple[Option, ...] = ()
    # Attributes that make up the method's server state between rounds (numpy arrays, dicts,
    # lists, scalars, ArrayRecords), saved for resume; each class lists its own, the lists of
    # all bases are joined.
    state_fields: tuple[str, ...] = ("failures", "_accepted_norms", "_accepted_radials")
    # Extra ArrayRecords every training reply must carry, by record name (SCAFFOLD: its
    # control delta); validated like the model, a reply without them is dropped.
    extra_reply_references: dict[str, Reference] = {}  # noqa: RUF012 (read-only default)

    def __init__(
        self, settings: RunSettings, reference: dict[str, np.ndarray], **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)  # the Flower class after this one in the MRO, if any
        self.settings = settings
        self.reference = state_reference(reference)
        self.rng = np.random.default_rng(np.random.SeedSequence([settings.seed, _SAMPLER_KEY]))
        self.num_rounds = settings.num_server_rounds
        self.ledger = Ledger()
        self.roster = ClientRoster(settings, self.summary_kind, self.summary_dim)
        self.final_global: ArrayRecord | None = None
        self._sent_messages: list[tuple[int, Message]] = []  # (row, training message) this round
        self._round: RoundRecord | None = None
        self._round_start = 0.0
        # The accepted replies' update norms and radial steps of the last HISTORY_ROUNDS
        # rounds (oldest first): the yardstick honest clients set for the update bound.
        self._accepted_norms: list[float] = []
        self._accepted_radials: list[float] = []
        self.failures: dict[int, int] = {}  # row -> training rounds failed in a row
        self._eval_sent: list[tuple[int, Message]] = []
        self._eval_candidates: dict[int, int] = {}
        self._eval: EvaluationRecord | None = None
        self._eval_start = 0.0

    # -- what the method declares ---------------------------------------------------------
    @classmethod
    def _joined(cls, attr: str) -> list:
        out: list = []
        for klass in reversed(cls.__mro__):
            for item in klass.__dict__.get(attr, ()):
                if item not in out:
                    out.append(item)
        return out

    @classmethod
    def declared_options(cls) -> tuple[Option, ...]:
        """Every option the method reads (its own and its bases')."""
        return tuple(cls._joined("options"))

    @classmethod
    def declared_state(cls) -> tuple[str, ...]:
        """Every attribute saved for resume (its own and its bases')."""
        return tuple(cls._joined("state_fields"))

    @classmethod
    def check_settings(cls, settings: RunSettings) -> None:
        """The method's own rules on the run's settings: raise ConfigError (none by default)."""
        return None

    # -- who takes part --------------------------------------------------------------------
    @property
    def clients(self) -> QueryResult | None:
        """The training clients, in row order."""
        return self.roster.clients

    @property
    def new_clients(self) -> QueryResult:
        """The held-out clients onboarded zero-shot after training."""
        return self.roster.new_clients

    def prepare(self, grid: Grid) -> QueryResult:
        """Wait for the nodes and run the one-shot round; then :meth:`setup`."""
        self.roster.summary_kind, self.roster.summary_dim = self.summary_kind, self.summary_dim
        clients = self.roster.prepare(grid)
        self.ledger.query_seconds = self.roster.query_seconds
        self.setup(clients)
        return clients

    def admit(self, grid: Grid, server_round: int) -> None:
        """Late joiners that connected since the last look join from this round on."""
        joined = self.roster.admit_late_joiners(grid, server_round)
        if joined is not None:
            self.add_clients(joined)

    # -- hooks -----------------------------------------------------------------------------
    def setup(self, clients: QueryResult) -> None:
        """Called once after the query round, before round 1 (nothing to do by default)."""
        return None

    def active_rows(self) -> np.ndarray:
        """Rows that may be sampled: not failed ``max-failures`` training rounds in a row."""
        limit = self.settings.max_failures
        return np.array(
            [r for r in range(len(self.clients)) if self.failures.get(r, 0) < limit],
            dtype=np.int64,
        )

    def round_size(self, available: int) -> int:
        """Clients per round, fewer when fewer are usable (a smaller round, not a failure)."""
        return min(self.settings.clients_per_round, available)

    def sample_rows(self, server_round: int) -> np.ndarray:
        """Rows (clients) trained this round: uniform without replacement over active rows."""
        active = self.active_rows()
        if not len(active):
            return active
        return active[uniform_sample(len(active), self.round_size(len(active)), self.rng)]

    def add_clients(self, joined: QueryResult) -> None:
        """Training clients that connected after the one-shot round join the roster."""
        self.clients.extend(joined)

    @abstractmethod
    def eval_payloads(self, arrays: ArrayRecord) -> list[Payload]:
        """The model (or candidate models) each client is evaluated with, in client order."""

    def onboard_payloads(self, new: QueryResult) -> list[Payload] | None:
        """The zero-shot model (or candidates) of each new client (``None``: none)."""
        return None

    def reference_models(self) -> list[ArrayRecord]:
        """Every model the server holds, for the best-by-loss reference (none by default)."""
        return []

    def zero_shot_extras(self) -> dict[str, Any]:
        """Method-specific additions to the zero-shot record (Ripple: routing of new clients)."""
        return {}

    @property
    def num_models(self) -> int:
        """How many models the server holds (and could hand a new client)."""
        return 1

    def saved_models(self) -> dict[str, np.ndarray] | None:
        """The models a saved run exports for onboarding, stacked on a leading axis."""
        return None

    # -- the run ---------------------------------------------------------------------------
    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float | None = None,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn=None,
    ) -> Result:
        """The one-shot round, then the app's round loop on a quickly polling grid.

        ``timeout`` (per round) defaults to the run's ``round-timeout``;
        ``train_config`` to the run's client optimiser settings. A resumed run
        continues from the round after :attr:`round_offset` (see
        :func:`~ripple_flwr.app.strategies.core.loop.run_rounds`).
        """
        if evaluate_fn is not None:
            raise ValueError("the app evaluates on the clients; evaluate_fn is not supported")
        self.num_rounds = num_rounds
        timeout = self.settings.round_timeout if timeout is None else timeout
        if train_config is None:
            train_config = client_train_config(self.settings)
        if self.clients is None:
            self.prepare(grid)
        log.info("Starting %s strategy:", type(self).__name__)
        self.summary()
        result = run_rounds(
            self,
            PollingGrid(grid),
            initial_arrays,
            self.round_offset + 1,
            num_rounds,
            timeout,
            train_config,
            ConfigRecord() if evaluate_config is None else evaluate_config,
        )
        # No aggregate at all (every reply refused): the model is still the one it started with.
        if not len(result.arrays):
            result.arrays = initial_arrays
        self.final_global = result.arrays
        own = self.final_arrays()
        if own is not None:
            result.arrays = own
        return result

    def final_arrays(self) -> ArrayRecord | None:
        """The models the strategy holds itself, as the run's result (``None``: Flower's)."""
        return None

    # -- the two halves of a round, shared by both families ---------------------------------
    def begin_round(self, server_round: int, grid: Grid) -> np.ndarray:
        """Admit late joiners and draw this round's rows with the run's seeded sampler."""
        self.admit(grid, server_round)
        self._sent_messages = []  # a round that sends nothing must not wait on the last one's
        self._round_start = time.perf_counter()
        rows = np.asarray(self.sample_rows(server_round), dtype=np.int64)
        self._round = RoundRecord(
            round=server_round, sampled=[self.clients.partition_ids[int(r)] for r in rows]
        )
        return rows

    def record_sent(self, rows: np.ndarray, messages: list[Message]) -> list[Message]:
        """Remember which message went to which row, count the bytes; messages in row order."""
        node_row = {self.clients.node_ids[int(r)]: int(r) for r in rows}
        messages = sorted(messages, key=lambda m: node_row[int(m.metadata.dst_node_id)])
        self._sent_messages = [(node_row[int(m.metadata.dst_node_id)], m) for m in messages]
        self._round.bytes_down = sum(message_nbytes(m) for m in messages)
        self._round.server_seconds = time.perf_counter() - self._round_start
        return messages

    def accept_replies(self, server_round: int, replies: Iterable[Message]) -> list[Accepted]:
        """Validate every reply in one place; the usable ones in row order.

        A reply is matched to the message it answers; its model must pass
        :func:`~ripple_flwr.app.strategies.core.replies.validate_train_reply`; its
        ``num-examples`` is held to the client's training split size from the
        query round; its update must be in proportion with the round's (see
        :func:`ripple_flwr.aggregation.robust.out_of_bound`). Clients that failed
        ``max-failures`` rounds in a row are left out of sampling.
        """
        replies = list(replies)
        self._round.bytes_up = sum(message_nbytes(m) for m in replies)
        # Ids are set when the grid pushes the messages, after configure_train returned them.
        pending = {str(m.metadata.message_id): row for row, m in self._sent_messages}
        accepted, dropped = check_train_replies(
            replies,
            pending,
            self.reference,
            self.clients.partition_ids,
            server_round,
            self.settings.round_timeout,
            extra_references=self.extra_reply_references,
        )
        for a in accepted:
            self._hold_to_known_count(server_round, a)
        kept = []
        for a in accepted:
            reason = self.check_reply(a)
            if reason is None:
                kept.append(a)
                continue
            dropped.append(self._drop(server_round, a, reason))
        accepted, out = self._bound_updates(server_round, kept)
        dropped = sorted(dropped + out, key=lambda d: d.partition)
        self._round.dropped = dropped
        self._count_failures(server_round, accepted, dropped)
        return accepted

    def _hold_to_known_count(self, server_round: int, a: Accepted) -> None:
        """A reply's ``num-examples`` is the client's training split size, whatever it says."""
        known = self.clients.known_train(a.row)
        if known is None or a.num_examples == known:
            return
        log.warning(
            "round %d: partition %d reported num-examples=%d but its training split has %d; "
            "weighting it by %d",
            server_round,
            self.clients.partition_ids[a.row],
            a.num_examples,
            known,
            known,
        )
        a.num_examples = known
        a.message.content.metric_records["metrics"]["num-examples"] = known  # what Flower reads

    def _bound_updates(
        self, server_round: int, accepted: list[Accepted]
    ) -> tuple[list[Accepted], list[Dropped]]:
        """Drop (and name) replies whose update is out of proportion with the round's.

        Two yardsticks (:mod:`ripple_flwr.aggregation.robust`): the update's norm
        and its radial step, each against the low median of this round's and of
        the last :data:`HISTORY_ROUNDS` rounds' accepted replies.
        """
        s = self.settings
        if not accepted or (s.update_norm_factor <= 0 and s.max_update_norm <= 0):
            return accepted, []
        origins = self._origins(accepted)
        model_norm: dict[int, float] = {}  # one norm per distinct model sent
        for o in origins:
            if id(o) not in model_norm:
                model_norm[id(o)] = state_norm(o)
        stats = [update_stats(o, a.state) for o, a in zip(origins, accepted, strict=True)]
        norms = [n for n, _ in stats]
        squares = [max(model_norm[id(o)], 1e-12) ** 2 for o in origins]
        radials = [dot / sq for (_, dot), sq in zip(stats, squares, strict=True)]
        by_norm = out_of_bound(
            norms,
            self._accepted_norms,
            s.update_norm_factor,
            s.max_update_norm,
            model_norms=[model_norm[id(o)] for o in origins],
        )
        by_rescale = out_of_rescale(radials, self._accepted_radials, s.update_norm_factor)
        kept, out = [], []
        for a, norm, radial, r1, r2 in zip(
            accepted, norms, radials, by_norm, by_rescale, strict=True
        ):
            reason = r1 or r2
            if reason is None:
                kept.append((a, norm, radial))
                continue
            out.append(self._drop(server_round, a, reason))
        keep = HISTORY_ROUNDS * max(s.clients_per_round, 1)
        self._accepted_norms = (self._accepted_norms + [n for _, n, _ in kept])[-keep:]
        self._accepted_radials = (self._accepted_radials + [r for _, _, r in kept])[-keep:]
        return [a for a, _, _ in kept], out

    def _origins(self, accepted: list[Accepted]) -> list[dict[str, np.ndarray]]:
        """The model each reply's update is measured from, each record decoded once."""
        sent: dict[int, dict[str, np.ndarray]] = {}
        decoded: dict[int, dict[str, np.ndarray]] = {}  # one decode per shared record
        for row, msg in self._sent_messages:
            record = msg.content.array_records["arrays"]
            if id(record) not in decoded:
                decoded[id(record)] = record_to_state(record)
            sent[row] = decoded[id(record)]
        return [self.update_origin(a, sent[a.row]) for a in accepted]

    def _drop(self, server_round: int, a: Accepted, reason: str) -> Dropped:
        """Log a reply that passed validation but is not used, and record why."""
        pid = self.clients.partition_ids[a.row]
        log.warning("round %d: dropped reply of partition %d: %s", server_round, pid, reason)
        return Dropped(pid, reason)

    def update_origin(self, a: Accepted, sent: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model a reply's update is measured from: what was sent (IFCA: the chosen one)."""
        return sent

    def check_reply(self, a: Accepted) -> str | None:
        """A method's own check of a valid reply: the reason to drop it, or ``None``."""
        return None

    def _count_failures(
        self, server_round: int, accepted: list[Accepted], dropped: list[Dropped]
    ) -> None:
        """Count training rounds each client failed in a row (no reply or a client error)."""
        row_of = {self.clients.partition_ids[r]: r for r, _ in self._sent_messages}
        for a in accepted:
            self.failures.pop(a.row, None)
        for d in dropped:
            if not (d.reason.startswith("no reply") or d.reason.startswith("client error")):
                continue  # a bad reply came back: the node is alive
            row = row_of[d.partition]
            self.failures[row] = self.failures.get(row, 0) + 1
            if self.failures[row] == self.settings.max_failures:
                log.warning(
                    "round %d: partition %d failed %d rounds in a row; left out of sampling "
                    "until it answers an evaluation",
                    server_round,
                    d.partition,
                    self.failures[row],
                )

    def end_round(self, accepted: list[Accepted], server_seconds: float) -> MetricRecord | None:
        """Close the round's record and log it; the train metrics Flower's loop keeps."""
        rec = self._round
        rec.server_seconds += server_seconds
        rec.wall_seconds = time.perf_counter() - self._round_start
        rec.received = len(accepted)
        rec.num_examples = sum(a.num_examples for a in accepted)
        losses = [(a.train_loss, a.num_examples) for a in accepted if math.isfinite(a.train_loss)]
        if losses:
            rec.train_loss = sum(v * n for v, n in losses) / sum(n for _, n in losses)
        self.ledger.add_round(rec)
        log.info(
            "round %d/%d: %d/%d replies used, train loss %.4f, %.2f MB down, %.2f MB up",
            rec.round,
            self.num_rounds,
            len(accepted),
            len(self._sent_messages),
            rec.train_loss,
            rec.bytes_down / 2**20,
            rec.bytes_up / 2**20,
        )
        if not accepted:
            return None
        return MetricRecord({"train_loss": rec.train_loss, "num-examples": rec.num_examples})

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
        self._eval_sent = list(enumerate(messages))
        self._eval_candidates = {row: payload_size(p) for row, p in enumerate(payloads)}
        self._eval = EvaluationRecord(
            round=server_round,
            bytes_down=sum(payload_nbytes(p) for p in payloads),
            expected=len(messages),
        )
        self._eval_start = time.perf_counter()
        return messages

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Sample-weighted mean and spread of the clients' personalised accuracies."""
        try:
            return self._score_round(server_round, replies)
        finally:
            self.maybe_checkpoint(server_round)

    def _score_round(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        if not self._eval_sent:
            return None
        pending = {str(m.metadata.message_id): row for row, m in self._eval_sent}
        self._eval_sent = []
        per_client, failed = collect_evaluations(
            replies,
            pending,
            self.clients.partition_ids,
            self.clients.known_tests(),
            self.settings.round_timeout,
            server_round,
            num_candidates=self._eval_candidates,
        )
        self.scored(server_round, per_client)
        rec = self._eval
        rec.wall_seconds = time.perf_counter() - self._eval_start
        rec.accuracy, rec.loss = score_stats(per_client), score_stats(per_client, "loss")
        rec.clients, rec.failed = per_client, failed
        rec.scored = len(per_client)
        rec.coverage = rec.scored / rec.expected if rec.expected else 0.0
        self.ledger.add_evaluation(rec)
        self._readmit(server_round, per_client)
        log.info(
            "round %d/%d: personalised accuracy %.4f (weighted mean over %d of %d clients, "
            "coverage %.2f; std %.4f, min %.4f)",
            server_round,
            self.num_rounds,
            rec.accuracy["weighted_mean"],
            rec.scored,
            rec.expected,
            rec.coverage,
            rec.accuracy["std"],
            rec.accuracy["min"],
        )
        for f in failed:
            log.warning(
                "round %d: partition %d not scored: %s", server_round, f.partition, f.reason
            )
        if not per_client:
            return None
        return MetricRecord(
            {
                "accuracy": rec.accuracy["weighted_mean"],
                "accuracy-std": rec.accuracy["std"],
                "loss": rec.loss["weighted_mean"],
                "num-examples": sum(c.num_examples for c in per_client),
            }
        )

    def scored(self, server_round: int, per_client: list) -> None:
        """Read an evaluation's scores (IFCA: which model each client chose); nothing by default."""
        return None

    def _readmit(self, server_round: int, scored: list) -> None:
        """A client left out of sampling that answers an evaluation is sampled again."""
        row_of = {p: r for r, p in enumerate(self.clients.partition_ids)}
        for c in scored:
            row = row_of[c.partition]
            if self.failures.get(row, 0) >= self.settings.max_failures:
                log.info(
                    "round %d: partition %d answers again; back in sampling",
                    server_round,
                    c.partition,
                )
            self.failures.pop(row, None)

    # -- resume ----------------------------------------------------------------------------
    def server_state(self, server_round: int) -> dict[str, Any]:
        """Everything the server needs to continue after ``server_round``."""
        return {
            "round": server_round,
            "method": self.settings.method,
            "settings": self.settings.to_dict(),
            "rng": self.rng.bit_generator.state,
            "ledger": self.ledger.to_dict(),
            "roster": self.roster.to_dict(),
            "fields": {name: to_plain(name, getattr(self, name)) for name in self.declared_state()},
        }

    def restore_server_state(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`server_state` (after this process's own query round).

        The saved clients keep their rows (partition order); their node ids
        come from this process's query round, so restarted SuperNodes are found.
        """
        fields = restored_fields(self, state["fields"])  # declared and of their kind, or refused
        fresh = {
            p: n for p, n in zip(self.clients.partition_ids, self.clients.node_ids, strict=True)
        }
        self.roster.restore(state["roster"], fresh)
        self.rng.bit_generator.state = state["rng"]
        self.ledger = Ledger.from_dict(state["ledger"])
        for name, value in fields.items():
            setattr(self, name, value)
        self.round_offset = int(state["round"])

    def maybe_checkpoint(self, server_round: int) -> None:
        every = self.settings.checkpoint_every
        if self.checkpoint_path is None or not every:
            return
        if server_round % every == 0 or server_round == self.num_rounds:
            save_server_state(self.checkpoint_path, self.server_state(server_round))
            log.info("round %d: server state saved to %s", server_round, self.checkpoint_path)

    def summary(self) -> None:
        """The app's line, then the Flower class's own settings (cooperative)."""
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
        super().summary()

    # -- results ---------------------------------------------------------------------------
    def run_record(self) -> dict[str, Any]:
        """What the results file needs from the strategy."""
        return {
            "clients": self.roster.record(),
            **self.ledger.to_dict(),
            "late_joiners": self.roster.joined,
        }
