"""What the engine's collaborator tests share: a small model, its messages and replies with
ids as a grid gives them, and clients as the query round leaves them."""

from __future__ import annotations

import uuid

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict

from ripple_flwr.app.protocol.records import state_to_record
from ripple_flwr.methods.api import QueryResult

STATE = {
    "w": np.arange(12, dtype=np.float32).reshape(3, 4) / 10,
    "b": np.zeros(4, dtype=np.float32),
}


def clients(n: int, examples: int = 40, tests: int = 10) -> QueryResult:
    """``n`` clients: node ids 100.., partitions 0.., as the query round leaves them."""
    return QueryResult(
        node_ids=[100 + i for i in range(n)],
        partition_ids=list(range(n)),
        num_examples=[examples] * n,
        features=None,
        num_test=[tests] * n,
    )


def sent(node_id: int, kind: str = MessageType.TRAIN, arrays: ArrayRecord | None = None):
    """A message to ``node_id`` with the id a grid would give it."""
    content = RecordDict({"arrays": arrays or state_to_record(STATE), "config": ConfigRecord()})
    msg = Message(content, dst_node_id=node_id, message_type=kind)
    msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex
    return msg


def give_ids(messages: list[Message]) -> list[Message]:
    """The ids a grid gives messages when it pushes them."""
    for msg in messages:
        msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex
    return messages


def train_reply(msg: Message, state=None, examples: int = 40, loss: float = 1.0) -> Message:
    """The reply of a client that trained: its model and its metrics."""
    metrics = MetricRecord({"num-examples": examples, "train_loss": loss})
    content = RecordDict({"arrays": state_to_record(state or STATE), "metrics": metrics})
    return Message(content, reply_to=msg)


def eval_reply(msg: Message, partition: int, accuracy: float, examples: int = 10) -> Message:
    """The reply of a client that scored the model it was sent."""
    metrics = MetricRecord(
        {"accuracy": accuracy, "loss": 1.0, "num-examples": examples, "partition-id": partition}
    )
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)
