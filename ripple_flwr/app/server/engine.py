"""The engine: the app's one Flower ``Strategy``, which runs a method (:class:`Engine`).

It owns admission, the seeded sampler, reply acceptance and the defences, evaluation,
the ledger, resume and the one round loop, each a collaborator object that owns its
state (:class:`~.rounds.sampler.Sampler`, :class:`~.rounds.accounting.RoundBook`,
:class:`~.replies.acceptance.Replies`, :class:`~.evaluation.rounds.Evaluator`, the
:class:`~.roster.admission.ClientRoster`). A method does not inherit it: the engine holds
the method and asks it, through a few hooks, only what the method decides (its payloads,
its aggregate, its state). docs/adding-a-method.md shows a method end to end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from ripple_flwr.app.protocol.candidates import Payload, payload_records
from ripple_flwr.app.protocol.messages import NUM_EXAMPLES, TRAIN_LOSS, train_config, with_round
from ripple_flwr.app.server.evaluation.rounds import Evaluator, metrics_of
from ripple_flwr.app.server.replies.acceptance import Replies, bytes_of
from ripple_flwr.app.server.replies.defences import UpdateHistory
from ripple_flwr.app.server.replies.validation import (
    Accepted,
    Reference,
    state_reference,
)
from ripple_flwr.app.server.replies.validator import ReplyValidator
from ripple_flwr.app.server.resume.file import save_server_state
from ripple_flwr.app.server.resume.server_state import (
    restore_server_state,
    server_state,
)
from ripple_flwr.app.server.roster.admission import ClientRoster
from ripple_flwr.app.server.roster.query import QueryResult
from ripple_flwr.app.server.rounds.accounting import Ledger, RoundBook
from ripple_flwr.app.server.rounds.grid import PollingGrid
from ripple_flwr.app.server.rounds.loop import run_rounds
from ripple_flwr.app.server.rounds.sampler import Sampler
from ripple_flwr.methods.api import Export, Method, Onboarding, declared_fields
from ripple_flwr.settings import RunSettings

log = logging.getLogger("flwr.ripple")


def client_train_config(settings: RunSettings) -> ConfigRecord:
    """What every training message carries besides the model (Flower's strategies add theirs)."""
    return train_config(
        settings.training.lr,
        settings.training.momentum,
        settings.training.local_epochs,
        settings.training.batch_size,
    )


class Engine(Strategy):
    """The one Flower ``Strategy`` of the app: it runs a method, it is not one.

    It owns the run: the roster, the seeded :class:`Sampler`, the :class:`RoundBook`,
    the :class:`Replies` (validation and defences), the :class:`Evaluator`, resume and the
    round loop. The method (``method``, a :class:`~ripple_flwr.methods.api.Method` of the
    method's folder, see docs/adding-a-method.md) is asked only what it decides, through
    the hooks :class:`~ripple_flwr.methods.api.Method` declares, each called by name here
    (its default when the method does not override it). The method reads the run through
    ``method.run`` (this engine, as a :class:`~ripple_flwr.methods.api.RunView`).
    """

    round_offset: int = 0  # rounds already done before this process (a resumed run)
    checkpoint_path: Path | None = None  # where the server state goes every checkpoint-every
    # The engine's own saved fields (the sampler's failures, the update bound's history).
    state_fields: tuple[str, ...] = ("failures", "_accepted_norms", "_accepted_radials")

    def __init__(
        self,
        settings: RunSettings,
        reference: dict[str, np.ndarray],
        method: Method,
        *,
        roster: ClientRoster | None = None,
        ledger: Ledger | None = None,
        evaluator: Evaluator | None = None,
        validator: ReplyValidator | None = None,
    ) -> None:
        """The engine around one method.

        Parameters
        ----------
        settings
            The run's settings.
        reference
            The initial model's state: every training reply is checked against its keys,
            shapes and dtypes.
        method
            The method (its folder's ``server.METHOD``, built by ``MethodSpec.make``).
        roster, ledger, evaluator, validator
            Who takes part, what each round cost, how the clients are evaluated and how
            their training replies are checked: built from ``settings`` and ``reference``
            when not given.
        """
        super().__init__()
        self.settings = settings
        self.method = method
        self.summary_kind, self.summary_dim = method.query_summary
        self.reference = state_reference(reference)
        self.num_rounds = settings.training.num_server_rounds
        self.roster = (
            ClientRoster(settings, self.summary_kind, self.summary_dim)
            if roster is None
            else roster
        )
        self.sampler = Sampler(settings)
        self.book = RoundBook(ledger)
        self.replies = Replies(
            settings,
            ReplyValidator(self.reference, settings.robustness.round_timeout)
            if validator is None
            else validator,
            self.roster,
            self,
        )
        self.evaluator = Evaluator(settings) if evaluator is None else evaluator
        self.grid: Grid | None = None  # the grid of the last admission (a method's side rounds)
        method.run = self

    # -- what the method declares ---------------------------------------------------------
    def declared_state(self) -> tuple[str, ...]:
        """Every field saved for resume: the engine's, then the method's."""
        return tuple(self.state_fields) + declared_fields(type(self.method))

    def state_values(self) -> dict[str, Any]:
        """Each declared state field's value, by its saved name."""
        return {
            "failures": self.sampler.failures,
            "_accepted_norms": self.replies.update_history.norms,
            "_accepted_radials": self.replies.update_history.radials,
            **self.method.state(),
        }

    def restore_state_values(self, fields: dict[str, Any]) -> None:
        """Put back checked state fields (:func:`~.state.restore.restored_fields`)."""
        fields = dict(fields)
        norms, radials = fields.pop("_accepted_norms", []), fields.pop("_accepted_radials", [])
        self.replies.restore_history(UpdateHistory(norms, radials))
        if "failures" in fields:
            self.sampler.restore(fields.pop("failures"))
        self.method.restore(fields)

    # -- who takes part --------------------------------------------------------------------
    @property
    def clients(self) -> QueryResult | None:
        """The training clients, in row order."""
        return self.roster.clients

    @property
    def new_clients(self) -> QueryResult:
        """The held-out clients onboarded zero-shot after training."""
        return self.roster.new_clients

    @property
    def ledger(self) -> Ledger:
        """Every round and evaluation of the run so far."""
        return self.book.ledger

    @property
    def num_models(self) -> int:
        """How many models the server holds (and could hand a new client)."""
        return int(self.method.num_models)

    def prepare(self, grid: Grid) -> QueryResult:
        """Wait for the nodes and run the one-shot round; then the method's ``setup``."""
        clients = self.roster.prepare(grid)
        self.book.ledger.query_seconds = self.roster.query_seconds
        self.method.setup(clients)
        return clients

    def admit(self, grid: Grid, server_round: int) -> None:
        """Late joiners that connected since the last look join from this round on.

        A newcomer may take over the partition of a client that failed its last
        round (a restarted SuperNode): that row counts no failures any more. If the
        joiners released a DP embedding, the server state is saved now (with
        checkpoints on): a crash before the next checkpoint would otherwise lose the
        count of those releases, and the resumed run would ask the same clients for a
        second one. The state saved is the one after the last round plus the joiners
        (admission draws nothing from the sampler), so a run resumed from it goes on as
        this one does.
        """
        self.grid = grid
        asked = self.roster.releases.requests
        failing = self.sampler.failing_rows(len(self.clients))
        replaceable = [self.clients.partition_ids[r] for r in failing]
        joined = self.roster.admit_late_joiners(grid, server_round, replaceable)
        self.sampler.forget(self.roster.taken_over)
        if joined is not None:
            self.clients.extend(joined)
            self.method.add_clients(joined, server_round)
        keep = self.checkpoint_path is not None and self.settings.outputs.checkpoint_every
        if keep and self.roster.releases.requests != asked:
            save_server_state(self.checkpoint_path, self.server_state(server_round - 1))
            log.info("round %d: server state saved with the new DP releases", server_round)

    def sample_rows(self, server_round: int) -> np.ndarray:
        """This round's rows: the method's own draw, else uniform over the active rows."""
        rows = self.method.sample_rows(server_round)
        return self.sampler.uniform(len(self.clients)) if rows is None else rows

    @property
    def rng(self) -> np.random.Generator:
        """The run's seeded generator (the sampler's), for a method's own random choices."""
        return self.sampler.rng

    def add_bytes(self, down: int, up: int) -> None:
        """Count the bytes of a method's own side round in this round's record."""
        self.book.add_bytes(down, up)

    def refuse(self, reason: str) -> None:
        """Refuse this round's update (the model stays as it was), naming why."""
        self.book.refuse(reason)

    def active_rows(self) -> np.ndarray:
        """Rows that may be sampled: not failed ``max-failures`` training rounds in a row."""
        return self.sampler.active_rows(len(self.clients))

    def round_size(self, available: int) -> int:
        """Clients per round, fewer when fewer are usable (a smaller round, not a failure)."""
        return self.sampler.round_size(available)

    # -- what the method answers about its replies (ReplyHooks, for Replies) -----------------
    @property
    def extra_reply_references(self) -> dict[str, Reference]:
        """Extra ArrayRecords every training reply must carry (SCAFFOLD: its control delta)."""
        return self.method.extra_reply_references

    def sent_state(self, row: int) -> dict[str, np.ndarray] | None:
        """The model sent to ``row`` this round, if the method keeps it (else it is decoded)."""
        return self.method.sent_state(row)

    def update_origin(self, a: Accepted, sent: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model a reply's update is measured from: what was sent (IFCA: the chosen one)."""
        return self.method.update_origin(a, sent)

    def check_reply(self, a: Accepted) -> str | None:
        """The method's own check of a valid reply: the reason to drop it, or ``None``."""
        return self.method.check_reply(a)

    # -- what the run reads of the method ----------------------------------------------------
    def eval_payloads_of(self, arrays: ArrayRecord, rows: np.ndarray) -> list[Payload]:
        """The payloads of the clients at ``rows`` (an ``eval-fraction`` sample, or all)."""
        return self.method.eval_payloads(arrays, rows)

    def onboard(self, new: QueryResult) -> Onboarding:
        """The new clients' zero-shot models, as the run reads them."""
        return self.method.onboard(new)

    def export(self) -> Export:
        """What a saved run keeps for onboarding outside it."""
        return self.method.export()

    def reference_models(self) -> list[ArrayRecord]:
        """Every model the server holds, for the best-by-loss reference (none by default)."""
        return self.method.reference_models()

    def zero_shot_extras(self) -> dict[str, Any]:
        """Method-specific additions to the zero-shot record (Ripple: routing of new clients)."""
        return self.method.zero_shot_extras()

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
        """The one-shot round, the method's ``before_training``, then the round loop.

        ``timeout`` (per round) defaults to the run's ``round-timeout``;
        ``train_config`` to the run's client optimiser settings. A resumed run
        continues from the round after :attr:`round_offset` (see
        :func:`~ripple_flwr.app.server.rounds.loop.run_rounds`).
        """
        if evaluate_fn is not None:
            raise ValueError("the app evaluates on the clients; evaluate_fn is not supported")
        self.num_rounds = num_rounds
        timeout = self.settings.robustness.round_timeout if timeout is None else timeout
        if train_config is None:
            train_config = client_train_config(self.settings)
        if self.clients is None:
            self.prepare(grid)
        if self.round_offset == 0:  # a resumed run did this already
            self.method.before_training(grid, timeout)
        log.info("Starting %s strategy:", type(self.method).__name__)
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
            checkpoint=self.maybe_checkpoint,
        )
        # No aggregate at all (every reply refused): the model is still the one it started with.
        if not len(result.arrays):
            result.arrays = initial_arrays
        own = self.method.finish(result.arrays)
        if own is not None:
            result.arrays = own
        return result

    # -- a training round --------------------------------------------------------------------
    def begin_round(self, server_round: int, grid: Grid) -> np.ndarray:
        """Admit late joiners and draw this round's rows with the run's seeded sampler."""
        self.admit(grid, server_round)
        self.replies.begin()  # a round that sends nothing must not wait on the last one's
        self.book.open(server_round)  # the round's server time starts here
        rows = np.asarray(self.sample_rows(server_round), dtype=np.int64)
        self.book.sampled([self.clients.partition_ids[int(r)] for r in rows])
        self.method.round_opened(server_round, grid)
        return rows

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One message per sampled client, each carrying the model that client receives."""
        rows = self.begin_round(server_round, grid)
        own = self.method.configure_train(server_round, rows, arrays, config, grid)
        if own is not None:  # one of Flower's strategies builds its own messages
            return self.record_sent(rows, own)
        config = with_round(config, server_round)
        extras = self.method.extra_train_records(rows)
        messages = [
            Message(
                RecordDict({**payload_records(payload), "config": config, **more}),
                dst_node_id=self.clients.node_ids[int(row)],
                message_type=MessageType.TRAIN,
            )
            for row, payload, more in zip(
                rows, self.method.train_payloads(rows, arrays), extras, strict=True
            )
        ]
        return self.record_sent(rows, messages)

    def record_sent(self, rows: np.ndarray, messages: list[Message]) -> list[Message]:
        """Remember which message went to which row, count the bytes; messages in row order."""
        messages = self.replies.record_sent(rows, messages)
        self.book.sent(bytes_of(messages), len(messages))
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Validate, drop the bad replies, let the method fold the good ones in."""
        t0 = time.perf_counter()
        accepted = self.accept_replies(server_round, replies)
        arrays = self.method.aggregate(server_round, accepted) if accepted else None
        return arrays, self.end_round(accepted, time.perf_counter() - t0)

    def accept_replies(self, server_round: int, replies: Iterable[Message]) -> list[Accepted]:
        """The round's usable replies in row order (:meth:`Replies.accept`); the dropped
        ones go into the round's record, and clients that failed ``max-failures`` rounds in
        a row are left out of sampling."""
        replies = list(replies)
        self.book.received(bytes_of(replies))
        accepted, dropped = self.replies.accept(server_round, replies)
        self.book.drop(dropped)
        self.sampler.count_failures(
            server_round, [a.row for a in accepted], dropped, self.replies.sent_partitions()
        )
        return accepted

    def end_round(self, accepted: list[Accepted], server_seconds: float) -> MetricRecord | None:
        """Close the round's record and log it; the train metrics Flower's loop keeps."""
        losses = [(a.train_loss, a.num_examples) for a in accepted]
        rec = self.book.close(losses, server_seconds, self.num_rounds)
        if not accepted:
            return None
        return MetricRecord({TRAIN_LOSS: rec.train_loss, NUM_EXAMPLES: rec.num_examples})

    # -- evaluation ------------------------------------------------------------------------
    def is_eval_round(self, server_round: int) -> bool:
        return self.evaluator.is_eval_round(server_round, self.num_rounds)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Each client of the round's sample gets the model it would receive, on eval rounds."""
        if not self.is_eval_round(server_round):
            return []
        rows = self.evaluator.sample(len(self.clients), server_round)
        payloads = self.eval_payloads_of(arrays, rows)
        return self.evaluator.send(server_round, rows, self.clients, payloads)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Sample-weighted mean and spread of the clients' personalised accuracies."""
        rec = self.evaluator.score(server_round, replies, self.clients, self.num_rounds)
        if rec is None:
            return None
        self.method.scored(server_round, rec.clients)
        self.book.add_evaluation(rec)
        row_of = {p: r for r, p in enumerate(self.clients.partition_ids)}
        self.sampler.readmit(server_round, rec.clients, row_of)
        return metrics_of(rec)

    # -- resume ----------------------------------------------------------------------------
    def server_state(self, server_round: int) -> dict[str, Any]:
        """Everything the server needs to continue after ``server_round``."""
        return server_state(self, server_round)

    def restore_server_state(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`server_state` (after this process's own query round)."""
        restore_server_state(self, state)

    def maybe_checkpoint(self, server_round: int) -> None:
        """Save the server state after ``server_round`` when ``checkpoint-every`` says so.

        The round loop calls it after each round's evaluation.
        """
        every = self.settings.outputs.checkpoint_every
        if self.checkpoint_path is None or not every:
            return
        if server_round % every == 0 or server_round == self.num_rounds:
            save_server_state(self.checkpoint_path, self.server_state(server_round))
            log.info("round %d: server state saved to %s", server_round, self.checkpoint_path)

    def summary(self) -> None:
        """The app's line, then the method's own (Flower's settings for its strategies)."""
        s = self.settings
        log.info(
            "\t├──> %s: %d clients/round of %d, %d rounds, eval every %d (fraction %g), seed %d",
            type(self.method).__name__,
            s.training.clients_per_round,
            s.data.num_partitions,
            self.num_rounds,
            s.evaluation.eval_every,
            s.evaluation.eval_fraction,
            s.training.seed,
        )
        self.method.summary()

    # -- results ---------------------------------------------------------------------------
    def run_record(self) -> dict[str, Any]:
        """What the results file needs from the run, and what the method adds to it."""
        rec = {
            "clients": self.roster.record(),
            **self.ledger.to_dict(),
            "late_joiners": self.roster.joined,
        }
        return self.method.run_record(rec)
