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
  holds the client to from then on).
- ``train``: ``arrays`` (the model) and ``config`` (server-round, lr,
  momentum, local-epochs, batch-size); reply ``arrays`` (the trained full
  weights) and ``metrics`` (num-examples, train_loss).
- ``evaluate``: ``arrays`` and ``config``; reply ``metrics`` (loss,
  accuracy, num-examples, partition-id).
- Either message may carry several candidate models (``arrays`` plus
  ``candidate-1`` ...; :mod:`ripple_flwr.app.candidates`): the client keeps the
  one with the lowest loss on its training split and adds ``chosen`` and
  ``candidate-losses`` to its reply's metrics (IFCA's rounds, the clustered
  baselines' zero-shot choice).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict

from ripple_flwr.app.candidates import lowest_loss, split_candidates
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
from ripple_flwr.data.cache import cached_federation
from ripple_flwr.privacy.release import noise_generator
from ripple_flwr.settings import RunSettings
from ripple_flwr.training.loops import evaluate_model
from ripple_flwr.training.models import build_model, get_state, set_state
from ripple_flwr.training.rules import (
    CLIENT_RULES,
    ClientRule,
    RoundInputs,
    Store,
    train_with_rule,
)
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
    key = (image_shape, settings.J, settings.L, settings.svd_rank, settings.explained_variance)
    if key not in _EMBEDDERS:
        _EMBEDDERS.clear()
        _EMBEDDERS[key] = SpectralEmbedder(
            image_shape,
            J=settings.J,
            L=settings.L,
            prototype=PrototypeSettings(settings.svd_rank, settings.explained_variance_or_none),
            device="auto",
        )
    return _EMBEDDERS[key]


def _model_for(settings: RunSettings, image_shape, num_classes: int) -> torch.nn.Module:
    """A reusable model skeleton; its weights are always overwritten by the received ones."""
    key = (settings.model, tuple(image_shape), num_classes)
    if key not in _MODELS:
        _MODELS.clear()
        _MODELS[key] = build_model(settings.model, image_shape, num_classes)
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
def client_summary(settings: RunSettings, pid: int, kind: str) -> np.ndarray | None:
    """What the client sends once: its WST embedding Phi, its mean image, or nothing."""
    if kind not in SUMMARY_KINDS:
        raise ValueError(f"unknown summary kind {kind!r}; choose {', '.join(SUMMARY_KINDS)}")
    if kind == "none":
        return None
    fed = cached_federation(settings)
    images = fed.client_images(pid)
    if kind == "mean":
        return images.reshape(len(images), -1).mean(axis=0).astype(np.float32)
    return embedder_for(settings, fed.dataset.image_shape).embed(images).astype(np.float32)


def train_client(
    settings: RunSettings,
    pid: int,
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
    fed = cached_federation(settings)
    x, y, _, _ = fed.client_data(pid)
    model = _model_for(settings, fed.dataset.image_shape, fed.dataset.num_classes)
    set_state(model, state)
    inputs = RoundInputs(
        config=config or {},
        extras=extras or {},
        store={} if store is None else store,
        returning=returning,
        lr=lr,
        momentum=momentum,
    )
    seed = int(np.random.SeedSequence([settings.seed, server_round, pid]).generate_state(1)[0])
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


def choose_candidate(
    settings: RunSettings, pid: int, states: list[dict[str, np.ndarray]]
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The candidate with the lowest loss on the client's training split, and the metrics.

    Only the training split is used: the test split the client is scored on
    takes no part in the choice.
    """
    if len(states) == 1:
        return states[0], {}
    _limit_threads(settings)
    fed = cached_federation(settings)
    x, y, _, _ = fed.client_data(pid)
    model = _model_for(settings, fed.dataset.image_shape, fed.dataset.num_classes)
    best, losses = lowest_loss(model, states, x, y, device=device())
    return states[best], {"chosen": best, "candidate-losses": losses}


def client_rule(settings: RunSettings) -> ClientRule:
    """A fresh instance of the run's method's client rule, with the run's settings."""
    return CLIENT_RULES[get_method(settings.method).client_rule](settings)


def evaluate_client(
    settings: RunSettings, pid: int, state: dict[str, np.ndarray], store: Store | None = None
) -> dict[str, float | int]:
    """Loss and accuracy on the client's own test split of its personalised model.

    That is ``state`` itself unless the method's rule personalises it first
    (Per-FedAvg: one step on the train split; pFedMe: the personal model kept
    in the node's ``store``).
    """
    _limit_threads(settings)
    fed = cached_federation(settings)
    x_train, y_train, x, y = fed.client_data(pid)
    model = _model_for(settings, fed.dataset.image_shape, fed.dataset.num_classes)
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
def _settings_and_pid(context: Context) -> tuple[RunSettings, int]:
    settings = settings_from_context(context.run_config)
    return settings, check_partition(settings, dict(context.node_config))


def handle_query(msg: Message, context: Context) -> Message:
    """One-shot round: reply with the client's summary (computed locally) and its identity."""
    settings, pid = _settings_and_pid(context)
    config = msg.content.config_records.get("config", ConfigRecord())
    kind = str(config.get("summary", summary_kind(settings)))
    t0 = time.perf_counter()
    phi = client_summary(settings, pid, kind)
    private = phi is not None and DP_RECORD in msg.content.array_records
    if private:
        # Clipped and noised here, with a secret generator, before anything leaves the node.
        mech = mechanism_from_records(
            msg.content.array_records[DP_RECORD], msg.content.config_records[DP_CONFIG]
        )
        phi = mech.release(phi, noise_generator(dict(context.node_config)))
    seconds = time.perf_counter() - t0
    fed = cached_federation(settings)
    content = RecordDict(
        {
            "info": ConfigRecord(
                {
                    "partition-id": pid,
                    "num-partitions": settings.total_partitions,
                    "num-examples": int(len(fed.train_indices[pid])),
                    "num-test-examples": int(len(fed.test_indices[pid])),
                    "summary": kind,
                    "private": bool(private),
                    "seconds": float(seconds),
                }
            )
        }
    )
    if phi is not None:
        content["summary"] = ArrayRecord({"phi": Array(phi)})
    return Message(content, reply_to=msg)


def handle_train(msg: Message, context: Context) -> Message:
    """Train the received model locally; reply with the full trained weights."""
    settings, pid = _settings_and_pid(context)
    config = msg.content.config_records.get("config", ConfigRecord())
    candidates, others = split_candidates(msg.content.array_records)
    state, choice = choose_candidate(settings, pid, [record_to_state(r) for r in candidates])
    extras = {name: record_to_state(record) for name, record in others.items()}
    rule_config = msg.content.config_records.get("rule", ConfigRecord())
    new_state, metrics, reply_extras = train_client(
        settings,
        pid,
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


def handle_evaluate(msg: Message, context: Context) -> Message:
    """Evaluate the received model (or the best candidate on the train split) on the test split."""
    settings, pid = _settings_and_pid(context)
    candidates, _ = split_candidates(msg.content.array_records)
    state, choice = choose_candidate(settings, pid, [record_to_state(r) for r in candidates])
    metrics = evaluate_client(settings, pid, state, NodeStore(context.state))
    metrics.update(choice)
    metrics["partition-id"] = pid
    return Message(RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)


def dispatch(msg: Message, context: Context) -> Message:
    """Route a message to its handler by type, as ``client_app.app`` does (for in-process use)."""
    kind = msg.metadata.message_type
    if kind == "query.embed":
        return handle_query(msg, context)
    if kind == "train":
        return handle_train(msg, context)
    if kind == "evaluate":
        return handle_evaluate(msg, context)
    raise ValueError(f"no handler for message type {kind!r}")
