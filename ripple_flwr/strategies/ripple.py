"""Ripple: K cluster models, one-shot routing, posterior mixing and w-weighted updates.

Implementation of "Ripple in Still Water: Zero-Shot Clustering in Federated
Learning with Wavelet Scattering Transform" (spec sections 1, 4 and 5).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from flwr.app import ArrayRecord
from flwr.serverapp.strategy import Strategy

from ripple_flwr.config import RunSettings
from ripple_flwr.mixing import (
    apply_stacked_deltas,
    mix_models,
    mix_stacked,
    stratified_sample,
    unstack,
)
from ripple_flwr.results import routing_metrics
from ripple_flwr.strategies.common import Accepted, FederationRun, QueryResult, states_to_records

log = logging.getLogger("flwr.ripple")


def stack_models(state: dict[str, np.ndarray], k: int) -> dict[str, np.ndarray]:
    """K identical copies of one model state, stacked on a leading cluster axis."""
    return {key: np.repeat(np.asarray(v)[None], k, axis=0) for key, v in state.items()}


class RippleStrategy(FederationRun, Strategy):
    """Ripple-Strat / Ripple-Unif over K cluster models (and the oracle-weights reference).

    Client k receives ``theta_k = sum_c w_kc theta_c`` and returns its full
    trained weights; the server forms ``delta_k = returned - theta_k`` and moves
    each cluster by eq. 9, so per-round traffic equals FedAvg's.

    Parameters
    ----------
    settings : RunSettings
        The run (sampling, clients per round, server lr, seeds, ...).
    initial_state : dict[str, ndarray]
        One model's state; the K cluster models start as copies of it.
    router : Router, optional
        Maps the clients' one-shot summaries ``(N, F)`` to weights ``(N, K)``
        in one batched call. Required unless ``weights`` is given.
    truth : ndarray (num_partitions, K), optional
        The federation's true mixtures pi*, for the routing error only.
    weights : ndarray (num_partitions, K), optional
        Fixed weights by partition id (the oracle: ``weights = pi*``); no
        summary is requested in the one-shot round then.
    eps : float (default 1e-8)
        Added to the denominator of eq. 9.
    """

    def __init__(
        self,
        settings: RunSettings,
        initial_state: dict[str, np.ndarray],
        *,
        router: Any = None,
        truth: np.ndarray | None = None,
        weights: np.ndarray | None = None,
        eps: float = 1e-8,
    ) -> None:
        if router is None and weights is None:
            raise ValueError("RippleStrategy needs a router or fixed weights (the oracle)")
        self._init_run(settings, initial_state)
        self.k = settings.num_components
        self.router = router
        self.fixed_weights = None if weights is None else np.asarray(weights, dtype=np.float64)
        self.truth = None if truth is None else np.asarray(truth, dtype=np.float64)
        self.eps = eps
        if router is not None and weights is None:
            self.summary_kind = router.needs
            self.summary_dim = router.input_dim
        self.stacked = stack_models(initial_state, self.k)
        self.weights: np.ndarray | None = None  # (rows, K), rows = usable clients
        self.routing: dict[str, Any] = {}

    # -- one-shot assignment ------------------------------------------------------------------
    def setup(self, clients: QueryResult) -> None:
        """Every w_k in one batched forward pass of the router (or pi* for the oracle)."""
        pids = np.asarray(clients.partition_ids, dtype=np.int64)
        if self.fixed_weights is not None:
            w = self.fixed_weights[pids]
        else:
            w = np.asarray(self.router.route(clients.features), dtype=np.float64)
        if w.shape != (len(pids), self.k):
            raise ValueError(
                f"router returned weights of shape {w.shape}, expected ({len(pids)}, {self.k})"
            )
        self.weights = w
        if self.truth is not None:
            self.routing = routing_metrics(w, self.truth[pids])
            log.info(
                "routing: mean L1 to pi* %.4f, ARI %s over %d hard clients",
                self.routing["l1"],
                self.routing["ari"],
                self.routing["ari_clients"],
            )
        mass = w.sum(axis=0)
        log.info("cluster mass: %s", np.array2string(mass, precision=2))

    def sample_rows(self, server_round: int) -> np.ndarray:
        """Stratified: every cluster with mass gets a representative; else uniform."""
        if self.settings.sampling == "stratified":
            return stratified_sample(self.weights, self.settings.clients_per_round, self.rng)
        return super().sample_rows(server_round)

    # -- rounds -------------------------------------------------------------------------------
    def train_payloads(self, rows: np.ndarray, arrays: ArrayRecord) -> list[ArrayRecord]:
        """theta_k = sum_c w_kc theta_c for the sampled clients, one matrix product per tensor."""
        self._sent = mix_stacked(self.weights[rows], self.stacked)
        self._sent_pos = {int(r): i for i, r in enumerate(rows)}
        return states_to_records(unstack(self._sent))

    def apply_updates(self, server_round: int, accepted: list[Accepted]) -> ArrayRecord | None:
        """Eq. 9 with delta_k = (returned weights - the theta_k the server sent)."""
        if not accepted:
            return None
        pos = [self._sent_pos[a.row] for a in accepted]
        # Replies were validated (keys, shapes, finiteness) by validate_train_reply:
        # stack them once per tensor and subtract what was sent, no per-client copies.
        deltas = {
            k: np.stack([a.state[k] for a in accepted]) - sent[pos]
            for k, sent in self._sent.items()
            if np.issubdtype(sent.dtype, np.inexact)
        }
        wrows = self.weights[[a.row for a in accepted]]
        self.stacked = apply_stacked_deltas(
            self.stacked, deltas, wrows, self.settings.server_lr, self.eps
        )
        return None  # the cluster models live in the strategy; see final_arrays()

    def eval_payloads(self, arrays: ArrayRecord) -> list[ArrayRecord]:
        """Every client's personalised model theta_k."""
        return states_to_records(mix_models(self.weights, self.stacked))

    def start(
        self,
        grid,
        initial_arrays,
        num_rounds=3,
        timeout=None,
        train_config=None,
        evaluate_config=None,
        evaluate_fn=None,
    ):
        result = super().start(
            grid, initial_arrays, num_rounds, timeout, train_config, evaluate_config, evaluate_fn
        )
        result.arrays = self.final_arrays()
        return result

    def final_arrays(self) -> ArrayRecord:
        """The K cluster models, stacked on a leading axis, as one ArrayRecord."""
        return states_to_records([self.stacked])[0]

    def run_record(self) -> dict[str, Any]:
        rec = super().run_record()
        rec["routing"] = {
            **self.routing,
            "weights": self.weights,
            "source": "oracle (pi*)" if self.fixed_weights is not None else self.router.name,
        }
        return rec
