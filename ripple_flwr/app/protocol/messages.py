"""Every message between the server and a client: its type, its records, its keys, its codec.

The keys are written here once. The server encodes a request with these functions and a
client decodes it with the matching ``decode``; a request that lacks a key is a
:class:`ProtocolError` that names the key and the message, never a silent fallback to the
client's own settings. Replies are encoded by the client with the same keys; the server
converts and bounds every field of a reply in one place
(:mod:`ripple_flwr.app.server.replies.validation`), because nothing a
client sends is trusted.

- ``query.embed`` (:data:`QUERY`): ``config`` = {``summary``: embedding | mean | method |
  none}, plus the public DP mechanism and, for own-data runs, :data:`RUN_DATA`; reply ``info`` (the
  client's identity and split sizes) and ``summary`` (``phi``).
- ``query.method`` (:data:`METHOD_QUERY`): a method's own side query (FLUX's descriptor
  round): the model and the method's ``config`` (its keys are the method's, read by its
  folder's ``client.py``: ``answer``); reply ``summary`` (``phi``), which the method's
  server side checks in one place before use.
- ``train`` (:data:`TRAIN`): the model (or candidates) and ``config`` = {``lr``,
  ``momentum``, ``local-epochs``, ``batch-size``, what Flower's strategy adds,
  ``server-round``}, optionally ``rule`` = {``returning``}; reply ``arrays`` and ``metrics``
  (``num-examples``, ``train_loss``, the rule's extras).
- ``evaluate`` (:data:`EVALUATE`): the model (or candidates) and ``config`` =
  {``server-round``}; reply ``metrics`` (``loss``, ``accuracy``, ``num-examples``,
  ``partition-id``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MessageType, MetricRecord, RecordDict

from ripple_flwr.io.classes import classes_hash

# -- message types ---------------------------------------------------------------------------
QUERY = f"{MessageType.QUERY}.embed"
METHOD_QUERY = f"{MessageType.QUERY}.method"
TRAIN = MessageType.TRAIN
EVALUATE = MessageType.EVALUATE
MESSAGE_TYPES = (QUERY, METHOD_QUERY, TRAIN, EVALUATE)

# -- records of a message's content ----------------------------------------------------------
CONFIG = "config"
INFO = "info"
SUMMARY = "summary"  # the ArrayRecord holding PHI
PHI = "phi"
ARRAYS = "arrays"
METRICS = "metrics"
RULE = "rule"
RUN_DATA = "ripple.data"  # own-data runs: the run's classes and image shape (a node keeps it)

# -- a SuperNode's node config (Flower's ``--node-config``) ---------------------------------
NODE_PARTITION_ID = "partition-id"
NODE_NUM_PARTITIONS = "num-partitions"
NODE_HELD_OUT = "held-out"

# -- keys ------------------------------------------------------------------------------------
SERVER_ROUND = "server-round"
LR = "lr"
MOMENTUM = "momentum"
LOCAL_EPOCHS = "local-epochs"
BATCH_SIZE = "batch-size"
RETURNING = "returning"
SUMMARY_KIND = "summary"
NUM_EXAMPLES = "num-examples"
NUM_TEST_EXAMPLES = "num-test-examples"
NUM_PARTITIONS = NODE_NUM_PARTITIONS  # a query reply repeats the node's own config
PARTITION_ID = NODE_PARTITION_ID
HELD_OUT = NODE_HELD_OUT
TRAIN_LOSS = "train_loss"
LOSS = "loss"
ACCURACY = "accuracy"
CHOSEN = "chosen"
CANDIDATE_LOSSES = "candidate-losses"
STATE_TRAINED = "state-trained"
PRIVATE = "private"
RELEASE_REUSED = "release-reused"
SECONDS = "seconds"
DATA_SOURCE = "data"  # "benchmark" | "local"
NAME = "name"
CLASSES = "classes"
CLASSES_HASH = "classes-hash"
IMAGE_SHAPE = "image-shape"

# embedding: Ripple's WST embedding; mean: the mean image (mean unmixing); method: the run's
# method's own summary (its folder's client.py: summary, e.g. PACFL's per-class subspaces);
# none: who the node is, nothing more.
SUMMARY_KINDS = ("embedding", "mean", "method", "none")
NAME_LIMIT = 64  # characters of a node's name (the results file's label for it)


class ProtocolError(ValueError):
    """A request that lacks a record or a key, or holds a value of the wrong kind."""


def config_of(content: RecordDict, message: str, name: str = CONFIG) -> ConfigRecord:
    """The ConfigRecord ``name`` of a ``message`` request; absent is a :class:`ProtocolError`."""
    record = content.config_records.get(name)
    if record is None:
        raise ProtocolError(f"the {message} message lacks its {name!r} record")
    return record


def required(record: Mapping[str, Any], key: str, kind: type, message: str) -> Any:
    """``record[key]`` as ``kind``; a missing or unconvertible value names the key."""
    if key not in record:
        raise ProtocolError(f"the {message} message's config lacks {key!r}")
    try:
        return kind(record[key])
    except (TypeError, ValueError) as err:
        raise ProtocolError(
            f"the {message} message's {key!r} is not {kind.__name__}: {record[key]!r}"
        ) from err


# -- query.embed -----------------------------------------------------------------------------
def query_config(kind: str) -> ConfigRecord:
    """The query's config: which summary the client sends."""
    return ConfigRecord({SUMMARY_KIND: kind})


def decode_query(content: RecordDict) -> str:
    """The summary kind a query asks for (one of :data:`SUMMARY_KINDS`)."""
    kind = required(config_of(content, QUERY), SUMMARY_KIND, str, QUERY)
    if kind not in SUMMARY_KINDS:
        raise ProtocolError(f"the {QUERY} message asks for summary {kind!r}: not {SUMMARY_KINDS}")
    return kind


def run_data_record(class_names: Sequence[str], image_shape: Sequence[int]) -> ConfigRecord:
    """What the server sends with the query of an own-data run (and the node keeps)."""
    return ConfigRecord(
        {
            CLASSES: [str(c) for c in class_names],
            IMAGE_SHAPE: [int(s) for s in image_shape],
            CLASSES_HASH: classes_hash(class_names),
        }
    )


def decode_run_data(record: Mapping[str, Any]) -> tuple[list[str], tuple[int, int, int]]:
    """The run's class list and image shape from a :func:`run_data_record`."""
    for key in (CLASSES, IMAGE_SHAPE):
        if key not in record:
            raise ProtocolError(f"the {RUN_DATA!r} record lacks {key!r}")
    shape = tuple(int(s) for s in record[IMAGE_SHAPE])
    if len(shape) != 3:
        raise ProtocolError(f"the {RUN_DATA!r} record's image-shape {shape} is not (C, H, W)")
    return [str(c) for c in record[CLASSES]], shape  # type: ignore[return-value]


# -- query.method ----------------------------------------------------------------------------
def method_query_config(values: Mapping[str, bool | int | float | str]) -> ConfigRecord:
    """A method's side query: its own keys and scalar values, opaque to the app."""
    return ConfigRecord(dict(values))


def decode_method_query(content: RecordDict) -> dict[str, Any]:
    """A method's side query's config as a plain dict (the method's client side reads it)."""
    return dict(config_of(content, METHOD_QUERY))


# -- train -----------------------------------------------------------------------------------
def train_config(lr: float, momentum: float, local_epochs: int, batch_size: int) -> ConfigRecord:
    """The client optimiser's settings every training message carries."""
    return ConfigRecord(
        {
            LR: float(lr),
            MOMENTUM: float(momentum),
            LOCAL_EPOCHS: local_epochs,
            BATCH_SIZE: batch_size,
        }
    )


def with_round(config: Mapping[str, Any], server_round: int) -> ConfigRecord:
    """``config`` plus the round it belongs to (the last key, as Flower's strategies add theirs)."""
    return ConfigRecord({**dict(config), SERVER_ROUND: server_round})


def rule_record(returning: bool) -> ConfigRecord:
    """Stateful methods: whether the client trained before (its state should exist)."""
    return ConfigRecord({RETURNING: bool(returning)})


@dataclass(frozen=True)
class TrainRequest:
    """A training message's settings, decoded; ``config`` keeps every key (rules read theirs)."""

    server_round: int
    lr: float
    momentum: float
    local_epochs: int
    batch_size: int
    returning: bool
    config: dict[str, Any]

    @classmethod
    def decode(cls, content: RecordDict) -> TrainRequest:
        """Every key of a training message; a missing one is a :class:`ProtocolError`."""
        config = config_of(content, TRAIN)
        rule = content.config_records.get(RULE)
        return cls(
            server_round=required(config, SERVER_ROUND, int, TRAIN),
            lr=required(config, LR, float, TRAIN),
            momentum=required(config, MOMENTUM, float, TRAIN),
            local_epochs=required(config, LOCAL_EPOCHS, int, TRAIN),
            batch_size=required(config, BATCH_SIZE, int, TRAIN),
            returning=False if rule is None else required(rule, RETURNING, bool, TRAIN),
            config=dict(config),
        )


# -- evaluate --------------------------------------------------------------------------------
def evaluate_config(server_round: int) -> ConfigRecord:
    """An evaluation's config: the round it scores."""
    return ConfigRecord({SERVER_ROUND: server_round})


def decode_evaluate(content: RecordDict) -> int:
    """The round an evaluation message scores."""
    return required(config_of(content, EVALUATE), SERVER_ROUND, int, EVALUATE)


# -- replies ---------------------------------------------------------------------------------
# A client encodes its reply with these classes; the server reads a reply's fields with their
# ``read`` (each field as sent, unchecked: ``None`` where the reply left it out) and converts
# and bounds every one itself, because nothing a client sends is trusted.
def summary_record(phi: np.ndarray) -> ArrayRecord:
    """The ``summary`` record of a query or descriptor reply."""
    return ArrayRecord({PHI: Array(phi)})


def summary_array(content: RecordDict) -> Array | None:
    """The reply's summary ``Array`` as sent (``None``: absent)."""
    record = content.array_records.get(SUMMARY)
    if record is None or PHI not in record:
        return None
    return record[PHI]


@dataclass(frozen=True)
class LocalIdentity:
    """What a node with its own data says about it in the query reply."""

    name: Any
    classes_hash: Any
    image_shape: Any
    held_out: Any


@dataclass(frozen=True)
class QueryReply:
    """A node's answer to the query: its identity, split sizes and (optionally) its summary.

    ``num_partitions`` is ``None`` for own data (the server counts); ``local`` only for
    own data. Client-side it is built typed and sent with :meth:`to_content`; server-side
    :meth:`read` gives every field as the client sent it (``None``: left out), unchecked.
    """

    partition_id: Any
    num_partitions: Any
    num_examples: Any
    num_test_examples: Any
    summary: Any
    private: Any
    release_reused: Any
    seconds: Any
    data: Any
    local: LocalIdentity | None = None
    phi: np.ndarray | None = None

    def to_content(self) -> RecordDict:
        """The reply's records (key order as the wire has always had it)."""
        info: dict[str, Any] = {PARTITION_ID: self.partition_id}
        if self.num_partitions is not None:
            info[NUM_PARTITIONS] = self.num_partitions
        info.update(
            {
                NUM_EXAMPLES: self.num_examples,
                NUM_TEST_EXAMPLES: self.num_test_examples,
                SUMMARY_KIND: self.summary,
                PRIVATE: self.private,
                RELEASE_REUSED: self.release_reused,
                SECONDS: self.seconds,
                DATA_SOURCE: self.data,
            }
        )
        if self.local is not None:
            info.update(
                {
                    NAME: self.local.name,
                    CLASSES_HASH: self.local.classes_hash,
                    IMAGE_SHAPE: self.local.image_shape,
                    HELD_OUT: self.local.held_out,
                }
            )
        content = RecordDict({INFO: ConfigRecord(info)})
        if self.phi is not None:
            content[SUMMARY] = summary_record(self.phi)
        return content

    @classmethod
    def read(cls, content: RecordDict) -> QueryReply:
        """Every field as sent, unchecked; only a reply without ``info`` raises (``KeyError``)."""
        info = content.config_records[INFO]
        return cls(
            partition_id=info.get(PARTITION_ID),
            num_partitions=info.get(NUM_PARTITIONS),
            num_examples=info.get(NUM_EXAMPLES),
            num_test_examples=info.get(NUM_TEST_EXAMPLES),
            summary=info.get(SUMMARY_KIND),
            private=info.get(PRIVATE),
            release_reused=info.get(RELEASE_REUSED),
            seconds=info.get(SECONDS),
            data=info.get(DATA_SOURCE),
            local=LocalIdentity(
                name=info.get(NAME),
                classes_hash=info.get(CLASSES_HASH),
                image_shape=info.get(IMAGE_SHAPE),
                held_out=info.get(HELD_OUT),
            ),
        )


@dataclass(frozen=True)
class MethodQueryReply:
    """The answer to a method's side query: ``phi`` (FLUX: its descriptor)."""

    phi: np.ndarray

    def to_content(self) -> RecordDict:
        """The reply's records."""
        return RecordDict({SUMMARY: summary_record(self.phi)})


@dataclass(frozen=True)
class TrainReply:
    """A training reply: the trained model, its metrics, a method's extra records.

    ``metrics`` holds :data:`NUM_EXAMPLES` and :data:`TRAIN_LOSS`, plus what a method adds
    (:data:`CHOSEN`, :data:`CANDIDATE_LOSSES`, :data:`STATE_TRAINED`), in that order.
    """

    arrays: ArrayRecord
    metrics: Mapping[str, Any]
    extras: Mapping[str, ArrayRecord]

    def to_content(self) -> RecordDict:
        """The reply's records."""
        content = RecordDict({ARRAYS: self.arrays, METRICS: MetricRecord(dict(self.metrics))})
        for name, record in self.extras.items():
            content[name] = record
        return content


def train_metrics_record(num_examples: int, train_loss: float) -> MetricRecord:
    """What Flower's aggregation reads of a training reply, and nothing else."""
    return MetricRecord({NUM_EXAMPLES: num_examples, TRAIN_LOSS: train_loss})


@dataclass(frozen=True)
class EvaluateReply:
    """An evaluation reply: ``loss``, ``accuracy``, ``num-examples`` (+ ``chosen``...) and
    the node's partition id (-1: own data)."""

    metrics: Mapping[str, Any]
    partition_id: int

    def to_content(self) -> RecordDict:
        """The reply's records."""
        return RecordDict(
            {METRICS: MetricRecord({**self.metrics, PARTITION_ID: self.partition_id})}
        )


def metrics_of(content: RecordDict) -> MetricRecord | None:
    """A train or evaluate reply's ``metrics`` record as sent (``None``: absent)."""
    return content.metric_records.get(METRICS)
