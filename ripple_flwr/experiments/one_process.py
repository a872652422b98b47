"""The one-process federation: a Flower Grid that hands each message straight to the ClientApp.

No Ray, no SuperLink: the ServerApp's ``run_server`` drives the real client
handlers in this process. It is the engine of the tables and sweeps (one run
per process or per Ray task) and of the whole-run tests, whose fault
injection lives in ``ripple_flwr.testing.inprocess``.

    from ripple_flwr.experiments.one_process import run_one_process
    results = run_one_process({"method": "fedavg", "num-partitions": 20, ...})
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.serverapp import Grid

from ripple_flwr.app.flower_internals import ErrorCode, ensure_task_identity
from ripple_flwr.app.protocol.messages import NODE_NUM_PARTITIONS, NODE_PARTITION_ID

# Node ids straddle 2**63 on purpose: they must stay exact Python ints.
NODE_ID_BASE = 2**63 - 3


class OneProcessGrid(Grid):
    """Delivers each message to the ClientApp in this process; keeps no traffic.

    Parameters
    ----------
    run_config
        The run config every node sees (``num-partitions`` and ``new-clients``
        give the node count unless ``num_nodes`` or ``node_configs`` do).
    num_nodes
        How many nodes, each with partition id ``0 .. num_nodes - 1``.
    node_configs
        Each node's node config, instead of partition ids (own-data silos).
    app
        The ClientApp's message handler (default: the app's ``dispatch``).
    """

    def __init__(
        self,
        run_config: Mapping[str, Any],
        num_nodes: int | None = None,
        *,
        node_configs: list[dict[str, Any]] | None = None,
        app: Any = None,
    ) -> None:
        if app is None:
            from ripple_flwr.app.client.handlers import dispatch

            app = dispatch
        self.app = app
        ensure_task_identity()
        total = int(run_config["num-partitions"]) + int(run_config.get("new-clients", 0))
        n = total if num_nodes is None else num_nodes
        if node_configs is None:
            node_configs = [{NODE_PARTITION_ID: i, NODE_NUM_PARTITIONS: total} for i in range(n)]
        self.node_ids = [NODE_ID_BASE + 2 * i for i in range(len(node_configs))]
        self.contexts = {
            nid: Context(
                run_id=1, node_id=nid, node_config=cfg, state=RecordDict(), run_config=run_config
            )
            for nid, cfg in zip(self.node_ids, node_configs, strict=True)
        }
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
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            assert isinstance(msg.metadata.dst_node_id, int)
            mid = uuid.uuid4().hex
            msg.metadata.__dict__["_message_id"] = mid
            reply = self._deliver(msg)
            if reply is not None:
                self._outbox[mid] = reply
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
            return self.app(msg, context)
        except Exception as err:  # what the SuperNode turns into an error reply
            return Message(
                Error(
                    code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                    reason=f"{type(err).__name__}: {err}",
                ),
                reply_to=msg,
            )


def run_one_process(
    cfg: Mapping[str, Any], node_configs: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Run the federation ``cfg`` (a run config) to the end in this process; its results dict.

    The results file is written at ``cfg["results-path"]`` (replacing a stale
    one there) under the output folder, as the ServerApp writes it.
    """
    from ripple_flwr.app.server.run import run_server

    cfg = {**cfg, "overwrite-results": True}
    grid = OneProcessGrid(cfg, node_configs=node_configs)
    return json.loads(run_server(grid, cfg).read_text())
