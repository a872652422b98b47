"""Methods whose models live in the strategy (Ripple, local-only, the clustered baselines,
the one-global-model methods Flower does not have): one message per sampled client.

The strategy builds each round's messages itself (:meth:`ServerModels.train_payloads`)
and folds the validated replies in with its own rule (:meth:`ServerModels.apply_updates`).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Iterable

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid

from ripple_flwr.app.protocol.candidates import Payload, payload_records
from ripple_flwr.app.protocol.messages import with_round
from ripple_flwr.app.server.strategies.core.base import AppStrategy
from ripple_flwr.app.server.strategies.core.replies.validation import Accepted


class ServerModels(AppStrategy):
    """Methods whose models live in the strategy (Ripple, local-only): one message per client.

    Subclasses implement :meth:`train_payloads` and :meth:`apply_updates`.
    """

    @abstractmethod
    def train_payloads(self, rows: np.ndarray, arrays: ArrayRecord) -> list[Payload]:
        """One model (or a list of candidates, IFCA) per sampled row, in row order."""

    @abstractmethod
    def apply_updates(self, server_round: int, accepted: list[Accepted]) -> ArrayRecord | None:
        """Fold the validated replies of a round into the server's models."""

    # -- extra records of a training message (SCAFFOLD's control variate) --------------------
    def extra_train_records(self, rows: np.ndarray) -> list[dict[str, ArrayRecord | ConfigRecord]]:
        """Records added to each row's training message besides the model and config.

        None by default, so every other method's messages stay byte-identical.
        """
        return [{} for _ in rows]

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One message per sampled client, each carrying the model that client receives."""
        rows = self.begin_round(server_round, grid)
        config = with_round(config, server_round)
        messages = [
            Message(
                RecordDict({**payload_records(payload), "config": config, **extra}),
                dst_node_id=self.clients.node_ids[int(row)],
                message_type=MessageType.TRAIN,
            )
            for row, payload, extra in zip(
                rows, self.train_payloads(rows, arrays), self.extra_train_records(rows), strict=True
            )
        ]
        return self.record_sent(rows, messages)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Validate, drop the bad replies, apply the good ones."""
        t0 = time.perf_counter()
        accepted = self.accept_replies(server_round, replies)
        arrays = self.apply_updates(server_round, accepted) if accepted else None
        return arrays, self.end_round(accepted, time.perf_counter() - t0)
