"""The reply validator: a round's training replies converted and checked in one place.

:class:`ReplyValidator` is a collaborator of
:class:`~ripple_flwr.app.server.engine.Engine` (passed in through its
constructor). It matches each reply to the message it answers, checks the model against
the initial one's keys, shapes and dtypes (and a method's extra records), converts every
field (:mod:`.validation`), and holds ``num-examples`` to the client's training split size
from the query round. What a method then accepts of the valid replies is the defences'
business (:mod:`.defences`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from flwr.app import Message

from ripple_flwr.app.protocol.messages import METRICS, NUM_EXAMPLES
from ripple_flwr.app.server.replies.validation import (
    Accepted,
    Reference,
    check_train_replies,
)
from ripple_flwr.app.server.rounds.accounting import Dropped
from ripple_flwr.methods.api import QueryResult

log = logging.getLogger("flwr.ripple")


class ReplyValidator:
    """Checks every training reply of a round against what was sent.

    Parameters
    ----------
    reference
        The initial model's keys, shapes and dtypes (:func:`~.validation.state_reference`).
    round_timeout
        The round's timeout, named in the reason of a client that did not answer.
    """

    def __init__(self, reference: Reference, round_timeout: float) -> None:
        self.reference = reference
        self.round_timeout = round_timeout

    def check(
        self,
        server_round: int,
        replies: Iterable[Message],
        pending: dict[str, int],
        clients: QueryResult,
        extra_references: dict[str, Reference] | None = None,
    ) -> tuple[list[Accepted], list[Dropped]]:
        """(valid replies in row order, dropped ones with their reason).

        ``pending`` maps each training message's id to its row; ``extra_references`` are
        the records a method's replies must carry beside the model (SCAFFOLD's control).
        """
        accepted, dropped = check_train_replies(
            replies,
            pending,
            self.reference,
            clients.partition_ids,
            server_round,
            self.round_timeout,
            extra_references=extra_references,
        )
        for a in accepted:
            hold_to_known_count(server_round, a, clients)
        return accepted, dropped


def hold_to_known_count(server_round: int, a: Accepted, clients: QueryResult) -> None:
    """A reply's ``num-examples`` is the client's training split size, whatever it says."""
    known = clients.known_train(a.row)
    if known is None or a.num_examples == known:
        return
    log.warning(
        "round %d: partition %d reported num-examples=%d but its training split has %d; "
        "weighting it by %d",
        server_round,
        clients.partition_ids[a.row],
        a.num_examples,
        known,
        known,
    )
    a.num_examples = known
    a.message.content.metric_records[METRICS][NUM_EXAMPLES] = known  # what Flower reads
