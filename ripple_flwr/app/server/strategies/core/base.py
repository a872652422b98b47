"""What every method of the app shares: admission, seeded sampling, evaluation, accounting,
its declared state, and the one round loop.

:class:`AppStrategy` is a Flower ``Strategy``. Its ``__init__`` is cooperative
(``super().__init__(**kwargs)`` reaches the Flower class that follows it in a
method's bases, as Flower's own classes chain), and so is :meth:`summary`.
It owns no training rule:
:class:`~ripple_flwr.app.server.strategies.core.server_models.ServerModels` (methods
whose models live in the strategy: Ripple, local-only) and
:class:`~ripple_flwr.app.server.strategies.core.flower.FlowerModel` (Flower's one-model
strategies, run as Flower wrote them) add the two halves of a round.

A method declares, in its own class body:

- ``state_fields``: the attributes it keeps between rounds, saved and restored
  on resume by one mechanism (numpy arrays, dicts, lists, scalars and Flower's
  ``ArrayRecord``); the lists of all bases are joined;
- ``check_settings``: its own rules on the settings (Krum: ``clients-per-round``).

The run-config keys a method reads are declared in its registry entry
(:mod:`ripple_flwr.methods.registry`), where the clients can read them without importing
a strategy.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from ripple_flwr.app.protocol.candidates import Payload
from ripple_flwr.app.protocol.messages import NUM_EXAMPLES, TRAIN_LOSS, train_config
from ripple_flwr.app.server.strategies.core.evaluation.rounds import Evaluator, metrics_of
from ripple_flwr.app.server.strategies.core.replies.acceptance import Replies, bytes_of
from ripple_flwr.app.server.strategies.core.replies.defences import UpdateHistory
from ripple_flwr.app.server.strategies.core.replies.validation import (
    Accepted,
    Reference,
    state_reference,
)
from ripple_flwr.app.server.strategies.core.replies.validator import ReplyValidator
from ripple_flwr.app.server.strategies.core.roster.admission import ClientRoster, QueryResult
from ripple_flwr.app.server.strategies.core.rounds.accounting import Ledger, RoundBook
from ripple_flwr.app.server.strategies.core.rounds.grid import PollingGrid
from ripple_flwr.app.server.strategies.core.rounds.loop import run_rounds
from ripple_flwr.app.server.strategies.core.rounds.sampler import Sampler
from ripple_flwr.app.server.strategies.core.state.server_state import (
    restore_server_state,
    server_state,
)
from ripple_flwr.methods.api import Export, Onboarding
from ripple_flwr.runs.resume import save_server_state
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


class AppStrategy(Strategy):
    """A Flower strategy run over the app's clients.

    Subclasses implement :meth:`eval_payloads`; they may override
    :meth:`setup`, :meth:`sample_rows`, :meth:`add_clients`,
    :meth:`onboard_payloads` and :meth:`reference_models`, and declare
    ``state_fields`` and :meth:`check_settings`.
    """

    round_offset: int = 0  # rounds already done before this process (a resumed run)
    checkpoint_path: Path | None = None  # where the server state goes every checkpoint-every
    # Attributes that make up the method's server state between rounds (numpy arrays, dicts,
    # lists, scalars, ArrayRecords), saved for resume; each class lists its own, the lists of
    # all bases are joined.
    state_fields: tuple[str, ...] = ("failures", "_accepted_norms", "_accepted_radials")

    def __init__(
        self,
        settings: RunSettings,
        reference: dict[str, np.ndarray],
        *,
        summary_kind: str = "none",
        summary_dim: int | None = None,
        roster: ClientRoster | None = None,
        ledger: Ledger | None = None,
        evaluator: Evaluator | None = None,
        validator: ReplyValidator | None = None,
        **kwargs: Any,
    ) -> None:
        """The app's side of a method's strategy.

        Parameters
        ----------
        settings
            The run's settings.
        reference
            The initial model's state: every training reply is checked against its keys,
            shapes and dtypes.
        summary_kind, summary_dim
            What each client must send in the one-shot query round (``"none"``, or the
            router's ``"embedding"`` / ``"mean"`` of that length).
        roster, ledger, evaluator, validator
            Who takes part, what each round cost, how the clients are evaluated and how
            their training replies are checked: built from ``settings`` and ``reference``
            when not given.
        **kwargs
            The arguments of the Flower class after this one in a method's bases, if any.
        """
        super().__init__(**kwargs)  # the Flower class after this one in the MRO, if any
        self.settings = settings
        self.summary_kind, self.summary_dim = summary_kind, summary_dim
        self.reference = state_reference(reference)
        self.num_rounds = settings.training.num_server_rounds
        self.roster = (
            ClientRoster(settings, summary_kind, summary_dim) if roster is None else roster
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
        self.final_global: ArrayRecord | None = None

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
    def declared_state(cls) -> tuple[str, ...]:
        """Every attribute saved for resume (its own and its bases')."""
        return tuple(cls._joined("state_fields"))

    def state_values(self) -> dict[str, Any]:
        """Each declared state field's value, by its saved name."""
        engine = {
            "failures": self.sampler.failures,
            "_accepted_norms": self.replies.update_history.norms,
            "_accepted_radials": self.replies.update_history.radials,
        }
        return {
            name: engine[name] if name in engine else getattr(self, name)
            for name in self.declared_state()
        }

    def restore_state_values(self, fields: dict[str, Any]) -> None:
        """Put back checked state fields (:func:`~.state.restore.restored_fields`)."""
        fields = dict(fields)
        norms, radials = fields.pop("_accepted_norms", []), fields.pop("_accepted_radials", [])
        self.replies.restore_history(UpdateHistory(norms, radials))
        if "failures" in fields:
            self.sampler.restore(fields.pop("failures"))
        for name, value in fields.items():
            setattr(self, name, value)

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

    @property
    def ledger(self) -> Ledger:
        """Every round and evaluation of the run so far."""
        return self.book.ledger

    @property
    def rng(self) -> np.random.Generator:
        """The run's sampler generator (a method that samples its own way draws from it)."""
        return self.sampler.rng

    def prepare(self, grid: Grid) -> QueryResult:
        """Wait for the nodes and run the one-shot round; then :meth:`setup`."""
        clients = self.roster.prepare(grid)
        self.ledger.query_seconds = self.roster.query_seconds
        self.setup(clients)
        return clients

    def admit(self, grid: Grid, server_round: int) -> None:
        """Late joiners that connected since the last look join from this round on.

        A newcomer may take over the partition of a client that failed its last
        round (a restarted SuperNode): that row counts no failures any more.
        """
        failing = self.sampler.failing_rows(len(self.clients))
        replaceable = [self.clients.partition_ids[r] for r in failing]
        joined = self.roster.admit_late_joiners(grid, server_round, replaceable)
        self.sampler.forget(self.roster.taken_over)
        if joined is not None:
            self.add_clients(joined)

    # -- hooks -----------------------------------------------------------------------------
    def setup(self, clients: QueryResult) -> None:
        """Called once after the query round, before round 1 (nothing to do by default)."""
        return None

    def before_training(self, grid: Grid, timeout: float) -> None:
        """Called once after the query round, before round 1; not on resume (nothing by default)."""
        return None

    def active_rows(self) -> np.ndarray:
        """Rows that may be sampled: not failed ``max-failures`` training rounds in a row."""
        return self.sampler.active_rows(len(self.clients))

    def round_size(self, available: int) -> int:
        """Clients per round, fewer when fewer are usable (a smaller round, not a failure)."""
        return self.sampler.round_size(available)

    def sample_rows(self, server_round: int) -> np.ndarray:
        """Rows (clients) trained this round: uniform without replacement over active rows."""
        return self.sampler.uniform(len(self.clients))

    # -- what the method answers about its replies (ReplyHooks) -----------------------------
    # Extra ArrayRecords every training reply must carry, by record name (SCAFFOLD: its
    # control delta); validated like the model, a reply without them is dropped.
    extra_reply_references: dict[str, Reference] = {}  # noqa: RUF012 (read-only default)

    def sent_state(self, row: int) -> dict[str, np.ndarray] | None:
        """The model sent to ``row`` this round, if the strategy keeps it (else it is decoded).

        A strategy that sends each client its own model (Ripple) keeps them as
        arrays already; returning views of those saves one decode per reply.
        """
        return None

    def update_origin(self, a: Accepted, sent: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model a reply's update is measured from: what was sent (IFCA: the chosen one)."""
        return sent

    def check_reply(self, a: Accepted) -> str | None:
        """A method's own check of a valid reply: the reason to drop it, or ``None``."""
        return None

    def add_clients(self, joined: QueryResult) -> None:
        """Training clients that connected after the one-shot round join the roster."""
        self.clients.extend(joined)

    @abstractmethod
    def eval_payloads(self, arrays: ArrayRecord) -> list[Payload]:
        """The model (or candidate models) each client is evaluated with, in client order."""

    def eval_payloads_of(self, arrays: ArrayRecord, rows: np.ndarray) -> list[Payload]:
        """The payloads of the clients at ``rows`` only (an ``eval-fraction`` sample).

        By default :meth:`eval_payloads` of every client, then picked: a method
        that builds one model per client should build only these.
        """
        payloads = self.eval_payloads(arrays)
        return [payloads[r] for r in rows.tolist()]

    def onboard_payloads(self, new: QueryResult) -> list[Payload] | None:
        """The zero-shot model (or candidates) of each new client (``None``: none)."""
        return None

    def onboard(self, new: QueryResult) -> Onboarding:
        """The new clients' zero-shot models (:meth:`onboard_payloads`), as the run reads them."""
        return Onboarding(self.onboard_payloads(new))

    def export(self) -> Export:
        """What a saved run keeps for onboarding outside it (:meth:`saved_models`)."""
        return Export(self.saved_models())

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
        """The one-shot round, :meth:`before_training`, then the round loop (quick polling).

        ``timeout`` (per round) defaults to the run's ``round-timeout``;
        ``train_config`` to the run's client optimiser settings. A resumed run
        continues from the round after :attr:`round_offset` (see
        :func:`~ripple_flwr.app.server.strategies.core.rounds.loop.run_rounds`).
        """
        if evaluate_fn is not None:
            raise ValueError("the app evaluates on the clients; evaluate_fn is not supported")
        self.num_rounds = num_rounds
        timeout = self.settings.robustness.round_timeout if timeout is None else timeout
        if train_config is None:
            train_config = client_train_config(self.settings)
        if self.clients is None:
            self.prepare(grid)
        if self.round_offset == 0:  # a resumed run did this before it was interrupted
            self.before_training(grid, timeout)
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
            checkpoint=self.maybe_checkpoint,
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
        self.replies.begin()  # a round that sends nothing must not wait on the last one's
        self.book.open(server_round)  # the round's server time starts here
        rows = np.asarray(self.sample_rows(server_round), dtype=np.int64)
        self.book.sampled([self.clients.partition_ids[int(r)] for r in rows])
        return rows

    def record_sent(self, rows: np.ndarray, messages: list[Message]) -> list[Message]:
        """Remember which message went to which row, count the bytes; messages in row order."""
        messages = self.replies.record_sent(rows, messages)
        self.book.sent(bytes_of(messages), len(messages))
        return messages

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
        self.scored(server_round, rec.clients)
        self.book.add_evaluation(rec)
        row_of = {p: r for r, p in enumerate(self.clients.partition_ids)}
        self.sampler.readmit(server_round, rec.clients, row_of)
        return metrics_of(rec)

    def scored(self, server_round: int, per_client: list) -> None:
        """Read an evaluation's scores (IFCA: which model each client chose); nothing by default."""
        return None

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
        """The app's line, then the Flower class's own settings (cooperative)."""
        s = self.settings
        log.info(
            "\t├──> %s: %d clients/round of %d, %d rounds, eval every %d (fraction %g), seed %d",
            type(self).__name__,
            s.training.clients_per_round,
            s.data.num_partitions,
            self.num_rounds,
            s.evaluation.eval_every,
            s.evaluation.eval_fraction,
            s.training.seed,
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
