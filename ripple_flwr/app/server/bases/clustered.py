"""What the clustered baselines share (IFCA, FeSEM, CFL, FLUX, PACFL, FedGWC): K models,
hard assignments, records.

Each holds a list of cluster models and one cluster index per client. A
client is scored with its own cluster's model; a new client (zero-shot,
Table 2) is sent every cluster model and keeps the one with the lowest loss
on its own training split (:mod:`ripple_flwr.app.client.candidates`). The results file
records the final assignment and, when the federation's true mixtures are
known, its adjusted Rand index against each client's dominant class.

``cluster-optimizer`` (IFCA, FeSEM, PACFL, CFL: the methods whose spec declares it) steps
each cluster model with Flower's server optimiser instead of setting it to its members' mean:
that mean is ``theta_c + u_c``, and :class:`~.cluster_optimizer.ClusterOptimizer` moves
``theta_c`` as one Flower object per cluster would on the pseudo-gradient ``u_c``.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from flwr.app import ArrayRecord

from ripple_flwr.aggregation.clustering import State, cluster_means, float_keys
from ripple_flwr.aggregation.robust import unsafe_step
from ripple_flwr.app.protocol.records import states_to_records
from ripple_flwr.app.server.bases.cluster_optimizer import ClusterOptimizer
from ripple_flwr.app.server.replies.validation import Accepted
from ripple_flwr.app.server.resume.plain import field_values, set_fields
from ripple_flwr.app.server.roster.query import QueryResult
from ripple_flwr.methods.api import Export, Method, Onboarding
from ripple_flwr.methods.options import CLUSTER_OPTIMIZER
from ripple_flwr.runs.results import hard_ari
from ripple_flwr.settings import RunSettings

log = logging.getLogger("flwr.ripple")


class ClusterModels(Method):
    """Hard-assignment clustered FL: ``models`` (one per cluster) and ``assignment`` (per row).

    Subclasses set the initial models and assignments, and implement
    :meth:`train_payloads` and :meth:`aggregate` (usually through
    :meth:`average_into_clusters`).
    """

    state_fields = ("models", "assignment", "events", "latest", "has_latest", "cluster_steps")
    # Whether the method keeps one flattened vector per client (FeSEM: the client's last
    # model; CFL: its last update) in ``latest``; IFCA keeps none.
    keeps_latest: bool = False
    run: Any = None  # the engine, set when it takes the method

    def __init__(
        self,
        settings: RunSettings,
        models: list[State],
        truth: np.ndarray | None = None,
        min_models: int = 1,
    ) -> None:
        if len(models) < min_models:
            raise ValueError(
                f"{type(self).__name__} needs K >= {min_models} cluster models, got {len(models)}"
            )
        self.settings = settings
        self.models = list(models)
        self.keys = float_keys(models[0])  # what distances, means and updates are taken over
        self.assignment = np.zeros(0, dtype=np.int64)  # row -> cluster, set in setup()
        self.latest = np.zeros((0, 0), dtype=np.float32)  # (rows, P), see keeps_latest
        self.has_latest = np.zeros(0, dtype=bool)
        self.truth = None if truth is None else np.asarray(truth, dtype=np.float64)
        self.events: list[dict[str, Any]] = []  # splits (kept or refused), refused aggregates
        self._records: list[ArrayRecord] | None = None
        self._sent_from: dict[int, int] = {}  # row -> the cluster it was sent this round
        # cluster-optimizer (none: the members' mean as is). Built at the first step, when the
        # cluster models exist (PACFL sets K in setup); CFL's splits grow it (split_cluster).
        self.optimizer_name: str = CLUSTER_OPTIMIZER.of(settings)
        self.optimizer: ClusterOptimizer | None = None

    # -- who belongs where -------------------------------------------------------------------
    def initial_assignment(self, n: int) -> np.ndarray:
        """Clusters of ``n`` clients before they have trained (cluster 0 by default)."""
        return np.zeros(n, dtype=np.int64)

    def vector_size(self) -> int:
        """Width of each client's ``latest`` vector (the float weights; FeSEM: one layer's)."""
        return sum(int(np.asarray(self.models[0][k]).size) for k in self.keys)

    def setup(self, clients: QueryResult) -> None:
        self.assignment = self.initial_assignment(len(clients))
        p = self.vector_size() if self.keeps_latest else 0
        self.latest = np.zeros((len(clients), p), dtype=np.float32)
        self.has_latest = np.zeros(len(clients), dtype=bool)

    def add_clients(self, joined: QueryResult, server_round: int) -> None:
        """Late joiners (already in the roster) start in their initial cluster."""
        self.assignment = np.concatenate([self.assignment, self.initial_assignment(len(joined))])
        pad = np.zeros((len(joined), self.latest.shape[1]), dtype=np.float32)
        self.latest = np.concatenate([self.latest, pad])
        self.has_latest = np.concatenate([self.has_latest, np.zeros(len(joined), dtype=bool)])

    def remember(self, rows: list[int], vectors: np.ndarray) -> None:
        """Keep ``vectors[i]`` as row ``rows[i]``'s latest vector."""
        self.latest[rows] = vectors
        self.has_latest[rows] = True

    def current_assignment(self) -> np.ndarray:
        """Every client's cluster now (FeSEM recomputes it from the clients' models)."""
        return self.assignment

    # -- models ------------------------------------------------------------------------------
    @property
    def num_models(self) -> int:
        return len(self.models)

    def model_records(self) -> list[ArrayRecord]:
        """The cluster models as ArrayRecords, built once until a model changes."""
        if self._records is None or len(self._records) != len(self.models):
            self._records = states_to_records(self.models)
        return self._records

    def set_models(self, models: list[State]) -> None:
        self.models = list(models)
        self._records = None

    def split_cluster(self, parent: int) -> int:
        """A new cluster model, a copy of ``parent``'s (CFL's split); with a
        ``cluster-optimizer`` the new cluster keeps the parent's moments, as its model
        is the parent's. Returns its index."""
        self.set_models([*self.models, self.models[parent]])
        if self.optimizer is not None:
            self.optimizer.split(parent)
        return self.num_models - 1

    # -- cluster-optimizer -------------------------------------------------------------------
    def cluster_optimizer(self) -> ClusterOptimizer | None:
        """``cluster-optimizer``'s optimiser over the K cluster models (``None``: none)."""
        if self.optimizer_name == "none":
            return None
        if self.optimizer is None:
            self.optimizer = ClusterOptimizer(self.optimizer_name, self.num_models, self.settings)
        if self.optimizer.k != self.num_models:
            raise RuntimeError(
                f"{type(self).__name__} holds {self.num_models} cluster models, its "
                f"cluster-optimizer {self.optimizer.k}: a method that adds clusters must "
                "call split_cluster"
            )
        return self.optimizer

    def stepped(
        self, server_round: int, means: list[State], labels: list[int], weights: list[float]
    ) -> list[State]:
        """The cluster models after ``cluster-optimizer``'s step towards ``means`` (the
        members' means: theta_c + u_c), each cluster weighted by its members' total weight
        (a cluster without any is not stepped)."""
        opt = self.cluster_optimizer()
        if opt is None:
            return means
        mass = np.bincount(
            np.asarray(labels, dtype=np.int64),
            np.asarray(weights, dtype=np.float64),
            minlength=self.num_models,
        )
        stacked = self.saved_models()
        target = {k: np.stack([np.asarray(m[k]) for m in means]) for k in stacked}
        out = opt.step(server_round, stacked, target, mass)
        return [{k: out[k][c] for k in out} for c in range(self.num_models)]

    @property
    def cluster_steps(self) -> dict[str, Any]:
        """The saved state of ``cluster-optimizer``: its name and each cluster's Flower
        attributes (none before its first step)."""
        clusters = [] if self.optimizer is None else self.optimizer.state()
        return {"name": self.optimizer_name, "clusters": clusters}

    @cluster_steps.setter
    def cluster_steps(self, saved: dict[str, Any]) -> None:
        name = saved.get("name", "none")
        if name != self.optimizer_name:
            raise ValueError(
                f"the saved run stepped its clusters with cluster-optimizer = {name}, this run "
                f"with {self.optimizer_name}; resume with the saved run's setting"
            )
        clusters = saved.get("clusters") or []
        self.optimizer = None
        if clusters:
            self.optimizer = ClusterOptimizer(name, len(clusters), self.settings)
            self.optimizer.restore(clusters)

    def average_into_clusters(
        self,
        server_round: int,
        accepted: list[Accepted],
        labels: list[int],
        uniform: bool = False,
    ) -> list[int]:
        """Each cluster model becomes the example-weighted mean of its members' returned models.

        ``uniform``: every member counts once, whatever its example count. With a
        ``cluster-optimizer``, each cluster with members is instead stepped from its model
        towards that mean by Flower's optimiser (:meth:`stepped`).

        A cluster whose new model would be non-finite or grow more than 10x
        in norm keeps its model (and the refusal is logged and recorded).
        Returns the clusters that changed.
        """
        weights = [1 if uniform else a.num_examples for a in accepted]
        new, changed = cluster_means(self.models, [a.state for a in accepted], labels, weights)
        # A members' mean that is unsafe is refused before any optimiser sees it: that
        # cluster is not stepped and its moments stay as they were (else a refused update
        # would still move it through them in the rounds after).
        refused = {c: self._refuse(server_round, c, new[c]) for c in changed}
        refused = {c: why for c, why in refused.items() if why is not None}
        for c in refused:
            new[c] = self.models[c]
        weights = [0 if lab in refused else w for lab, w in zip(labels, weights, strict=True)]
        new = self.stepped(server_round, new, labels, weights)
        kept = []
        stepped = self.optimizer_name != "none"
        for c in changed:
            if c in refused:
                continue
            if stepped and self._refuse(server_round, c, new[c]) is not None:
                new[c] = self.models[c]  # the optimiser's own step (its moments moved)
            else:
                kept.append(c)
        self.set_models(new)
        return kept

    def _refuse(self, server_round: int, c: int, candidate: State) -> str | None:
        """Why cluster ``c`` may not become ``candidate`` (logged and recorded), or None."""
        reason = unsafe_step(self.models[c], candidate)
        if reason is not None:
            log.error("round %d: refused cluster %d's update (%s)", server_round, c, reason)
            self.events.append({"round": server_round, "refused": c, "reason": reason})
        return reason

    def state(self) -> dict[str, Any]:
        """The saved fields (ClusterModels', then the method's own), by name."""
        return field_values(self)

    def restore(self, fields: dict[str, Any]) -> None:
        """Put back checked fields (each of its kind), then check what ties them together."""
        set_fields(self, fields)
        self.assignment = np.asarray(self.assignment, dtype=np.int64)
        self._records = None
        rows, k = len(self.assignment), len(self.models)
        if k < 1 or (rows and not 0 <= self.assignment.min() <= self.assignment.max() < k):
            raise ValueError(
                f"the saved assignment names clusters outside the {k} saved models; resume "
                "from a <results>.resume.npz this method wrote, or start the run again"
            )
        if self.optimizer is not None and self.optimizer.k != k:
            raise ValueError(
                f"the saved {self.optimizer.name} state has {self.optimizer.k} clusters, the "
                f"saved models {k}; resume from a <results>.resume.npz this method wrote, or "
                "start the run again"
            )
        if len(self.latest) != rows or len(self.has_latest) != rows:
            raise ValueError(
                f"the saved latest vectors ({len(self.latest)}, {len(self.has_latest)}) do not "
                f"match the {rows} assigned clients; resume from a <results>.resume.npz this "
                "method wrote, or start the run again"
            )

    def train_payloads(self, rows: np.ndarray, arrays: ArrayRecord) -> list:
        """Each sampled client trains its own cluster's model."""
        records = self.model_records()
        self._sent_from = {int(r): int(self.assignment[r]) for r in rows}
        return [records[self._sent_from[int(r)]] for r in rows]

    # -- evaluation and onboarding -----------------------------------------------------------
    def eval_payloads(self, arrays: ArrayRecord, rows: np.ndarray) -> list[ArrayRecord]:
        """Each client's own cluster model."""
        records, assignment = self.model_records(), self.current_assignment()
        return [records[int(assignment[r])] for r in rows.tolist()]

    def onboard(self, new: QueryResult) -> Onboarding:
        """Every cluster model; the new client keeps the lowest loss on its training split."""
        records = self.model_records()
        payload = records[0] if len(records) == 1 else list(records)
        return Onboarding([payload] * len(new))

    def saved_models(self) -> dict[str, np.ndarray]:
        """The cluster models stacked on a leading axis."""
        return {k: np.stack([np.asarray(m[k]) for m in self.models]) for k in self.models[0]}

    def export(self) -> Export:
        """The cluster models (a new client outside the run is sent all of them)."""
        return Export(self.saved_models())

    def finish(self, arrays: ArrayRecord) -> ArrayRecord:
        """The run's result: the cluster models stacked on a leading axis, as one ArrayRecord."""
        return states_to_records([self.saved_models()])[0]

    # -- results -----------------------------------------------------------------------------
    def assignment_record(self) -> dict[str, Any]:
        """The final assignment by partition and its ARI against the dominant class."""
        labels = self.current_assignment()
        pids = np.asarray(self.run.clients.partition_ids, dtype=np.int64)
        rec: dict[str, Any] = {
            "labels": labels.tolist(),
            "partition_ids": pids.tolist(),
            "num_models": self.num_models,
            "sizes": np.bincount(labels, minlength=self.num_models).tolist(),
            "events": self.events,
        }
        if self.truth is not None and len(pids):
            rec["ari"], rec["ari_clients"] = hard_ari(self.truth[pids], labels)
            rec["ari_all"], _ = hard_ari(self.truth[pids], labels, hard=0.0)
        return rec

    def run_record(self, rec: dict[str, Any]) -> dict[str, Any]:
        rec = {**rec, "assignment": self.assignment_record()}
        if self.optimizer is not None:
            rec["cluster_optimizer"] = self.optimizer.record()
        elif self.optimizer_name != "none":  # set, but no round stepped a cluster yet
            rec["cluster_optimizer"] = {"name": self.optimizer_name, "server_seconds": 0.0}
        return rec
