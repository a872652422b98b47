"""A round's training replies, accepted or dropped in one place: :class:`ReplyAcceptance`.

Part of :class:`~ripple_flwr.app.server.strategies.core.base.AppStrategy` (a mixin
it is built from; it reads the strategy's settings, roster and the messages
of the round, and the strategy's methods decide what a reply is measured from).
The reply validator's checks (:mod:`.validator`: validation, the counts held to the
query round's sizes), then the
registered reply defences in order (:mod:`~ripple_flwr.app.server.strategies.core.replies.defences`:
the method's own check, the update bound, any added), and the failures of each client.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np
from flwr.app import Message

from ripple_flwr.app.protocol.records import record_to_state
from ripple_flwr.app.server.strategies.core.replies.defences import apply_defences
from ripple_flwr.app.server.strategies.core.replies.validation import (
    Accepted,
)
from ripple_flwr.app.server.strategies.core.rounds.accounting import Dropped
from ripple_flwr.runs.results import message_nbytes

log = logging.getLogger("flwr.ripple")


class ReplyAcceptance:
    """Accepts a round's training replies for :class:`AppStrategy` (see its attributes)."""

    def accept_replies(self, server_round: int, replies: Iterable[Message]) -> list[Accepted]:
        """Validate every reply in one place; the usable ones in row order.

        A reply is matched to the message it answers; its model must pass
        :func:`~ripple_flwr.app.server.strategies.core.replies.validation.validate_train_reply`; its
        ``num-examples`` is held to the client's training split size from the
        query round; its update must be in proportion with the round's (see
        :func:`ripple_flwr.aggregation.robust.out_of_bound`). Clients that failed
        ``max-failures`` rounds in a row are left out of sampling.
        """
        replies = list(replies)
        self._round.bytes_up = sum(message_nbytes(m) for m in replies)
        # Ids are set when the grid pushes the messages, after configure_train returned them.
        pending = {str(m.metadata.message_id): row for row, m in self._sent_messages}
        accepted, dropped = self.validator.check(
            server_round, replies, pending, self.clients, self.extra_reply_references
        )
        accepted, refused = apply_defences(self, server_round, accepted)
        out = [self._drop(server_round, a, reason) for a, reason in refused]
        dropped = sorted(dropped + out, key=lambda d: d.partition)
        self._round.dropped = dropped
        self._count_failures(server_round, accepted, dropped)
        return accepted

    def update_origins(self, accepted: list[Accepted]) -> list[dict[str, np.ndarray]]:
        """The model each reply's update is measured from, each record decoded once."""
        sent: dict[int, dict[str, np.ndarray]] = {}
        decoded: dict[int, dict[str, np.ndarray]] = {}  # one decode per shared record
        wanted = {a.row for a in accepted}
        for row, msg in self._sent_messages:
            if row not in wanted:
                continue
            own = self.sent_state(row)
            if own is not None:
                sent[row] = own
                continue
            record = msg.content.array_records["arrays"]
            if id(record) not in decoded:
                decoded[id(record)] = record_to_state(record)
            sent[row] = decoded[id(record)]
        return [self.update_origin(a, sent[a.row]) for a in accepted]

    def sent_state(self, row: int) -> dict[str, np.ndarray] | None:
        """The model sent to ``row`` this round, if the strategy keeps it (else it is decoded).

        A strategy that sends each client its own model (Ripple) keeps them as
        arrays already; returning views of those saves one decode per reply.
        """
        return None

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
            if self.failures[row] == self.settings.robustness.max_failures:
                log.warning(
                    "round %d: partition %d failed %d rounds in a row; left out of sampling "
                    "until it answers an evaluation",
                    server_round,
                    d.partition,
                    self.failures[row],
                )
