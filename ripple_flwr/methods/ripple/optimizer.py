"""Ripple's ``cluster-optimizer``: Flower's server optimiser, one object per cluster model.

The paper moves each cluster model by eq. 9, ``theta_c += eta_s u_c`` with ``u_c`` the
``w``-weighted mean update of the round's clients. With ``cluster-optimizer`` = ``fedyogi``,
``fedadam`` or ``fedavgm``, cluster ``c`` is instead moved by Flower's own class, as Flower
wrote it: one instance per cluster, its ``current_arrays`` the cluster model, and its
``aggregate_train`` handed one reply that holds ``theta_c + u_c`` (weight 1), so that its
pseudo-gradient is exactly ``u_c``. Each instance keeps its own moments (FedYogi's and
FedAdam's ``m_t``, ``v_t``; FedAvgM's ``momentum_vector``), which a checkpoint saves. A
cluster that no client of the round weights (zero mass) is not stepped, as Flower takes no
step in a round without replies. The bytes of a round are unchanged: this is server work.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
from flwr.app import Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAdam, FedAvgM, FedYogi

from ripple_flwr.app.protocol.messages import NUM_EXAMPLES, TRAIN
from ripple_flwr.app.protocol.records import record_to_state, state_to_record
from ripple_flwr.app.server.bases.flower import fedopt_kwargs, flower_kwargs
from ripple_flwr.methods.fedavgm.spec import FEDAVGM_MOMENTUM
from ripple_flwr.settings import RunSettings

# name -> (Flower's class, the attributes of its object that a checkpoint saves)
OPTIMIZERS: dict[str, tuple[type, tuple[str, ...]]] = {
    "fedyogi": (FedYogi, ("current_arrays", "m_t", "v_t")),
    "fedadam": (FedAdam, ("current_arrays", "m_t", "v_t")),
    "fedavgm": (FedAvgM, ("current_arrays", "momentum_vector")),
}


def optimizer_kwargs(name: str, settings: RunSettings) -> dict[str, Any]:
    """The constructor arguments of Flower's class ``name`` from the run's settings.

    FedYogi and FedAdam read ``fedopt-eta``, ``fedopt-beta1``, ``fedopt-beta2`` and
    ``fedopt-tau`` (as the global FedYogi and FedAdam rows do); FedAvgM reads ``server-lr``
    and ``fedavgm-momentum`` (as the FedAvgM row does).
    """
    if name == "fedavgm":
        return {
            "server_learning_rate": settings.training.server_lr,
            "server_momentum": FEDAVGM_MOMENTUM.of(settings),
        }
    return fedopt_kwargs(settings)


@contextmanager
def _quiet_flower():
    """Flower logs 'Received 1 results' for each call; K calls a round would flood the log."""
    logger = logging.getLogger("flwr")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def _one_reply(state: Mapping[str, np.ndarray]) -> Message:
    """A reply as Flower's ``aggregate_train`` reads one: the arrays, weighted once."""
    content = RecordDict(
        {"arrays": state_to_record(dict(state)), "metrics": MetricRecord({NUM_EXAMPLES: 1})}
    )
    return Message(content, dst_node_id=0, message_type=TRAIN)


class ClusterOptimizer:
    """One Flower optimiser per cluster model, each stepping on its cluster's mean update.

    Parameters
    ----------
    name : str
        ``fedyogi``, ``fedadam`` or ``fedavgm`` (:data:`OPTIMIZERS`).
    k : int
        The number of cluster models.
    settings : RunSettings
        The run (the optimiser's own options: :func:`optimizer_kwargs`).
    """

    def __init__(self, name: str, k: int, settings: RunSettings) -> None:
        if name not in OPTIMIZERS:
            raise ValueError(f"unknown cluster optimiser {name!r}; choose {', '.join(OPTIMIZERS)}")
        self.name = name
        flower_class, self.fields = OPTIMIZERS[name]
        kwargs = {**flower_kwargs(settings), **optimizer_kwargs(name, settings)}
        self.flower = [flower_class(**kwargs) for _ in range(k)]

    def step(
        self,
        server_round: int,
        stacked: Mapping[str, np.ndarray],
        target: Mapping[str, np.ndarray],
        mass: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """The cluster models after one server step each.

        ``stacked`` holds the K models now and ``target`` the K models ``theta_c + u_c``
        (eq. 9 with ``eta_s = 1``), both on a leading cluster axis; ``mass[c]`` is the
        round's total weight on cluster ``c``. Tensors that are not floating point are
        taken from ``target`` unchanged, and every result keeps the model's dtype.
        """
        out = {key: np.array(value, copy=True) for key, value in target.items()}
        keys = [k for k, v in stacked.items() if np.issubdtype(np.asarray(v).dtype, np.inexact)]
        with _quiet_flower():
            for c, flower in enumerate(self.flower):
                if not mass[c] > 0:
                    out_c = {k: np.asarray(stacked[k][c]) for k in keys}
                else:
                    now = {k: np.asarray(stacked[k][c]) for k in keys}
                    self._set_current(flower, now)
                    arrays, _ = flower.aggregate_train(
                        server_round, [_one_reply({k: np.asarray(target[k][c]) for k in keys})]
                    )
                    out_c = record_to_state(arrays)
                for k in keys:
                    out[k][c] = np.asarray(out_c[k], dtype=out[k].dtype)
        return out

    def _set_current(self, flower: Any, now: dict[str, np.ndarray]) -> None:
        """The cluster model as Flower's ``configure_train`` would record it."""
        if isinstance(flower, FedAvgM):
            flower.current_arrays = state_to_record(now)
        else:  # FedOpt keeps a dict of numpy arrays
            flower.current_arrays = {k: np.array(v, copy=True) for k, v in now.items()}

    # -- checkpoint ---------------------------------------------------------------------------
    def state(self) -> list[dict[str, Any]]:
        """Each cluster's Flower attributes (:data:`OPTIMIZERS`), by name."""
        out = []
        for flower in self.flower:
            out.append({name: getattr(flower, name) for name in self.fields})
        return out

    def restore(self, saved: list[dict[str, Any]]) -> None:
        """Put each cluster's saved attributes back on its Flower object."""
        if len(saved) != len(self.flower):
            raise ValueError(
                f"the saved {self.name} state has {len(saved)} clusters, this run "
                f"{len(self.flower)}; resume from a <results>.resume.npz of the same num-components"
            )
        for flower, fields in zip(self.flower, saved, strict=True):
            unknown = set(fields) - set(self.fields)
            if unknown:
                raise ValueError(
                    f"the saved {self.name} state has fields {sorted(unknown)}, which "
                    f"{type(flower).__name__} does not keep"
                )
            for name, value in fields.items():
                setattr(flower, name, value)
