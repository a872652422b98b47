"""The client's work, without Flower: the one-shot summary, local training, evaluation.

:func:`client_summary`, :func:`train_client`, :func:`evaluate_client` and
:func:`choose_candidate` take the run's settings and the node's data (a benchmark
partition id, or :class:`~ripple_flwr.app.client.data.ClientData`); the handlers of
:mod:`.handlers` adapt them to messages (:mod:`ripple_flwr.app.protocol.messages` says what
each message holds). Either message may carry several candidate models (``arrays`` plus
``candidate-1`` ...; :mod:`.candidates`): the client keeps the one with the lowest loss on
its training split (IFCA's rounds, the clustered baselines' zero-shot choice).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ripple_flwr.app.client.candidates import lowest_loss
from ripple_flwr.app.client.data import ClientData, benchmark_data
from ripple_flwr.app.client.runtime import RUNTIME
from ripple_flwr.app.protocol.messages import (
    ACCURACY,
    CANDIDATE_LOSSES,
    CHOSEN,
    LOSS,
    NODE_NUM_PARTITIONS,
    NODE_PARTITION_ID,
    NUM_EXAMPLES,
    SUMMARY_KINDS,
    TRAIN_LOSS,
)
from ripple_flwr.methods.registry import get_method
from ripple_flwr.router.run_embedding import embedder_key, run_embedder
from ripple_flwr.settings import RunSettings
from ripple_flwr.training.loops import evaluate_model
from ripple_flwr.training.models import build_model, get_state, set_state
from ripple_flwr.training.rules import (
    ClientRule,
    PenaltyRule,
    RoundInputs,
    Store,
    sgd_rule,
    train_with_rule,
)
from ripple_flwr.wst.embedder import SpectralEmbedder

log = logging.getLogger("flwr.ripple")


# -- per-process resources -----------------------------------------------------------------
def device() -> str:
    """CUDA when available, else CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def _limit_threads(settings: RunSettings) -> None:
    """One torch thread per client process by default: many processes share two cores."""
    if settings.training.client_threads and RUNTIME.threads != settings.training.client_threads:
        torch.set_num_threads(settings.training.client_threads)
        RUNTIME.threads = settings.training.client_threads


def embedder_for(settings: RunSettings, image_shape: tuple[int, int, int]) -> SpectralEmbedder:
    """The process's embedder for these settings (scattering filters built once)."""
    key = embedder_key(settings, image_shape)
    return RUNTIME.embedder.get(key, lambda: run_embedder(settings, image_shape))


def _model_for(settings: RunSettings, image_shape, num_classes: int) -> torch.nn.Module:
    """A reusable model skeleton; its weights are always overwritten by the received ones."""
    key = (settings.training.model, tuple(image_shape), num_classes, settings.training.pretrained)
    # The architecture only: the ImageNet weights reach a client as the server's model.
    return RUNTIME.model.get(
        key,
        lambda: build_model(
            settings.training.model,
            image_shape,
            num_classes,
            pretrained=settings.training.pretrained,
        ),
    )


def check_partition(settings: RunSettings, node_config: dict[str, Any]) -> int:
    """The node's partition id, checked against the run's federation.

    Ids ``0 .. num-partitions-1`` are training clients, the ``new-clients`` ids
    after them are held-out clients onboarded zero-shot.
    """
    if NODE_PARTITION_ID not in node_config:
        raise ValueError(
            "node config lacks 'partition-id'; start the SuperNode with "
            "--node-config 'partition-id=<i> num-partitions=<n>'"
        )
    pid = int(node_config[NODE_PARTITION_ID])
    total = settings.data.total_partitions
    n_node = int(node_config.get(NODE_NUM_PARTITIONS, total))
    if n_node != total:
        raise ValueError(
            f"node has num-partitions={n_node} but the run has {total} partitions "
            f"(num-partitions={settings.data.num_partitions} + "
            f"new-clients={settings.data.new_clients}); "
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
    """What the client sends once: its WST embedding Phi, its mean image, the run's method's
    own summary (its folder's ``client.py``: ``summary``; PACFL's subspaces), or nothing."""
    if kind not in SUMMARY_KINDS:
        raise ValueError(f"unknown summary kind {kind!r}; choose {', '.join(SUMMARY_KINDS)}")
    if kind == "none":
        return None
    data = _data(settings, who)
    if kind == "method":
        own = get_method(settings.method).client_side().summary
        if own is None:
            raise ValueError(f"method {settings.method!r} has no summary of its own to send")
        return np.asarray(own(settings, data), dtype=np.float32).reshape(-1)
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
        NUM_EXAMPLES: int(stats["num_examples"]),
        TRAIN_LOSS: float(stats["mean_loss"]),
    }
    return get_state(model), metrics, reply_extras


def _shuffle_seed(settings: RunSettings, server_round: int, data: ClientData) -> int:
    """The seed of a round's local shuffles: the run's seed, the round and the client."""
    if data.pid is not None:
        keys = [settings.training.seed, server_round, data.pid]
    else:  # a node with its own data: keyed by what it holds, not by where the server put it
        digest = hashlib.sha256(data.y_train.tobytes() + data.name.encode()).digest()
        keys = [settings.training.seed, server_round, int.from_bytes(digest[:4], "big"), 1]
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
    return states[best], {CHOSEN: best, CANDIDATE_LOSSES: losses}


def client_rule(settings: RunSettings) -> ClientRule:
    """A fresh instance of the run's method's client rule (its folder's ``client.py``, else
    plain SGD), with the run's settings."""
    own = get_method(settings.method).client_side().rule
    return own(settings) if own is not None else PenaltyRule(sgd_rule)


def answer_method_query(
    settings: RunSettings,
    who: int | ClientData,
    state: dict[str, np.ndarray],
    config: Mapping[str, Any],
) -> np.ndarray:
    """The run's method's answer to its own side query (its folder's ``client.py``:
    ``answer``) under the model ``state``: FLUX's descriptor."""
    own = get_method(settings.method).client_side().answer
    if own is None:
        raise ValueError(f"method {settings.method!r} asks no side query of its clients")
    _limit_threads(settings)
    data = _data(settings, who)
    model = _model_for(settings, data.image_shape, data.num_classes)
    set_state(model, state)
    return np.asarray(own(settings, data, model, config, device()), dtype=np.float32)


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
        LOSS: float(stats["loss"]),
        ACCURACY: float(stats["accuracy"]),
        NUM_EXAMPLES: int(stats["num_examples"]),
    }
