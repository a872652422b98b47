"""``cluster-optimizer``: Flower's server optimiser on every cluster model at once.

Ripple's paper moves each cluster model by eq. 9, ``theta_c += eta_s u_c`` with ``u_c`` the
``w``-weighted mean update of the round's clients; IFCA, FeSEM, PACFL and CFL
(:mod:`ripple_flwr.app.server.bases.clustered`) set it to the mean of its members' returned
models, which is ``theta_c + u_c`` with ``u_c`` their mean update. With
``cluster-optimizer`` = ``fedyogi``, ``fedadam`` or ``fedavgm``, cluster ``c`` is instead
moved as Flower's own class would move it, handed one reply that holds ``theta_c + u_c``
(weight 1) so that its pseudo-gradient is exactly ``u_c``: Flower's arithmetic, vectorised
over the K stacked clusters (one object per cluster cost 15x the rest of the round's server
step at K = 10), with per-cluster moments (FedYogi's and FedAdam's ``m_t``, ``v_t``;
FedAvgM's ``momentum_vector``), which a checkpoint saves in the form one Flower object per
cluster kept. A cluster that no client of the round weights (zero mass) is not stepped, as
Flower takes no step in a round without replies. A cluster split in two (CFL) gives both
sides the parent's moments (:meth:`ClusterOptimizer.split`). The bytes of a round are
unchanged: this is server work.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.serverapp.strategy import FedAdam, FedAvgM, FedYogi

from ripple_flwr.app.protocol.records import record_to_state, state_to_record
from ripple_flwr.app.server.bases.flower import fedopt_kwargs
from ripple_flwr.methods.options import FEDAVGM_MOMENTUM
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


class ClusterOptimizer:
    """Flower's server optimiser for every cluster model at once, on the stacked models.

    The arithmetic is Flower's own (``FedYogi``, ``FedAdam`` and ``FedAvgM`` of Flower
    1.42, term by term and in its dtypes), applied to all K clusters in one pass over the
    stacked arrays instead of K Flower objects: the same numbers (a test holds each
    cluster to Flower's class), a fraction of the server time. Each cluster keeps its own
    moments; a cluster that no client of the round weights (zero mass) is not stepped and
    its moments stay as they were, as Flower takes no step in a round without replies.

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
        self.name, self.k = name, k
        _, self.fields = OPTIMIZERS[name]
        kw = optimizer_kwargs(name, settings)
        if name == "fedavgm":
            self.lr, self.momentum = kw["server_learning_rate"], kw["server_momentum"]
        else:
            self.eta, self.tau = kw["eta"], kw["tau"]
            self.beta_1, self.beta_2 = kw["beta_1"], kw["beta_2"]
        self.m: dict[str, np.ndarray] = {}  # FedOpt's m_t (FedAvgM: its momentum vector)
        self.v: dict[str, np.ndarray] = {}  # FedOpt's v_t
        self.started = np.zeros(k, dtype=bool)  # stepped at least once (Flower: moments exist)
        self.current: list[dict[str, np.ndarray] | None] = [None] * k  # Flower's current_arrays
        self.seconds = 0.0  # the server time its steps took (this process), for the record

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
        t0 = time.perf_counter()
        try:
            return self._step(server_round, stacked, target, mass)
        finally:
            self.seconds += time.perf_counter() - t0

    def record(self) -> dict[str, Any]:
        """What a run's results say of it: its name and the server time of its steps."""
        return {"name": self.name, "server_seconds": self.seconds}

    def _step(
        self,
        server_round: int,
        stacked: Mapping[str, np.ndarray],
        target: Mapping[str, np.ndarray],
        mass: np.ndarray,
    ) -> dict[str, np.ndarray]:
        out = {key: np.array(value, copy=True) for key, value in target.items()}
        keys = [k for k, v in stacked.items() if np.issubdtype(np.asarray(v).dtype, np.inexact)]
        idx = np.flatnonzero(np.asarray(mass) > 0)
        if not len(idx):
            for k in keys:
                out[k] = np.array(stacked[k], copy=True)
            return out
        every = len(idx) == self.k
        for k in keys:
            now = np.asarray(stacked[k]) if every else np.asarray(stacked[k])[idx]
            agg = np.asarray(target[k]) if every else np.asarray(target[k])[idx]
            if self.name == "fedavgm":
                new = self._fedavgm(k, now, agg, idx)
            else:
                new = self._fedopt(server_round, k, now, agg, idx, every)
            if every:
                out[k] = np.asarray(new, dtype=out[k].dtype)
            else:
                base = np.array(stacked[k], copy=True)
                base[idx] = np.asarray(new, dtype=base.dtype)
                out[k] = base
            for j, c in enumerate(idx.tolist()):
                if self.current[c] is None:
                    self.current[c] = {}
                self.current[c][k] = now[j]
        self.started[idx] = True
        return out

    def _moment(self, store: dict[str, np.ndarray], key: str, like: np.ndarray) -> np.ndarray:
        """The K clusters' moment ``key`` (zeros until a cluster is first stepped)."""
        if key not in store:
            store[key] = np.zeros((self.k, *like.shape[1:]), dtype=like.dtype)
        return store[key]

    def _fedopt(
        self, server_round: int, key: str, now: np.ndarray, agg: np.ndarray, idx, every: bool
    ) -> np.ndarray:
        """FedYogi's / FedAdam's step (Flower's ``_compute_deltat_and_mt`` and its own)."""
        delta = agg - now
        m_all = self._moment(self.m, key, now)
        v_all = self._moment(self.v, key, now)
        m = m_all if every else m_all[idx]
        v = v_all if every else v_all[idx]
        # Flower's expressions term by term, in place (the same float32 roundings, fewer
        # temporaries over the K stacked models): m = beta_1 m + (1 - beta_1) delta.
        m *= self.beta_1
        m += (1 - self.beta_1) * delta
        sq = np.multiply(delta, delta, out=delta)  # delta ** 2; delta is not needed again
        if self.name == "fedyogi":  # v = v - (1 - beta_2) sq sign(v - sq)
            sign = np.sign(np.subtract(v, sq))
            sq *= 1.0 - self.beta_2
            sq *= sign
            v -= sq
            lr: Any = self.eta
        else:  # fedadam: v = beta_2 v + (1 - beta_2) sq; Flower's bias-corrected rate
            v *= self.beta_2
            sq *= 1 - self.beta_2
            v += sq
            lr = (
                self.eta
                * np.sqrt(1 - np.power(self.beta_2, server_round + 1.0))
                / (1 - np.power(self.beta_1, server_round + 1.0))
            )  # a float64 scalar, as Flower's: the step is computed in float64
        denom = np.sqrt(v)
        denom += self.tau
        step = lr * m
        step /= denom
        if not every:
            m_all[idx], v_all[idx] = m, v
        return now + step

    def _fedavgm(self, key: str, now: np.ndarray, agg: np.ndarray, idx) -> np.ndarray:
        """FedAvgM's step (Flower's: no step at all with lr 1 and no momentum)."""
        if not (self.lr != 1.0 or self.momentum != 0.0):
            return agg
        pseudo = now - agg
        if self.momentum > 0.0:
            mv = self._moment(self.m, key, now)
            if len(idx) == self.k and self.started.all():  # the usual round: in place
                mv *= self.momentum
                mv += pseudo
                pseudo = mv
            else:  # a cluster's first step takes the pseudo-gradient itself (Flower's rule)
                fresh = ~self.started[idx]
                old = mv[idx]
                old = np.where(
                    fresh.reshape(-1, *([1] * (now.ndim - 1))),
                    pseudo,
                    self.momentum * old + pseudo,
                )
                mv[idx] = old
                pseudo = old
        return now - self.lr * pseudo

    def split(self, parent: int) -> int:
        """A new cluster, the copy of ``parent``: its moments, its saved model and whether it
        was stepped (CFL's split: both sides start from the parent's model, so both keep the
        parent's moments). Returns the new cluster's index (the last)."""
        for store in (self.m, self.v):
            for key, value in store.items():
                store[key] = np.concatenate([value, value[parent : parent + 1]])
        self.started = np.append(self.started, self.started[parent])
        cur = self.current[parent]
        self.current.append(None if cur is None else {k: np.array(v) for k, v in cur.items()})
        self.k += 1
        return self.k - 1

    # -- checkpoint ---------------------------------------------------------------------------
    def state(self) -> list[dict[str, Any]]:
        """Each cluster's attributes as Flower's object would hold them (:data:`OPTIMIZERS`):
        the same saved form as one Flower object per cluster, so older checkpoints load."""
        out = []
        keys = list(self.m)
        for c in range(self.k):
            cur = self.current[c]
            fields: dict[str, Any] = {}
            if self.name == "fedavgm":
                fields["current_arrays"] = None if cur is None else state_to_record(cur)
                fields["momentum_vector"] = (
                    [np.array(self.m[k][c]) for k in keys] if self.started[c] and keys else None
                )
            else:
                fields["current_arrays"] = None if cur is None else dict(cur)
                started = bool(self.started[c])
                fields["m_t"] = {k: np.array(self.m[k][c]) for k in keys} if started else {}
                fields["v_t"] = {k: np.array(self.v[k][c]) for k in self.v} if started else {}
            out.append(fields)
        return out

    def restore(self, saved: list[dict[str, Any]]) -> None:
        """Put each cluster's saved attributes back (the form :meth:`state` writes)."""
        if len(saved) != self.k:
            raise ValueError(
                f"the saved {self.name} state has {len(saved)} clusters, this run "
                f"{self.k}; resume from a <results>.resume.npz of the same num-components"
            )
        for c, fields in enumerate(saved):
            unknown = set(fields) - set(self.fields)
            if unknown:
                flower_class, _ = OPTIMIZERS[self.name]
                raise ValueError(
                    f"the saved {self.name} state has fields {sorted(unknown)}, which "
                    f"{flower_class.__name__} does not keep"
                )
            cur = fields.get("current_arrays")
            if cur is not None and not isinstance(cur, dict):
                cur = record_to_state(cur)
            self.current[c] = None if cur is None else dict(cur)
            if self.name == "fedavgm":
                mv = fields.get("momentum_vector")
                if mv is not None and cur is not None:
                    for key, value in zip(cur, mv, strict=True):
                        self._moment(self.m, key, np.asarray(value)[None])[c] = value
                    self.started[c] = True
                else:
                    self.started[c] = cur is not None
            else:
                m_t, v_t = fields.get("m_t") or {}, fields.get("v_t") or {}
                for key, value in m_t.items():
                    self._moment(self.m, key, np.asarray(value)[None])[c] = value
                for key, value in v_t.items():
                    self._moment(self.v, key, np.asarray(value)[None])[c] = value
                self.started[c] = bool(m_t)
