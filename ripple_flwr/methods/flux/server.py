"""FLUX (Fenoglio et al., NeurIPS 2025): descriptor-driven clustering, then one model per cluster.

Following the official code (``dariofenoglio98/FLUX``, ``flux/server.py`` and
``flux/client.py``, on Flower 1.11's legacy strategies):

1. **FedAvg first.** One global model (example-weighted mean) until the
   federated accuracy stops rising: from round ``flux-start-round`` = 3 on, as
   soon as some increase between successive evaluations is below
   ``flux-accuracy-delta`` = 0.06, or at the latest after ``flux-latest-fraction``
   = 0.8 of the rounds (the official ``th_round`` rule).
2. **Descriptors, once.** At the start of the next round every training client
   is sent the global model and answers with its descriptor: moments of its
   training split's latent features under that model, marginal and per class
   (:mod:`ripple_flwr.aggregation.descriptors`). Never recomputed.
3. **Clustering.** Per-block min-max scaling, DBSCAN with the knee eps, noise
   points as their own clusters: no number of clusters is given.
4. **Per-cluster FedAvg.** Every cluster model starts as the global model; a
   client trains its cluster's model, and each cluster model becomes the
   example-weighted mean of its members' returned models.
5. **Unseen clients** (``new-clients``, and late joiners after the clustering)
   are sent the global model the descriptors were computed with, answer with
   the label-free part (marginal mean and deviation), and get the cluster
   whose centroid is nearest (Euclidean, over that part). No labels, no
   evaluation of models.

Differences from the official code, each for a reason (docs/baselines.md):
the descriptor round is its own message to every training client (the
official code rides it on a round in which all clients train; here a round
samples ``clients-per-round``); ``m`` (the PCA points' range) is 1.02 x the
median of the clients' largest activations in that round, not the max of the
previous evaluation's, so that no single client sets it; every statistic is
held to sqrt(d) x 4 x that median before scaling, so that one client cannot
stretch everyone's min-max range; a client without a usable descriptor
trains in the largest cluster.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
from flwr.serverapp import Grid

from ripple_flwr.aggregation.clustering import State
from ripple_flwr.aggregation.descriptors import (
    PROJECTION_POINTS,
    BlockScaler,
    Clustering,
    Layout,
    assemble,
    clip_statistics,
    cluster_descriptors,
    latent_scale,
    model_dims,
    nearest_centroid,
    projection,
)
from ripple_flwr.app.protocol.records import state_to_record
from ripple_flwr.app.server.bases.clustered import ClusterModels
from ripple_flwr.app.server.replies.fields import SIZE_CAP_FACTOR
from ripple_flwr.app.server.replies.validation import Accepted
from ripple_flwr.app.server.roster.query import QueryResult
from ripple_flwr.methods.api import Export, Onboarding
from ripple_flwr.methods.flux.descriptors import DescriptorRound, descriptor_round
from ripple_flwr.methods.flux.spec import (
    FLUX_ACCURACY_DELTA,
    FLUX_EPS_SCALING,
    FLUX_LATENT_DIM,
    FLUX_LATEST_FRACTION,
    FLUX_START_ROUND,
)
from ripple_flwr.methods.spec import MethodInputs, MethodSpec
from ripple_flwr.settings import ConfigError, RunSettings

log = logging.getLogger("flwr.ripple")


class FLUXMethod(ClusterModels):
    """FLUX over the app's clients.

    Parameters
    ----------
    settings : RunSettings
        Its options ``flux-start-round``, ``flux-accuracy-delta``,
        ``flux-latest-fraction``, ``flux-eps-scaling``, ``flux-latent-dim``.
    initial_state : the one initial model.
    truth : the true mixtures pi* by partition id, for the ARI of the clusters.
    """

    state_fields = (
        "accuracy_trend",
        "clustered_at",
        "descriptor_model",
        "centroids",
        "scale_low",
        "scale_high",
        "offset",
        "stat_bound",
        "descriptor_log",
    )

    def __init__(
        self, settings: RunSettings, initial_state: State, truth: np.ndarray | None = None
    ) -> None:
        super().__init__(settings, [initial_state], truth)
        self.latent_dim, num_classes = model_dims(initial_state)
        k = FLUX_LATENT_DIM.of(settings) or num_classes
        if k > min(self.latent_dim, PROJECTION_POINTS):
            raise ConfigError(
                f"flux-latent-dim={k} is more than the model's {self.latent_dim} latent features "
                f"or the projection's {PROJECTION_POINTS} points allow; lower it (0: the number "
                "of classes)"
            )
        self.layout = Layout(k, num_classes, labelled=True)
        self.label_free = Layout(k, num_classes, labelled=False)
        self.accuracy_trend: list[float] = []  # weighted accuracy of each evaluation
        self.clustered_at = 0  # the round whose start clustered the clients (0: not yet)
        self.descriptor_model: State = dict(initial_state)  # the model descriptors are under
        self.centroids = np.zeros((0, self.layout.descriptor_size))
        self.scale_low = np.zeros(0)
        self.scale_high = np.zeros(0)
        self.offset = np.zeros(k)  # m mu V^T, subtracted from the sent means
        self.stat_bound = 0.0  # every statistic is held to [-bound, bound]
        self.descriptor_log: list[dict[str, Any]] = []  # every descriptor round, for the record
        self.new_record: dict[str, Any] = {}
        self._pending = [0, 0]  # descriptor bytes (down, up) to add to this round's record

    # -- when to cluster ----------------------------------------------------------------------
    def should_cluster(self, server_round: int) -> bool:
        """The official rule, read at the start of ``server_round`` about the rounds before it."""
        done = server_round - 1
        if self.clustered_at or done < FLUX_START_ROUND.of(self.settings):
            return False
        rises = np.diff(np.asarray(self.accuracy_trend, dtype=np.float64))
        late = done >= FLUX_LATEST_FRACTION.of(self.settings) * self.run.num_rounds
        return bool((rises < FLUX_ACCURACY_DELTA.of(self.settings)).any()) or late

    def scored(self, server_round: int, per_client: list) -> None:
        """Each evaluation's example-weighted accuracy joins the trend the rule reads."""
        n = sum(c.num_examples for c in per_client)
        if n:
            self.accuracy_trend.append(sum(c.accuracy * c.num_examples for c in per_client) / n)

    def add_clients(self, joined: QueryResult, server_round: int) -> None:
        """Late joiners after the clustering get their cluster from their label-free descriptor."""
        super().add_clients(joined, server_round)
        after = len(self.run.clients)
        if self.clustered_at and len(joined):
            rows = list(range(after - len(joined), after))
            nodes = [self.run.clients.node_ids[r] for r in rows]
            labels, rec = self.assign_unseen(self.run.grid, nodes, "late joiners", server_round)
            self.assignment[rows] = labels
            self._pending[0] += rec["bytes_down"]
            self._pending[1] += rec["bytes_up"]

    def round_opened(self, server_round: int, grid: Grid) -> None:
        """Cluster when the rule says so; the round's record also counts the descriptor
        messages sent since the last one (late joiners' and the clustering's)."""
        if self.should_cluster(server_round):
            self.cluster_clients(grid, server_round)
        self.run.add_bytes(*self._pending)
        self._pending = [0, 0]

    def aggregate(self, server_round: int, accepted: list[Accepted]) -> None:
        """Each cluster model: the example-weighted mean of its members' returned models."""
        self.average_into_clusters(
            server_round, accepted, [self._sent_from[a.row] for a in accepted]
        )

    # -- descriptors and clusters -------------------------------------------------------------
    def _descriptors(
        self, rnd: DescriptorRound, layout: Layout
    ) -> tuple[list[int], np.ndarray, list[int]]:
        """(positions answered, their unscaled descriptors, positions held to the bound)."""
        got = sorted(rnd.stats)
        stats = np.stack([rnd.stats[i] for i in got])
        stats, held = clip_statistics(stats, layout, self.stat_bound)
        raw = np.stack([assemble(v, layout, self.offset) for v in stats])
        return got, raw, [got[i] for i in np.flatnonzero(held)]

    def cluster_clients(self, grid: Grid, server_round: int) -> None:
        """The descriptor round over every training client, then DBSCAN; K_hat models from it."""
        s, layout = self.settings, self.layout
        global_model = self.models[0]
        nodes = list(self.run.clients.node_ids)
        rnd = descriptor_round(
            grid,
            nodes,
            state_to_record(global_model),
            layout,
            self.latent_dim,
            s.robustness.round_timeout,
        )
        self._pending[0] += rnd.bytes_down
        self._pending[1] += rnd.bytes_up
        rec: dict[str, Any] = {"round": server_round, "who": "training clients", **rnd.record()}
        self.clustered_at = server_round
        self.descriptor_model = dict(global_model)
        if not rnd.stats:
            log.warning("FLUX: no usable descriptor; training stays on one model")
            self.descriptor_log.append(rec)
            return
        m, got, held, found = self._fit_clusters(rnd, layout, len(nodes))
        self.set_models([global_model] * len(found.centroids))
        labels = self.assignment
        rec.update(
            {
                "latent_max": m,
                "held_to_bound": [self.run.clients.partition_ids[i] for i in held],
                "eps": found.eps,
                "knee": found.knee,
                "clusters": len(found.centroids),
                "dbscan_clusters": found.dbscan_clusters,
                "outliers": found.outliers,
                "sizes": np.bincount(labels, minlength=self.num_models).tolist(),
            }
        )
        self.descriptor_log.append(rec)
        log.info(
            "round %d: FLUX clustered %d descriptors into %d clusters (eps %.4g, %d outliers "
            "as their own clusters), sizes %s; %.2f MB down, %.3f MB up",
            server_round,
            len(got),
            self.num_models,
            found.eps,
            found.outliers,
            rec["sizes"],
            rnd.bytes_down / 2**20,
            rnd.bytes_up / 2**20,
        )

    def _fit_clusters(
        self, rnd: DescriptorRound, layout: Layout, num_nodes: int
    ) -> tuple[float, list[int], list[int], Clustering]:
        """The latent scale, bound and scaler from the round's statistics, then DBSCAN.

        Sets the offset, the statistics' bound, the scaler, the centroids and the
        assignment (a client without a usable descriptor joins the largest cluster).
        Returns the latent scale, the rows that sent descriptors, those held to the
        bound, and DBSCAN's result.
        """
        maxima = np.array([rnd.stats[i][2 * layout.k] for i in sorted(rnd.stats)])
        m = latent_scale(maxima)
        self.offset = m * projection(self.latent_dim, layout.k)[1]
        self.stat_bound = math.sqrt(self.latent_dim) * SIZE_CAP_FACTOR * float(np.median(maxima))
        got, raw, held = self._descriptors(rnd, layout)
        scaler = BlockScaler.fit(raw, layout.k)
        self.scale_low, self.scale_high = scaler.low, scaler.high
        found = cluster_descriptors(scaler.transform(raw), FLUX_EPS_SCALING.of(self.settings))
        self.centroids = found.centroids
        labels = np.full(num_nodes, -1, dtype=np.int64)
        labels[got] = found.labels
        labels[labels < 0] = int(np.bincount(found.labels).argmax())
        self.assignment = labels
        return m, got, held, found

    def assign_unseen(
        self, grid: Grid, nodes: list[int], who: str, server_round: int
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Nearest centroid of each node's label-free descriptor (no descriptor: the largest)."""
        layout = self.label_free
        rnd = descriptor_round(
            grid,
            nodes,
            state_to_record(self.descriptor_model),
            layout,
            self.latent_dim,
            self.settings.robustness.round_timeout,
        )
        largest = int(np.bincount(self.assignment, minlength=self.num_models).argmax())
        labels = np.full(len(nodes), largest, dtype=np.int64)
        distances = np.full(len(nodes), np.nan)
        if rnd.stats:
            got, raw, _ = self._descriptors(rnd, layout)
            scaled = BlockScaler(layout.k, self.scale_low, self.scale_high).transform(raw)
            labels[got], distances[got] = nearest_centroid(scaled, self.centroids)
        rec = {
            "round": server_round,
            "who": who,
            **rnd.record(),
            "labels": labels.tolist(),
            "distances": [None if math.isnan(d) else float(d) for d in distances],
        }
        self.descriptor_log.append(rec)
        return labels, rec

    # -- new clients and results --------------------------------------------------------------
    def onboard(self, new: QueryResult) -> Onboarding:
        """The cluster model each new client's label-free descriptor is nearest to."""
        records = self.model_records()
        if not self.clustered_at or self.num_models == 1:
            self.new_record = {"clustered": bool(self.clustered_at), "labels": [0] * len(new)}
            return Onboarding([records[0]] * len(new))
        labels, rec = self.assign_unseen(
            self.run.grid, list(new.node_ids), "new clients", self.run.num_rounds + 1
        )
        self.new_record = {"clustered": True, **rec}
        return Onboarding([records[int(c)] for c in labels])

    def saved_descriptor(self) -> dict[str, np.ndarray] | None:
        """What ``onboard.py`` needs to assign a new client as the run does (None: one model)."""
        if not self.clustered_at or not len(self.centroids):
            return None
        return {
            **{f"model/{k}": np.asarray(v) for k, v in self.descriptor_model.items()},
            "centroids": self.centroids,
            "scale_low": self.scale_low,
            "scale_high": self.scale_high,
            "offset": self.offset,
            "bound": np.array([self.stat_bound]),
        }

    def export(self) -> Export:
        """The cluster models and, once it clustered, what assigns a descriptor to one."""
        return Export(self.saved_models(), descriptor=self.saved_descriptor())

    def reference_models(self) -> list:
        """Every cluster model (the best-by-loss reference beside FLUX's own assignment)."""
        return list(self.model_records())

    def zero_shot_extras(self) -> dict[str, Any]:
        return {"flux": self.new_record} if self.new_record else {}

    def run_record(self, rec: dict[str, Any]) -> dict[str, Any]:
        rec = super().run_record(rec)
        first = next((d for d in self.descriptor_log if d["who"] == "training clients"), None)
        rec["flux"] = {
            "clustered_at": self.clustered_at,
            "latent_dim": self.latent_dim,
            "projected_dim": self.layout.k,
            "descriptor_dim": self.layout.descriptor_size,
            "label_free_dim": self.label_free.descriptor_size,
            "descriptor_bytes_per_client": (
                first["bytes_up"] / max(1, first["replies"]) if first else 0
            ),
            "accuracy_trend": self.accuracy_trend,
            "descriptor_rounds": self.descriptor_log,
        }
        return rec


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = FLUXMethod


def build(spec: MethodSpec, inputs: MethodInputs) -> FLUXMethod:
    """One model, with the true mixtures for the final clusters' ARI."""
    return FLUXMethod(inputs.settings, inputs.initial_state, truth=inputs.true_mixtures)
