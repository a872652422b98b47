"""The client's Flower handlers: each message type decoded, answered, encoded.

:data:`HANDLERS` is the one table of message types and handlers; ``client_app.py``
registers it with Flower's ``ClientApp`` and :func:`dispatch` routes by it in one process.
Every request is decoded by :mod:`ripple_flwr.app.protocol.messages` (a missing key is an
error, never a fallback); the work itself is in :mod:`.work`, which knows nothing of Flower.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from flwr.app import (
    ConfigRecord,
    Context,
    Error,
    Message,
)

from ripple_flwr.app.client.data import (
    ClientData,
    ClientDataError,
    benchmark_data,
    check_mode,
    local_data,
    remember_run_data,
)
from ripple_flwr.app.client.node_release import release_once
from ripple_flwr.app.client.node_state import NodeStore
from ripple_flwr.app.client.runtime import RUNTIME
from ripple_flwr.app.client.work import (
    answer_method_query,
    check_partition,
    choose_candidate,
    client_rule,
    client_summary,
    evaluate_client,
    train_client,
)
from ripple_flwr.app.flower_internals import ErrorCode
from ripple_flwr.app.protocol.candidates import split_candidates
from ripple_flwr.app.protocol.messages import (
    ARRAYS,
    EVALUATE,
    METHOD_QUERY,
    NODE_HELD_OUT,
    NODE_NUM_PARTITIONS,
    QUERY,
    STATE_TRAINED,
    TRAIN,
    EvaluateReply,
    LocalIdentity,
    MethodQueryReply,
    ProtocolError,
    QueryReply,
    TrainReply,
    TrainRequest,
    decode_evaluate,
    decode_method_query,
    decode_query,
)
from ripple_flwr.app.protocol.records import (
    DP_CONFIG,
    DP_RECORD,
    mechanism_parts,
    record_to_state,
    state_to_record,
)
from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.data.images import ImageFormatError
from ripple_flwr.data.local import LocalDataError
from ripple_flwr.privacy.release import PublicMechanism
from ripple_flwr.settings import RunSettings

log = logging.getLogger("flwr.ripple")
RULE_STATE_KEY = "ripple.rule-state"  # context.state: trainings this node's state has seen


def settings_from_context(run_config: Mapping[str, Any]) -> RunSettings:
    """The run config parsed once per process (the same config, the same object).

    Without the method's own rules: the server checked them before its first message, and a
    client never imports a strategy.
    """
    key = json.dumps(dict(run_config), sort_keys=True, default=str)
    return RUNTIME.settings.get(key, lambda: parse_run_config(run_config, method_rules=False))


def node_data(context: Context) -> tuple[RunSettings, ClientData]:
    """The run's settings and this node's data (its partition, or its own files)."""
    settings = settings_from_context(context.run_config)
    node_config = dict(context.node_config)
    check_mode(settings, node_config)
    settings = node_settings(settings, node_config)
    if settings.data.client_data == "local":
        return settings, local_data(settings, node_config, context.state)
    return settings, benchmark_data(settings, check_partition(settings, node_config))


def node_settings(settings: RunSettings, node_config: dict[str, Any]) -> RunSettings:
    """``num-partitions = 0`` as this node sees it: its node config's ``num-partitions``.

    In simulation every node's ``num-partitions`` is the number of SuperNodes, the
    count the server settles on; the benchmark partitions are built for it. A node
    with its own data needs no count: its settings stay as the run config says.
    """
    if not settings.data.partitions_from_nodes or settings.data.client_data == "local":
        return settings
    if NODE_NUM_PARTITIONS not in node_config:
        raise ValueError(
            "num-partitions=0 takes the number of nodes from each node's config, but this "
            "node's lacks 'num-partitions'; start the SuperNode with --node-config "
            "'partition-id=<i> num-partitions=<n>', or set num-partitions in the run config"
        )
    n = int(node_config[NODE_NUM_PARTITIONS])
    cached = RUNTIME.node_settings.get(n)
    if cached is None or cached[0] is not settings:  # settings_from_context: one per config
        cached = RUNTIME.node_settings[n] = (settings, settings.with_nodes(n))
    return cached[1]


def answers_data_errors(handler: Callable[[Message, Context], Message]):
    """A node whose data or mode does not fit the run answers with the reason, not a crash.

    The server names the node and the reason, leaves the node out and goes on.
    """

    @functools.wraps(handler)
    def wrapped(msg: Message, context: Context) -> Message:
        try:
            return handler(msg, context)
        except (LocalDataError, ClientDataError, ImageFormatError) as err:
            log.warning("node cannot take part: %s", err)
            reason = " ".join(str(err).split())
            return Message(Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason), reply_to=msg)

    return wrapped


@answers_data_errors
def handle_query(msg: Message, context: Context) -> Message:
    """One-shot round: reply with the client's summary (computed locally) and its identity."""
    remember_run_data(context.state, msg.content)
    settings, data = node_data(context)
    kind = decode_query(msg.content)
    t0 = time.perf_counter()
    phi = client_summary(settings, data, kind)
    private, reused = phi is not None and DP_RECORD in msg.content.array_records, False
    if private:
        # Clipped and noised here, with a secret generator, before anything leaves the node;
        # asked again in this run, the node sends the same release (no second epsilon).
        mech = PublicMechanism.from_parts(
            *mechanism_parts(
                msg.content.array_records[DP_RECORD], msg.content.config_records[DP_CONFIG]
            )
        )
        phi, reused = release_once(context.state, mech, phi, dict(context.node_config))
    seconds = time.perf_counter() - t0
    local = None
    if data.source == "local":
        local = LocalIdentity(
            name=data.name,
            classes_hash=data.classes,
            image_shape=[int(v) for v in data.image_shape],
            held_out=bool(context.node_config.get(NODE_HELD_OUT, False)),
        )
    reply = QueryReply(
        partition_id=-1 if data.pid is None else data.pid,
        # own data, num-partitions=0: the server counts
        num_partitions=None
        if settings.data.partitions_from_nodes
        else settings.data.total_partitions,
        num_examples=int(len(data.y_train)),
        num_test_examples=int(len(data.y_test)),
        summary=kind,
        private=bool(private),
        release_reused=bool(reused),
        seconds=float(seconds),
        data=data.source,
        local=local,
        phi=phi,
    )
    return Message(reply.to_content(), reply_to=msg)


@answers_data_errors
def handle_train(msg: Message, context: Context) -> Message:
    """Train the received model locally; reply with the full trained weights."""
    settings, data = node_data(context)
    request = TrainRequest.decode(msg.content)
    candidates, others = split_candidates(msg.content.array_records)
    state, choice = choose_candidate(settings, data, [record_to_state(r) for r in candidates])
    extras = {name: record_to_state(record) for name, record in others.items()}
    new_state, metrics, reply_extras = train_client(
        settings,
        data,
        state,
        server_round=request.server_round,
        lr=request.lr,
        momentum=request.momentum,
        epochs=request.local_epochs,
        batch_size=request.batch_size,
        config=request.config,
        extras=extras,
        store=NodeStore(context.state),
        returning=request.returning,
    )
    metrics.update(choice)
    if client_rule(settings).stateful:
        # How many trainings this node's state has seen: the server compares it with how
        # many it sent, so a node that lost its state (a restarted SuperNode) is recorded.
        seen = context.state.config_records.get(RULE_STATE_KEY, ConfigRecord({"trained": 0}))
        metrics[STATE_TRAINED] = int(seen["trained"])
        context.state[RULE_STATE_KEY] = ConfigRecord({"trained": int(seen["trained"]) + 1})
    reply = TrainReply(
        arrays=state_to_record(new_state),
        metrics=metrics,
        extras={name: state_to_record(arrays) for name, arrays in reply_extras.items()},
    )
    return Message(reply.to_content(), reply_to=msg)


@answers_data_errors
def handle_evaluate(msg: Message, context: Context) -> Message:
    """Evaluate the received model (or the best candidate on the train split) on the test split."""
    settings, data = node_data(context)
    decode_evaluate(msg.content)
    candidates, _ = split_candidates(msg.content.array_records)
    state, choice = choose_candidate(settings, data, [record_to_state(r) for r in candidates])
    metrics = evaluate_client(settings, data, state, NodeStore(context.state))
    metrics.update(choice)
    reply = EvaluateReply(metrics=metrics, partition_id=-1 if data.pid is None else data.pid)
    return Message(reply.to_content(), reply_to=msg)


@answers_data_errors
def handle_method_query(msg: Message, context: Context) -> Message:
    """A method's side query (FLUX's descriptor round): its client side answers under the
    received model; the method's server checks the answer."""
    settings, data = node_data(context)
    config = decode_method_query(msg.content)
    state = record_to_state(msg.content.array_records[ARRAYS])
    phi = answer_method_query(settings, data, state, config)
    return Message(MethodQueryReply(phi).to_content(), reply_to=msg)


# The one handler table: client_app.py registers it with Flower's ClientApp, and the
# one-process grid dispatches through it.
HANDLERS: dict[str, Callable[[Message, Context], Message]] = {
    QUERY: handle_query,
    METHOD_QUERY: handle_method_query,  # a method's own side query (FLUX's descriptors)
    TRAIN: handle_train,
    EVALUATE: handle_evaluate,
}


def dispatch(msg: Message, context: Context) -> Message:
    """Route a message to its handler by type, as ``client_app.app`` does."""
    kind = msg.metadata.message_type
    if kind not in HANDLERS:
        raise ProtocolError(f"no handler for message type {kind!r}; known: {', '.join(HANDLERS)}")
    return HANDLERS[kind](msg, context)
