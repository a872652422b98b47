"""Ripple: K cluster models, one-shot routing, posterior mixing and w-weighted updates.

Implementation of "Ripple in Still Water: Zero-Shot Clustering in Federated
Learning with Wavelet Scattering Transform" (spec sections 1, 4 and 5).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from flwr.app import ArrayRecord

from ripple_flwr.aggregation.concepts import combine
from ripple_flwr.aggregation.hdb import HDBResult, collapse_weights, refine_hdb
from ripple_flwr.aggregation.mixing import (
    apply_stacked_deltas,
    mix_stacked,
    stratified_sample,
    unstack,
)
from ripple_flwr.aggregation.robust import unsafe_stacked_steps
from ripple_flwr.app.protocol.records import states_to_records
from ripple_flwr.app.server.bases.cluster_optimizer import ClusterOptimizer
from ripple_flwr.app.server.replies.validation import Accepted
from ripple_flwr.app.server.resume.plain import field_values, set_fields
from ripple_flwr.app.server.roster.query import QueryResult
from ripple_flwr.methods.api import Export, Method, Onboarding
from ripple_flwr.methods.options import CLUSTER_OPTIMIZER
from ripple_flwr.methods.ripple.concepts import ConceptStep
from ripple_flwr.methods.ripple.spec import CLASS_CONDITIONAL, RIPPLE_STRAT_ORDER
from ripple_flwr.methods.spec import MethodInputs, MethodSpec
from ripple_flwr.router.routers import Router
from ripple_flwr.runs.results import hard_ari, routing_metrics
from ripple_flwr.settings import RunSettings
from ripple_flwr.wst.threads import worker_threads

log = logging.getLogger("flwr.ripple")


def _joined(router: str | None, concept: str | None) -> str | None:
    """One client's fallback reasons: the router's, the concept step's, both, or none."""
    if concept is None:
        return router
    concept = f"{concept}; concept weights 1/G"
    return concept + ", label-free routing kept" if router is None else f"{router}; {concept}"


def stack_models(state: dict[str, np.ndarray], k: int) -> dict[str, np.ndarray]:
    """K identical copies of one model state, stacked on a leading cluster axis."""
    return {key: np.repeat(np.asarray(v)[None], k, axis=0) for key, v in state.items()}


class RippleMethod(Method):
    """Ripple-Strat / Ripple-Unif / Ripple-HDB over the cluster models (and the oracle reference).

    Client k receives ``theta_k = sum_c w_kc theta_c`` and returns its full
    trained weights; the server forms ``delta_k = returned - theta_k`` and moves
    each cluster by eq. 9, so per-round traffic equals FedAvg's. With
    ``refine = "hdb"`` the K components are first grouped into K_hat
    meta-clusters by HDBSCAN over the clients' w (eq. 10-11), and K_hat cluster
    models are trained on the collapsed weights; late joiners and new clients
    are collapsed with the same component map.

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
    image_shape, num_classes : optional
        The run's images and classes: the layout of the class-conditional summary
        (``class-conditional = true``; :class:`~ripple_flwr.methods.ripple.concepts.ConceptStep`).
        The clusters are then the (concept, component) pairs, ``G x K`` of them, and a
        client's w their product.
    true_concepts : ndarray (num_partitions, G*), optional
        The clients' true concept mixtures, for the concept step's ARI only.
    """

    state_fields = (
        "stacked",
        "weights",
        "raw_weights",
        "component_map",
        "routing",
        "out_of_domain",
        "cluster_steps",
        "concept_state",
        "concept_weights",
    )
    run: Any = None  # the engine, set when it takes the method

    def __init__(
        self,
        settings: RunSettings,
        initial_state: dict[str, np.ndarray],
        *,
        router: Router | None = None,
        truth: np.ndarray | None = None,
        weights: np.ndarray | None = None,
        eps: float = 1e-8,
        image_shape: tuple[int, int, int] | None = None,
        num_classes: int | None = None,
        true_concepts: np.ndarray | None = None,
    ) -> None:
        if router is None and weights is None:
            raise ValueError("RippleMethod needs a router or fixed weights (the oracle)")
        routed = router is not None and weights is None  # the oracle's clients send nothing
        self.settings = settings
        # What each client sends in the one-shot query round (the engine's roster asks it).
        self.query_summary = (
            router.needs if routed else "none",
            router.input_dim if routed else None,
        )
        self.concept: ConceptStep | None = None
        if routed and CLASS_CONDITIONAL.of(settings):
            if image_shape is None or num_classes is None or router.input_dim is None:
                raise ValueError("class-conditional Ripple needs the run's images and classes")
            self.concept = ConceptStep(settings, router.input_dim, image_shape, num_classes)
            # Its own summary (client.py: summary): the label-free one, then the label block.
            self.query_summary = ("method", self.concept.summary_dim)
        self.true_concepts = None if true_concepts is None else np.asarray(true_concepts, float)
        self.concept_weights: np.ndarray | None = None  # (rows, G) of the training clients
        self.new_concept_weights: np.ndarray | None = None
        self.last_concept_weights: np.ndarray | None = None  # of the last clients routed
        self.router = router
        self.fixed_weights = None if weights is None else np.asarray(weights, dtype=np.float64)
        self.truth = None if truth is None else np.asarray(truth, dtype=np.float64)
        self.eps = eps
        self.initial_state = initial_state
        self.stacked = stack_models(initial_state, self.k)
        self.raw_weights: np.ndarray | None = None  # (rows, K): the router's w, rows = clients
        self.weights: np.ndarray | None = None  # (rows, models): what mixing and eq. 9 use
        self.component_map: np.ndarray | None = None  # (K,) component -> model (Ripple-HDB)
        self.hdb: HDBResult | None = None
        self.new_weights: np.ndarray | None = None  # (new clients, K), after zero-shot onboarding
        self.routing: dict[str, Any] = {}
        self.out_of_domain: list[dict[str, Any]] = []  # clients routed 1/K, and why
        # cluster-optimizer: Flower's server optimiser per cluster model (None: eq. 9 as is).
        self.optimizer: ClusterOptimizer | None = None

    # -- one-shot assignment ------------------------------------------------------------------
    @property
    def k(self) -> int:
        """Components routed over: the router's K, or G x K (concept, component) pairs."""
        g = 1 if self.concept is None else self.concept.num_concepts
        return g * self.settings.embedding.num_components

    @property
    def num_models(self) -> int:
        """Cluster models trained: K, or K_hat under Ripple-HDB."""
        return int(next(iter(self.stacked.values())).shape[0])

    def route(self, clients: QueryResult) -> np.ndarray:
        """w (rows, K) of these clients: one batched router pass, or pi* for the oracle."""
        pids = np.asarray(clients.partition_ids, dtype=np.int64)
        if self.fixed_weights is not None:
            w = self.fixed_weights[pids]
        elif len(pids):
            w = self._route_and_flag(clients)
        else:
            w = np.zeros((0, self.k))
        if w.shape != (len(pids), self.k):
            raise ValueError(
                f"router returned weights of shape {w.shape}, expected ({len(pids)}, {self.k})"
            )
        return w

    def _route_and_flag(self, clients: QueryResult) -> np.ndarray:
        """The router's w (times the concept weights, class-conditional); the clients whose
        summary it would not read are logged and recorded."""
        features = clients.features
        if self.concept is not None:
            features, blocks = self.concept.split(features)
        both = getattr(self.router, "route_with_reasons", None)
        if both is None:  # a router without a domain check reads every summary
            w = self.router.route(features)
            reasons: list[str | None] = [None] * len(w)
        else:
            w, reasons = both(features)  # one domain check, not a second pass
        w = np.asarray(w, dtype=np.float64)
        if self.concept is not None:
            cw, why = self.concept.weights(blocks, clients.num_examples)
            self.last_concept_weights = cw
            w = combine(cw, w)
            reasons = [_joined(r, y) for r, y in zip(reasons, why, strict=True)]
        for pid, reason in zip(clients.partition_ids, reasons, strict=True):
            if reason is not None:
                log.warning("partition %d: %s", pid, reason)
                self.out_of_domain.append({"partition": int(pid), "reason": reason})
        return w

    def label_free(self, w: np.ndarray) -> np.ndarray:
        """The router's components' share of (rows, G x K) weights: summed over concepts."""
        g = 1 if self.concept is None else self.concept.num_concepts
        return np.asarray(w).reshape(len(w), g, -1).sum(axis=1)

    @property
    def concept_state(self) -> dict[str, Any]:
        """What the concept step learnt (``{}`` without ``class-conditional``)."""
        return {} if self.concept is None else self.concept.state()

    @concept_state.setter
    def concept_state(self, saved: dict[str, Any]) -> None:
        if self.concept is None and saved:
            raise ValueError(
                "the saved run is class-conditional, this run is not; resume with the saved "
                "run's class-conditional setting"
            )
        if self.concept is not None:
            self.concept.restore(saved or {})

    def model_weights(self, w: np.ndarray) -> np.ndarray:
        """Weights over the trained models: w itself, or collapsed by the HDB map."""
        if self.component_map is None:
            return w
        return collapse_weights(w, self.component_map, self.num_models)

    def setup(self, clients: QueryResult) -> None:
        """Every w_k in one batched forward pass; under HDB, the meta-clusters from them.

        Class-conditional: first the concepts from the training clients' blocks, then the
        G x K cluster models."""
        if self.concept is not None and self.fixed_weights is None and len(clients):
            self.concept.fit(self.concept.split(clients.features)[1], clients.num_examples)
            self.stacked = stack_models(self.initial_state, self.k)
        w = self.route(clients)
        pids = np.asarray(clients.partition_ids, dtype=np.int64)
        self.raw_weights = w
        if self.concept is not None and len(pids):
            self.concept_weights = self.last_concept_weights
            if self.true_concepts is not None:
                ari, n = hard_ari(self.true_concepts[pids], self.concept_weights.argmax(axis=1))
                self.concept.record["ari"], self.concept.record["ari_clients"] = ari, n
                log.info("class-conditional: concept ARI %s over %d hard clients", ari, n)
        if self.truth is not None:
            self.routing = routing_metrics(self.label_free(w), self.truth[pids])
            log.info(
                "routing: mean L1 to pi* %.4f, ARI %s over %d hard clients",
                self.routing["l1"],
                self.routing["ari"],
                self.routing["ari_clients"],
            )
        if self.settings.embedding.refine == "hdb":
            self.refine(w, pids)
        self.weights = self.model_weights(w)
        mass = self.weights.sum(axis=0)
        log.info("cluster mass: %s", np.array2string(mass, precision=2))
        self.optimizer = self.make_optimizer()

    def make_optimizer(self) -> ClusterOptimizer | None:
        """``cluster-optimizer``'s Flower optimisers, one per trained cluster model."""
        name = CLUSTER_OPTIMIZER.of(self.settings)
        return None if name == "none" else ClusterOptimizer(name, self.num_models, self.settings)

    @property
    def cluster_steps(self) -> list[dict[str, Any]]:
        """The saved state of ``cluster-optimizer`` (each cluster's Flower attributes)."""
        return [] if self.optimizer is None else self.optimizer.state()

    @cluster_steps.setter
    def cluster_steps(self, saved: list[dict[str, Any]]) -> None:
        if self.optimizer is None and saved:
            raise ValueError(
                "the saved run stepped its clusters with a cluster-optimizer, this run does "
                "not (cluster-optimizer = none); resume with the saved run's setting"
            )
        if self.optimizer is not None:
            self.optimizer.restore(saved)

    def refine(self, w: np.ndarray, pids: np.ndarray) -> None:
        """Ripple-HDB: HDBSCAN over sqrt-JS distances of w; K_hat models from the map."""
        res = refine_hdb(w, min_cluster_size=self.settings.embedding.min_cluster_size)
        self.hdb = res
        for event in res.events:
            log.warning("Ripple-HDB: %s", event)
        if res.fell_back:
            log.warning("Ripple-HDB found no cluster: training all K=%d cluster models", self.k)
        else:
            self.component_map = res.component_map
            self.stacked = stack_models(self.initial_state, res.num_meta)
        log.info(
            "Ripple-HDB: K_hat=%d meta-clusters from K=%d components, map %s",
            self.num_models,
            self.k,
            res.component_map.tolist(),
        )
        if self.truth is not None:
            ari, _ = hard_ari(self.truth[pids], res.labels)
            if ari is not None:
                self.routing["hdb_ari"] = ari

    def add_clients(self, joined: QueryResult, server_round: int) -> None:
        """Late joiners: routed (and collapsed) like everyone, in one batched pass."""
        w = self.route(joined)
        self.raw_weights = np.concatenate([self.raw_weights, w])
        self.weights = np.concatenate([self.weights, self.model_weights(w)])

    def state(self) -> dict[str, Any]:
        return field_values(self)

    def restore(self, fields: dict[str, Any]) -> None:
        set_fields(self, fields)

    def _mixed_for(self, new: QueryResult) -> list[ArrayRecord]:
        """theta_new = sum_c w_new,c theta_c from one batched router pass (phase 4)."""
        w = self.route(new)
        states = unstack(mix_stacked(self.model_weights(w), self.stacked))
        self.new_weights = w
        if self.concept is not None:
            self.new_concept_weights = self.last_concept_weights
        return states_to_records(states)

    def onboard(self, new: QueryResult) -> Onboarding:
        """The new clients' mixed models, and those the router gave w = 1/K."""
        seen = len(self.out_of_domain)
        payloads = self._mixed_for(new)
        ids = {int(p) for p in new.partition_ids}
        flagged = [
            {"partition": int(f["partition"]), "reason": str(f["reason"])}
            for f in self.out_of_domain[seen:]
            if int(f["partition"]) in ids
        ]
        return Onboarding(payloads, flagged)

    def export(self) -> Export:
        """The cluster models and the map from router components to them."""
        concepts = None
        if self.concept is not None and self.concept.concepts is not None:
            t = self.concept.concepts.templates
            concepts = {
                "counts": t.counts,
                "variances": t.variances,
                "means": t.means,
                "noise": t.noise,
                "min_label_count": np.array(self.concept.min_count),
            }
        return Export(self.saved_models(), component_map=self.component_map, concepts=concepts)

    def reference_models(self) -> list[ArrayRecord]:
        """Each cluster model on its own (the best-by-loss reference)."""
        return states_to_records(unstack(self.stacked))

    def sample_rows(self, server_round: int) -> np.ndarray | None:
        """Stratified: every cluster with mass gets a representative; else ``None`` (uniform)."""
        if self.settings.training.sampling != "stratified":
            return None
        active = self.run.active_rows()
        if not len(active):
            return active
        sample = stratified_sample(
            self.weights[active],
            self.run.round_size(len(active)),
            self.run.rng,
            server_round=server_round,
            order=RIPPLE_STRAT_ORDER.of(self.settings),
        )
        return active[sample]

    # -- rounds -------------------------------------------------------------------------------
    def train_payloads(self, rows: np.ndarray, arrays: ArrayRecord) -> list[ArrayRecord]:
        """theta_k = sum_c w_kc theta_c for the sampled clients, one matrix product per tensor.

        The products are (B, K) x (K, P): memory-bound, and slower on two
        contended BLAS threads than on one; fixed blocks of columns on the
        cores' threads, each with one BLAS thread, are faster on a quiet
        machine and no slower on a loaded one (``benchmarks/federation.py``).
        The clients do not train while the server mixes, so the cores are free.
        """
        with worker_threads() as workers:
            self._sent = mix_stacked(self.weights[rows], self.stacked, workers=workers)
        self._sent_pos = {int(r): i for i, r in enumerate(rows)}
        return states_to_records(unstack(self._sent))

    def sent_state(self, row: int) -> dict[str, np.ndarray] | None:
        """Views of the model mixed for ``row`` this round (no decode of its record)."""
        pos = self._sent_pos.get(int(row))
        return None if pos is None else {k: v[pos, ...] for k, v in self._sent.items()}

    def aggregate(self, server_round: int, accepted: list[Accepted]) -> ArrayRecord | None:
        """Eq. 9 with delta_k = (returned weights - the theta_k the server sent)."""
        if not accepted:
            return None
        pos = [self._sent_pos[a.row] for a in accepted]
        # Replies were validated (keys, shapes, finiteness) by validate_train_reply:
        # stack them once per tensor and subtract what was sent, no per-client copies.
        # Subtract in place; rows sent and rows back in the same order need no gather.
        in_order = pos == list(range(len(self._sent_pos)))
        deltas = {}
        for k, sent in self._sent.items():
            if np.issubdtype(sent.dtype, np.inexact):
                d = np.stack([a.state[k] for a in accepted])
                deltas[k] = np.subtract(d, sent if in_order else sent[pos], out=d)
        wrows = self.weights[[a.row for a in accepted]]
        # With a cluster optimiser eq. 9 gives theta_c + u_c (eta_s = 1), and Flower's class
        # takes the step from there; without one, eq. 9 is the step.
        lr = 1.0 if self.optimizer is not None else self.settings.training.server_lr
        with worker_threads() as workers:
            updated = apply_stacked_deltas(self.stacked, deltas, wrows, lr, self.eps, workers)
        # Eq. 9's result is checked before any optimiser sees it: a refused round moves no
        # cluster, and the optimiser's moments stay as they were.
        if self._refused(server_round, updated):
            return None
        if self.optimizer is not None:
            updated = self.optimizer.step(server_round, self.stacked, updated, wrows.sum(axis=0))
            if self._refused(server_round, updated):
                return None
        self.stacked = updated
        return None  # the cluster models live in the method; see finish()

    def _refused(self, server_round: int, updated: dict[str, np.ndarray]) -> bool:
        """Whether a cluster model's step to ``updated`` is unsafe (logged): then every
        cluster model stays as it was this round."""
        for c, reason in enumerate(unsafe_stacked_steps(self.stacked, updated)):
            if reason is not None:
                log.error(
                    "round %d: refused the update of cluster model %d (%s); all cluster models "
                    "stay as they were",
                    server_round,
                    c,
                    reason,
                )
                return True
        return False

    def eval_payloads(self, arrays: ArrayRecord, rows: np.ndarray) -> list[ArrayRecord]:
        """The personalised models of the clients at ``rows`` only (an ``eval-fraction`` sample):
        mixing all of them first held 10,000 models at once (14 GB, benchmarks/scale.py)."""
        with worker_threads() as workers:
            mixed = mix_stacked(self.weights[rows], self.stacked, workers=workers)
        return states_to_records(unstack(mixed))

    def finish(self, arrays: ArrayRecord) -> ArrayRecord:
        """The run's result: the K cluster models, stacked on a leading axis, as one record."""
        return states_to_records([self.stacked])[0]

    def saved_models(self) -> dict[str, np.ndarray]:
        """The trained cluster models (K, or K_hat under Ripple-HDB), stacked."""
        return {k: np.asarray(v) for k, v in self.stacked.items()}

    def zero_shot_extras(self) -> dict[str, Any]:
        """The new clients' routing weights and their error against pi*."""
        if self.new_weights is None:
            return {}
        extras: dict[str, Any] = {"weights": self.new_weights}
        pids = np.asarray(self.run.new_clients.partition_ids, dtype=np.int64)
        if self.truth is not None:
            extras["routing"] = routing_metrics(self.label_free(self.new_weights), self.truth[pids])
        if self.new_concept_weights is not None:
            extras["concept_weights"] = self.new_concept_weights
            if self.true_concepts is not None:
                ari, n = hard_ari(self.true_concepts[pids], self.new_concept_weights.argmax(axis=1))
                extras["concept_ari"], extras["concept_ari_clients"] = ari, n
        return extras

    def run_record(self, rec: dict[str, Any]) -> dict[str, Any]:
        rec["routing"] = {
            **self.routing,
            "weights": self.raw_weights,
            "source": "oracle (pi*)" if self.fixed_weights is not None else self.router.name,
            "out_of_domain": self.out_of_domain,
        }
        if self.concept is not None:
            rec["class_conditional"] = {
                **self.concept.record,
                "concept_weights": self.concept_weights,
            }
        if self.optimizer is not None:
            rec["cluster_optimizer"] = self.optimizer.record()
        if self.hdb is not None:
            rec["hdb"] = {
                **self.hdb.to_dict(),
                "num_models": self.num_models,
                "model_weights": self.weights,
            }
        return rec


def build_ripple(inp: MethodInputs) -> RippleMethod:
    """Ripple as the registry builds it: routed by the run's router."""
    return RippleMethod(
        inp.settings,
        inp.initial_state,
        router=inp.router,
        truth=inp.true_mixtures,
        image_shape=inp.image_shape,
        num_classes=inp.num_classes,
        true_concepts=inp.true_concepts,
    )


def build_oracle(inp: MethodInputs) -> RippleMethod:
    """The oracle: Ripple with w = pi*, the true mixtures."""
    return RippleMethod(
        inp.settings, inp.initial_state, weights=inp.true_mixtures, truth=inp.true_mixtures
    )


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = RippleMethod


def build(spec: MethodSpec, inputs: MethodInputs) -> RippleMethod:
    """Ripple's strategy for ``spec`` (``ripple``: the router's w; ``oracle``: w = pi*)."""
    return build_oracle(inputs) if spec.name == "oracle" else build_ripple(inputs)
