"""An in-process Grid: delivers each message straight to a ClientApp, no Ray, no SuperLink.

For tests and benchmarks of the strategies with the real client handlers:
10 nodes x 3 rounds run in well under a second of Flower overhead.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid

# Node ids straddle 2**63 on purpose: they must stay exact Python ints.
NODE_ID_BASE = 2**63 - 3


def ensure_task_identity() -> None:
    """Messages need a run/node/task identity that Flower's runtime would set; set one."""
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        if getattr(TaskIdentity, name) is None:
            setattr(TaskIdentity, name, value)


Fault = Callable[[Message, Message | None], Message | None]


class InProcessGrid(Grid):
    """Delivers each message to the ClientApp in-process; no Ray, no SuperLink.

    ``faults[partition_id]`` may rewrite a reply (or return ``None``: no reply,
    as after a timeout). ``join_after[partition_id] = r`` hides that node until
    the server has pushed the training messages of round ``r`` (a SuperNode
    that connects late). ``sent`` and ``replies`` record all traffic for the
    tests; ``keep_traffic=False`` (benchmarks) keeps none of it, since a long
    run would hold every model it ever sent (gigabytes over 300 rounds).
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
        if app is None:
            from ripple_flwr.app.handlers import dispatch

            app = dispatch
        self.app = app
        ensure_task_identity()
        total = int(run_config["num-partitions"]) + int(run_config.get("new-clients", 0))
        n = total if num_nodes is None else num_nodes
        if node_configs is None:
            node_configs = [{"partition-id": i, "num-partitions": total} for i in range(n)]
        self.node_ids = [NODE_ID_BASE + 2 * i for i in range(len(node_configs))]
        self.contexts = {
            nid: Context(
                run_id=1, node_id=nid, node_config=cfg, state=RecordDict(), run_config=run_config
            )
            for nid, cfg in zip(self.node_ids, node_configs, strict=True)
        }
        self.faults = faults or {}
        self.join_after = dict(join_after or {})
        self.last_train_round = 0
        self.keep_traffic = keep_traffic
        self.sent: list[Message] = []
        self.replies: list[Message] = []
        self._outbox: dict[str, Message] = {}
        self._run = None

    # -- Grid API --------------------------------------------------------------------------
    def set_run(self, run) -> None:
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id=dst_node_id, message_type=message_type)

    def get_node_ids(self) -> Iterable[int]:
        if not self.join_after:  # every node is there (the server asks once a round)
            return list(self.contexts)
        return [
            nid
            for nid, ctx in self.contexts.items()
            if self.join_after.get(int(ctx.node_config.get("partition-id", -1)), 0)
            <= self.last_train_round
        ]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            assert isinstance(msg.metadata.dst_node_id, int)
            mid = uuid.uuid4().hex
            msg.metadata.__dict__["_message_id"] = mid
            if self.keep_traffic:
                self.sent.append(msg)
            if msg.metadata.message_type == "train":
                cfg = msg.content.config_records.get("config")
                if cfg is not None and "server-round" in cfg:
                    self.last_train_round = max(self.last_train_round, int(cfg["server-round"]))
            reply = self._deliver(msg)
            if reply is not None:
                self._outbox[mid] = reply
                if self.keep_traffic:
                    self.replies.append(reply)
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._outbox.pop(m) for m in list(message_ids) if m in self._outbox]

    def send_and_receive(self, messages, *, timeout=None):
        ids = self.push_messages(list(messages))
        return self.pull_messages(ids)

    # -- delivery ----------------------------------------------------------------------------
    def _deliver(self, msg: Message) -> Message | None:
        context = self.contexts[msg.metadata.dst_node_id]
        try:
            reply = self.app(msg, context)
        except Exception as err:  # what the SuperNode turns into an error reply
            reply = Message(
                Error(
                    code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                    reason=f"{type(err).__name__}: {err}",
                ),
                reply_to=msg,
            )
        pid = int(context.node_config.get("partition-id", -1))
        fault = self.faults.get(pid)
        return fault(msg, reply) if fault is not None else reply

    def sent_of_type(self, prefix: str) -> list[Message]:
        return [m for m in self.sent if m.metadata.message_type.startswith(prefix)]
