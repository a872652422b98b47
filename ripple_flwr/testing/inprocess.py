"""The one-process grid with fault injection and recorded traffic, for the tests.

The grid itself is the package's one-process runner
(``ripple_flwr.experiments.one_process``); this adds what only tests need.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from flwr.app import Message

from ripple_flwr.app.flower_internals import ensure_task_identity
from ripple_flwr.app.protocol.messages import CONFIG, NODE_PARTITION_ID, SERVER_ROUND, TRAIN
from ripple_flwr.experiments.one_process import NODE_ID_BASE, OneProcessGrid

__all__ = ["NODE_ID_BASE", "Fault", "InProcessGrid", "ensure_task_identity"]

Fault = Callable[[Message, Message | None], Message | None]


class InProcessGrid(OneProcessGrid):
    """:class:`OneProcessGrid` with faults, late joiners and the traffic kept for the tests.

    ``faults[partition_id]`` may rewrite a reply (or return ``None``: no reply,
    as after a timeout). ``join_after[partition_id] = r`` hides that node until
    the server has pushed the training messages of round ``r`` (a SuperNode
    that connects late). ``sent`` and ``replies`` record all traffic;
    ``keep_traffic=False`` keeps none of it.
    """

    def __init__(
        self,
        run_config: dict[str, Any],
        num_nodes: int | None = None,
        *,
        node_configs: list[dict[str, Any]] | None = None,
        faults: dict[int, Fault] | None = None,
        join_after: dict[int, int] | None = None,
        app: Any = None,
        keep_traffic: bool = True,
    ) -> None:
        super().__init__(run_config, num_nodes, node_configs=node_configs, app=app)
        self.faults = faults or {}
        self.join_after = dict(join_after or {})
        self.last_train_round = 0
        self.keep_traffic = keep_traffic
        self.sent: list[Message] = []
        self.replies: list[Message] = []

    def get_node_ids(self) -> Iterable[int]:
        if not self.join_after:  # every node is there (the server asks once a round)
            return list(self.contexts)
        return [
            nid
            for nid, ctx in self.contexts.items()
            if self.join_after.get(int(ctx.node_config.get(NODE_PARTITION_ID, -1)), 0)
            <= self.last_train_round
        ]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        for msg in messages:
            if msg.metadata.message_type == TRAIN:
                cfg = msg.content.config_records.get(CONFIG)
                if cfg is not None and SERVER_ROUND in cfg:
                    self.last_train_round = max(self.last_train_round, int(cfg[SERVER_ROUND]))
        ids = list(super().push_messages(messages))
        if self.keep_traffic:
            self.sent.extend(messages)
            self.replies.extend(self._outbox[m] for m in ids if m in self._outbox)
        return ids

    def _deliver(self, msg: Message) -> Message | None:
        reply = super()._deliver(msg)
        context = self.contexts[msg.metadata.dst_node_id]
        fault = self.faults.get(int(context.node_config.get(NODE_PARTITION_ID, -1)))
        return fault(msg, reply) if fault is not None else reply

    def sent_of_type(self, prefix: str) -> list[Message]:
        return [m for m in self.sent if m.metadata.message_type.startswith(prefix)]
