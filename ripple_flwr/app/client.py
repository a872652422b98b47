"""ClientApp logic: the one-shot summary, local training and personalised evaluation.

The plain functions (:func:`client_summary`, :func:`train_client`,
:func:`evaluate_client`) know nothing of Flower; the ``handle_*`` functions
adapt them to messages and are what ``client_app.py`` registers, and what
the tests' in-process grid calls directly.

Message contents (the wire protocol of the app):

- ``query.embed``: in ``config`` a ConfigRecord with ``summary`` in
  ``embedding | mean | none``; reply ``summary`` (ArrayRecord with ``phi``,
  absent for ``none``) and ``info`` (ConfigRecord: partition-id,
  num-partitions, num-examples, num-test-examples: the split sizes the server
  holds the client to from then on; private and release-reused for the DP
  embedding, :mod:`ripple_flwr.app.node_release`).
- ``train``: ``arrays`` (the model) and ``config`` (server-round, lr,
  momentum, local-epochs, batch-size); reply ``arrays`` (the trained full
  weights) and ``metrics`` (num-examples, train_loss).
- ``evaluate``: ``arrays`` and ``config``; reply ``metrics`` (loss,
  accuracy, num-examples, partition-id).
- ``query.describe`` (FLUX): the model and whether labels may be read; reply
  the descriptor statistics (:mod:`ripple_flwr.app.describe`).
- Either message may carry several candidate models (``arrays`` plus
  ``candidate-1`` ...; :mod:`ripple_flwr.app.candidates`): the client keeps the
  one with the lowest loss on its training split and adds ``chosen`` and
  ``candidate-losses`` to its reply's metrics (IFCA's rounds, the clustered
  baselines' zero-shot choice).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.common.constant import ErrorCode

from ripple_flwr.app.candidates import lowest_loss, split_candidates
from ripple_flwr.app.client_data import (
    ClientData,
    ClientDataError,
    benchmark_data,
    check_mode,
    local_data,
    remember_run_data,
)
from ripple_flwr.app.node_release import release_once
from ripple_flwr.app.node_state import NodeStore
from ripple_flwr.app.records import (
    DP_CONFIG,
    DP_RECORD,
    mechanism_from_records,
    record_to_state,
    state_to_record,
)
from ripple_flwr.app.registry import get_method
from ripple_flwr.app.run_config import settings_from_context, summary_kind
from ripple_flwr.data.images import ImageFormatError
from ripple_flwr.data.local import LocalDataError
from ripple_flwr.router.pretrain import run_embed_size
from ripple_flwr.settings import RunSettings
from ripple_flwr.training.client_rules import CLIENT_RULES
from ripple_flwr.training.loops import evaluate_model
from ripple_flwr.training.models import build_model, get_state, set_state
from ripple_flwr.training.rules import ClientRule, RoundInputs, Store, train_with_rule
from ripple_flwr.wst.embedder import PrototypeSettings, SpectralEmbedder

log = logging.getLogger("flwr.ripple")

SUMMARY_KINDS = ("embedding", "mean", "none")
RULE_STATE_KEY = "ripple.rule-state"  # context.state: trainings this node's state has seen
_EMBEDDERS: dict[tuple, SpectralEmbedder] = {}
_MODELS: dict[tuple, torch.nn.Module] = {}
_THREADS_SET: list[int] = []


# -- per-process resources -----------------------------------------------------------------
def device() -> str:
    """CUDA when available, else CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def _limit_threads(settings: RunSettings) -> None:
    """One torch thread per client process by default: many processes share two cores."""
    if settings.client_threads and _THREADS_SET != [settings.client_threads]:
        torch.set_num_threads(settings.client_threads)
        _THREADS_SET[:] = [settings.client_threads]


def embedder_for(settings: RunSettings, image_shape: tuple[int, int, int]) -> SpectralEmbedder:
    """The process's embedder for these settings (scattering filters built once)."""
    side = run_embed_size(settings) or None
    key = (
        image_shape,
        settings.J,
        settings.L,
        settings.svd_rank,
        settings.explained_variance,
        side,
    )
    if key not in _EMBEDDERS:
        _EMBEDDERS.clear()
        _EMBEDDERS[key] = SpectralEmbedder(
            image_shape,
            J=settings.J,
            L=settings.L,
            prototype=PrototypeSettings(settings.svd_rank, settings.explained_variance_or_none),
            device="auto",
            embed_size=side,
        )
    return _EMBEDDERS[key]


def _model_for(settings: RunSettings, image_shape, num_classes: int) -> torch.nn.Module:
    """A reusable model skeleton; its weights are always overwritten by the received ones."""
    key = (settings.model, tuple(image_shape), num_classes, settings.pretrained)
    if key not in _MODELS:
        _MODELS.clear()
        # The architecture only: the ImageNet weights reach a client as the server's model.
        _MODELS[key] = build_model(
            settings.model, image_shape, num_classes, pretrained=settings.pretrained
        )
    return _MODELS[key]


def check_partition(settings: RunSettings, node_config: dict[str, Any]) -> int:
    """The node's partition id, checked against the run's federation.

    Ids ``0 .. num-partitions-1`` are training clients, the ``new-clients`` ids
    after them are held-out clients onboarded zero-shot.
    """
    if "partition-id" not in node_config:
        raise ValueError(
            "node config lacks 'partition-id'; start the SuperNode with "
            "--node-config 'partition-id=<i> num-partitions=<n>'"
        )
    pid = int(node_config["partition-id"])
    total = settings.total_partitions
    n_node = int(node_config.get("num-partitions", total))
    if n_node != total:
        raise ValueError(
            f"node has num-partitions={n_node} but the run has {total} partitions "
            f"(num-partitions={settings.num_partitions} + new-clients={settings.new_clients}); "
            "in simulation num-supernodes must equal that sum"
        )
    if not 0 <= pid < total:
        raise ValueError(f"partition-id {pid} out of range [0, {total})")
    return pid


# -- plain client functions ----------------------------------------------------------------
def _data(settings: RunSettings, who: int | ClientData) -> ClientData:
    """``who`` as the node's data: a benchmark partition id, or the data itself."""
    return who if isinstance(who, ClientData) else benchmark_data(settings, int(who))


def client_summary(settings: RunSettings, who: int | ClientData, kind: str) -> np.ndarray | None:
    """What the client sends once: its WST embedding Phi, its mean image, or nothing."""
    if kind not in SUMMARY_KINDS:
        raise ValueError(f"unknown summary kind {kind!r}; choose {', '.join(SUMMARY_KINDS)}")
    if kind == "none":
        return None
    data = _data(settings, who)
    images = data.images
    if kind == "mean":
        return images.reshape(len(images), -1).mean(axis=0).astype(np.float32)
    return embedder_for(settings, data.image_shape).embed(images).astype(np.float32)


def train_client(
    settings: RunSettings,
    who: int | ClientData,
    state: dict[str, np.ndarray],
    *,
    server_round: int,
    lr: float,
    momentum: float,
    epochs: int,
    batch_size: int,
    config: Mapping[str, Any] | None = None,
    extras: Mapping[str, dict[str, np.ndarray]] | None = None,
    store: Store | None = None,
    returning: bool = False,
) -> tuple[dict[str, np.ndarray], dict[str, float | int], dict[str, dict[str, np.ndarray]]]:
    """E epochs of local training on the client's train split from ``state``.

    The run's method names the training rule (its registry entry); the rule
    reads what it needs from ``config`` (the training message's config, e.g.
    FedProx's ``proximal-mu``), ``extras`` (the message's other ArrayRecords,
    e.g. SCAFFOLD's ``control``) and ``store`` (the node's persistent state).
    Returns the new full state, the metrics and the rule's extra reply arrays.
    """
    _limit_threads(settings)
    data = _data(settings, who)
    x, y = data.x_train, data.y_train
    model = _model_for(settings, data.image_shape, data.num_classes)
    set_state(model, state)
    inputs = RoundInputs(
        config=config or {},
        extras=extras or {},
        store={} if store is None else store,
        returning=returning,
        lr=lr,
        momentum=momentum,
    )
    seed = _shuffle_seed(settings, server_round, data)
    stats, reply_extras = train_with_rule(
        client_rule(settings),
        model,
        x,
        y,
        inputs,
        epochs=epochs,
        batch_size=batch_size,
        seed=seed,
        device=device(),
    )
    metrics = {
        "num-examples": int(stats["num_examples"]),
        "train_loss": float(stats["train_loss"]),
    }
    return get_state(model), metrics, reply_extras


def _shuffle_seed(settings: RunSettings, server_round: int, data: ClientData) -> int:
    """The seed of a round's local shuffles: the run's seed, the round and the client."""
    if data.pid is not None:
        keys = [settings.seed, server_round, data.pid]
    else:  # a node with its own data: keyed by what it holds, not by where the server put it
        digest = hashlib.sha256(data.y_train.tobytes() + data.name.encode()).digest()
        keys = [settings.seed, server_round, int.from_bytes(digest[:4], "big"), 1]
    return int(np.random.SeedSequence(keys).generate_state(1)[0])


def choose_candidate(
    settings: RunSettings, who: int | ClientData, states: list[dict[str, np.ndarray]]
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The candidate with the lowest loss on the client's training split, and the metrics.

    Only the training split is used: the test split the client is scored on
    takes no part in the choice.
    """
    if len(states) == 1:
        return states[0], {}
    _limit_threads(settings)
    data = _data(settings, who)
    model = _model_for(settings, data.image_shape, data.num_classes)
    best, losses = lowest_loss(model, states, data.x_train, data.y_train, device=device())
    return states[best], {"chosen": best, "candidate-losses": losses}


def client_rule(settings: RunSettings) -> ClientRule:
    """A fresh instance of the run's method's client rule, with the run's settings."""
    return CLIENT_RULES[get_method(settings.method).client_rule](settings)


def evaluate_client(
    settings: RunSettings,
    who: int | ClientData,
    state: dict[str, np.ndarray],
    store: Store | None = None,
) -> dict[str, float | int]:
    """Loss and accuracy on the client's own test split of its personalised model.

    That is ``state`` itself unless the method's rule personalises it first
    (Per-FedAvg: one step on the train split; pFedMe: the personal model kept
    in the node's ``store``).
    """
    _limit_threads(settings)
    data = _data(settings, who)
    x_train, y_train, x, y = data.x_train, data.y_train, data.x_test, data.y_test
    model = _model_for(settings, data.image_shape, data.num_classes)
    set_state(model, state)
    rule = client_rule(settings)
    if type(rule).personalise is not ClientRule.personalise:
        dev = torch.device(device())
        model.to(dev)
        xt = torch.as_tensor(np.array(x_train, dtype=np.float32), device=dev)
        yt = torch.as_tensor(np.array(y_train, dtype=np.int64), device=dev)
        rule.personalise(model, xt, yt, {} if store is None else store)
    stats = evaluate_model(model, x, y, device=device())
    return {
        "loss": float(stats["loss"]),
        "accuracy": float(stats["accuracy"]),
        "num-examples": int(stats["num_examples"]),
    }


# -- Flower handlers -----------------------------------------------------------------------
def node_data(context: Context) -> tuple[RunSettings, ClientData]:
    """The run's settings and this node's data (its partition, or its own files)."""
    settings = settings_from_context(context.run_config)
    node_config = dict(context.node_config)
    check_mode(settings, node_config)
    settings = node_settings(settings, node_config)
    if settings.client_data == "local":
        return settings, local_data(settings, node_config, context.state)
    return settings, benchmark_data(settings, check_partition(settings, node_config))


def node_settings(settings: RunSettings, node_config: dict[str, Any]) -> RunSettings:
    """``num-partitions = 0`` as this node sees it: its node config's ``num-partitions``.

    In simulation every node's ``num-partitions`` is the number of SuperNodes, the
    count the server settles on; the benchmark partitions are built for it. A node
    with its own data needs no count: its settings stay as the run config says.
    """
    if not settings.partitions_from_nodes or settings.client_data == "local":
        return settings
    if "num-partitions" not in node_config:
        raise ValueError(
            "num-partitions=0 takes the number of nodes from each node's config, but this "
            "node's lacks 'num-partitions'; start the SuperNode with --node-config "
            "'partition-id=<i> num-partitions=<n>', or set num-partitions in the run config"
        )
    n = int(node_config["num-partitions"])
    cached = _NODE_SETTINGS.get(n)
    if cached is None or cached[0] is not settings:  # settings_from_context: one per config
        cached = _NODE_SETTINGS[n] = (settings, settings.with_nodes(n))
    return cached[1]


_NODE_SETTINGS: dict[int, tuple[RunSettings, RunSettings]] = {}


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
    config = msg.content.config_records.get("config", ConfigRecord())
    kind = str(config.get("summary", summary_kind(settings)))
    t0 = time.perf_counter()
    phi = client_summary(settings, data, kind)
    private, reused = phi is not None and DP_RECORD in msg.content.array_records, False
    if private:
        # Clipped and noised here, with a secret generator, before anything leaves the node;
        # asked again in this run, the node sends the same release (no second epsilon).
        mech = mechanism_from_records(
            msg.content.array_records[DP_RECORD], msg.content.config_records[DP_CONFIG]
        )
        phi, reused = release_once(context.state, mech, phi, dict(context.node_config))
    seconds = time.perf_counter() - t0
    info: dict[str, Any] = {
        "partition-id": -1 if data.pid is None else data.pid,
        "num-partitions": settings.total_partitions,
        "num-examples": int(len(data.y_train)),
        "num-test-examples": int(len(data.y_test)),
        "summary": kind,
        "private": bool(private),
        "release-reused": bool(reused),
        "seconds": float(seconds),
        "data": data.source,
    }
    if settings.partitions_from_nodes:  # own data, num-partitions=0: the server counts
        info.pop("num-partitions")
    if data.source == "local":
        info.update(
            {
                "name": data.name,
                "classes-hash": data.classes,
                "image-shape": [int(v) for v in data.image_shape],
                "held-out": bool(context.node_config.get("held-out", False)),
            }
        )
    content = RecordDict({"info": ConfigRecord(info)})
    if phi is not None:
        content["summary"] = ArrayRecord({"phi": Array(phi)})
    return Message(content, reply_to=msg)


@answers_data_errors
def handle_train(msg: Message, context: Context) -> Message:
    """Train the received model locally; reply with the full trained weights."""
    settings, data = node_data(context)
    config = msg.content.config_records.get("config", ConfigRecord())
    candidates, others = split_candidates(msg.content.array_records)
    state, choice = choose_candidate(settings, data, [record_to_state(r) for r in candidates])
    extras = {name: record_to_state(record) for name, record in others.items()}
    rule_config = msg.content.config_records.get("rule", ConfigRecord())
    new_state, metrics, reply_extras = train_client(
        settings,
        data,
        state,
        server_round=int(config.get("server-round", 0)),
        lr=float(config.get("lr", settings.lr)),
        momentum=float(config.get("momentum", settings.momentum)),
        epochs=int(config.get("local-epochs", settings.local_epochs)),
        batch_size=int(config.get("batch-size", settings.batch_size)),
        config=dict(config),
        extras=extras,
        store=NodeStore(context.state),
        returning=bool(rule_config.get("returning", False)),
    )
    metrics.update(choice)
    if client_rule(settings).stateful:
        # How many trainings this node's state has seen: the server compares it with how
        # many it sent, so a node that lost its state (a restarted SuperNode) is recorded.
        seen = context.state.config_records.get(RULE_STATE_KEY, ConfigRecord({"trained": 0}))
        metrics["state-trained"] = int(seen["trained"])
        context.state[RULE_STATE_KEY] = ConfigRecord({"trained": int(seen["trained"]) + 1})
    content = RecordDict({"arrays": state_to_record(new_state), "metrics": MetricRecord(metrics)})
    for name, arrays in reply_extras.items():
        content[name] = state_to_record(arrays)
    return Message(content, reply_to=msg)


@answers_data_errors
def handle_evaluate(msg: Message, context: Context) -> Message:
    """Evaluate the received model (or the best candidate on the train split) on the test split."""
    settings, data = node_data(context)
    candidates, _ = split_candidates(msg.content.array_records)
    state, choice = choose_candidate(settings, data, [record_to_state(r) for r in candidates])
    metrics = evaluate_client(settings, data, state, NodeStore(context.state))
    metrics.update(choice)
    metrics["partition-id"] = -1 if data.pid is None else data.pid
    return Message(RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)
