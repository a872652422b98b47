"""A round's training replies, accepted or dropped in one place: :class:`Replies`.

The strategy owns one :class:`Replies`. It remembers which message went to which row,
runs the reply validator's checks (:mod:`.validator`: validation, the counts held to the
query round's sizes), then the registered reply defences in order
(:mod:`~ripple_flwr.app.server.replies.defences`: the method's own check,
the update bound, any added), and keeps the update history the update bound measures
against. What a method decides (its own reply check, what an update is measured from,
the extra records a reply must carry) it answers through :class:`ReplyHooks`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

import numpy as np
from flwr.app import Message

from ripple_flwr.app.protocol.records import record_to_state
from ripple_flwr.app.server.replies.defences import (
    UpdateHistory,
    apply_defences,
)
from ripple_flwr.app.server.replies.validation import Accepted, Reference
from ripple_flwr.app.server.replies.validator import ReplyValidator
from ripple_flwr.app.server.rounds.accounting import Dropped
from ripple_flwr.methods.api import QueryResult
from ripple_flwr.runs.results import message_nbytes
from ripple_flwr.settings import RunSettings

log = logging.getLogger("flwr.ripple")

State = dict[str, np.ndarray]


class RowClients(Protocol):
    """What the replies read of the engine's roster: who each row is (no import of it)."""

    @property
    def clients(self) -> QueryResult: ...


class ReplyHooks(Protocol):
    """What the method answers about its replies (the strategy, until the engine holds it)."""

    extra_reply_references: dict[str, Reference]

    def check_reply(self, a: Accepted) -> str | None: ...

    def sent_state(self, row: int) -> State | None: ...

    def update_origin(self, a: Accepted, sent: State) -> State: ...


class Replies:
    """The training replies of a run's rounds: matched, validated, defended, counted.

    Parameters
    ----------
    settings
        The run's settings (the defences read their robustness group).
    validator
        The reply validator (the model's keys, shapes and dtypes; the round's timeout).
    roster
        The run's roster: who each row is.
    method
        The method's answers: its own reply check, what an update is measured from, the
        extra records a reply carries.
    """

    def __init__(
        self,
        settings: RunSettings,
        validator: ReplyValidator,
        roster: RowClients,
        method: ReplyHooks,
    ) -> None:
        self.settings = settings
        self.validator = validator
        self.roster = roster
        self.method = method
        # The accepted replies' update norms and radial steps of the last HISTORY_ROUNDS
        # rounds (oldest first): the yardstick honest clients set for the update bound.
        self.update_history = UpdateHistory()
        self._sent: list[tuple[int, Message]] = []  # (row, training message) this round

    def restore_history(self, history: UpdateHistory) -> None:
        """Continue the update history a resumed run saved."""
        self.update_history = history

    @property
    def clients(self) -> QueryResult:
        """The training clients, in row order (what a defence reads)."""
        return self.roster.clients

    def begin(self) -> None:
        """A new round: nothing sent yet (a round that sends nothing waits on no reply)."""
        self._sent = []

    def record_sent(self, rows: np.ndarray, messages: list[Message]) -> list[Message]:
        """Remember which message went to which row; the messages in row order."""
        node_row = {self.clients.node_ids[int(r)]: int(r) for r in rows}
        messages = sorted(messages, key=lambda m: node_row[int(m.metadata.dst_node_id)])
        self._sent = [(node_row[int(m.metadata.dst_node_id)], m) for m in messages]
        return messages

    def sent_partitions(self) -> dict[int, int]:
        """The partition of each client sent a message this round, to its row."""
        return {self.clients.partition_ids[r]: r for r, _ in self._sent}

    def accept(
        self, server_round: int, replies: list[Message]
    ) -> tuple[list[Accepted], list[Dropped]]:
        """Validate every reply in one place: the usable ones in row order, and the dropped.

        A reply is matched to the message it answers; its model must pass
        :func:`~ripple_flwr.app.server.replies.validation.validate_train_reply`;
        its ``num-examples`` is held to the client's training split size from the query
        round; then every registered defence runs on the replies the ones before it kept.
        """
        # Ids are set when the grid pushes the messages, after configure_train returned them.
        pending = {str(m.metadata.message_id): row for row, m in self._sent}
        accepted, dropped = self.validator.check(
            server_round, replies, pending, self.clients, self.method.extra_reply_references
        )
        accepted, refused = apply_defences(self, server_round, accepted)
        out = [self._drop(server_round, a, reason) for a, reason in refused]
        return accepted, sorted(dropped + out, key=lambda d: d.partition)

    def check_reply(self, a: Accepted) -> str | None:
        """The method's own check of a valid reply: the reason to drop it, or ``None``."""
        return self.method.check_reply(a)

    def update_origins(self, accepted: list[Accepted]) -> list[State]:
        """The model each reply's update is measured from, each record decoded once."""
        sent: dict[int, State] = {}
        decoded: dict[int, State] = {}  # one decode per shared record
        wanted = {a.row for a in accepted}
        for row, msg in self._sent:
            if row not in wanted:
                continue
            own = self.method.sent_state(row)
            if own is not None:
                sent[row] = own
                continue
            record = msg.content.array_records["arrays"]
            if id(record) not in decoded:
                decoded[id(record)] = record_to_state(record)
            sent[row] = decoded[id(record)]
        return [self.method.update_origin(a, sent[a.row]) for a in accepted]

    def _drop(self, server_round: int, a: Accepted, reason: str) -> Dropped:
        """Log a reply that passed validation but is not used, and record why."""
        pid = self.clients.partition_ids[a.row]
        log.warning("round %d: dropped reply of partition %d: %s", server_round, pid, reason)
        return Dropped(pid, reason)


def bytes_of(messages: Iterable[Message]) -> int:
    """Bytes of these messages' records (what went over the wire)."""
    return sum(message_nbytes(m) for m in messages)
