"""FeSEM (Long et al., 2023) as its authors' code runs it: K-means over the clients' models.

Following the authors' ``fedsem.py`` (the multi-center-fed-learning
repository, TensorFlow):

- **One initialisation.** All K centres start as copies of the same
  initial model (the authors' ``center_init`` copies ``client_model``'s
  parameters into every centre).
- **Cold start.** Every client starts with a point drawn uniformly in
  [-0.01, 0.01]^D (the authors' ``get_init_point_data``), D the size of the
  layer clients are clustered by; K-means over these points (its centroids
  started at the first K points, 5 Lloyd iterations, the authors'
  ``KmeanModel`` on its first call) gives the first assignment. So the first
  clusters are a seeded random partition, as theirs.
- **Training.** A client trains from its cluster's centre; each centre
  becomes the example-weighted mean of the models its members returned
  that round (``update_model_wmode``). A client's point becomes the chosen
  layer of the model it returned last (``get_tensor_from_localmodels``).
- **Reassignment.** After every ``fesem-update-every`` rounds (the authors'
  ``update-center-every``, 10 in their configs), except after the last round,
  one Lloyd iteration of K-means over all clients' points, started from the
  previous centroids (their ``KmeanModel`` runs one iteration per later
  call), moves clients between clusters: the distance is to the mean of
  the members' points, not to the centre models.
- **Layer.** ``fesem-layer = "last"`` clusters by the model's last weight
  matrix (the classifier's; the authors' ``VARIABLE_PARAMS`` name the last
  dense kernel), ``"all"`` by every float tensor, or a state-dict key.

- **Sampling.** ``fesem-sampling = "per-cluster"`` trains, each round, up to
  ``clients-per-round`` members of *every* cluster with two or more
  members, drawn uniformly inside it, and skips one-member clusters (the
  authors' loop over ``learned_cluster``); a round then costs up to K times
  FedAvg's. ``"global"`` (the default) draws ``clients-per-round`` clients
  from the whole federation with the run's sampler, as every method here
  does, so the tables compare methods at one cost per round.

Differences, each for a reason: K-means is scikit-learn's Lloyd (labels are
those of the updated centroids, and an empty cluster is re-seeded by
scikit-learn rather than restarting the whole K-means as the authors'
code does); the default samples globally (above); a client's point is the
layer of the model it returned last, whenever that was (the authors
refresh only the points of clients trained in the reassignment round and
keep older points for the rest; ours are never older than theirs); when
per-cluster sampling finds no cluster with two members, the round falls
back to the global draw rather than train nobody.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from flwr.app import ArrayRecord

from ripple_flwr.aggregation.clustering import State, flatten, kmeans_lloyd
from ripple_flwr.aggregation.mixing import uniform_sample
from ripple_flwr.app.server.bases.clustered import ClusterModels
from ripple_flwr.app.server.replies.validation import Accepted
from ripple_flwr.app.server.roster.query import QueryResult
from ripple_flwr.methods.fesem.spec import (
    FESEM_KMEANS_ITERS,
    FESEM_LAYER,
    FESEM_POINTS,
    FESEM_SAMPLING,
    FESEM_UPDATE_EVERY,
)
from ripple_flwr.methods.spec import MethodInputs, MethodSpec
from ripple_flwr.settings import RunSettings

log = logging.getLogger("flwr.ripple")

_COLD_START_KEY = 0xFE5E  # SeedSequence key of the cold-start points
COLD_POINT_SCALE = 0.01  # the authors' uniform(-0.01, 0.01) points
FIRST_KMEANS_ITERS = 5  # their KmeanModel's first call
LATER_KMEANS_ITERS = FESEM_KMEANS_ITERS.default  # ... and every later one
CONVERGED_KMEANS_ITERS = 300  # fesem-kmeans-iters = 0: scikit-learn's own cap


def clustering_keys(model: State, layer: str) -> list[str]:
    """The state-dict keys FeSEM's K-means reads, for ``fesem-layer`` = ``layer``."""
    floats = [k for k, v in model.items() if np.issubdtype(np.asarray(v).dtype, np.floating)]
    if layer == "all":
        return floats
    if layer == "last":
        matrices = [k for k in floats if np.asarray(model[k]).ndim >= 2]
        return [(matrices or floats)[-1]]
    if layer not in floats:
        raise ValueError(
            f"fesem-layer={layer!r} is not a floating-point tensor of the model; use last, all "
            f"or one of: {', '.join(floats)}"
        )
    return [layer]


class FeSEMMethod(ClusterModels):
    """FeSEM with K = ``num-components`` centres, all started from one initial model.

    Parameters
    ----------
    settings : RunSettings
        Its options ``fesem-update-every``, ``fesem-layer``, ``fesem-points``,
        ``fesem-kmeans-iters`` and ``fesem-sampling``.
    models : the K initial centres (copies of one initial model).
    truth : the true mixtures pi* by partition id, for the ARI of the final assignment.
    """

    state_fields = ("cold_rng", "centroids")  # the K-means centroids between reassignments
    keeps_latest = True  # each client's point: the clustered layer of its last model

    def __init__(
        self, settings: RunSettings, models: list[State], truth: np.ndarray | None = None
    ) -> None:
        super().__init__(settings, models, truth, min_models=2)
        self.point_keys = clustering_keys(models[0], FESEM_LAYER.of(settings))
        self.update_every = FESEM_UPDATE_EVERY.of(settings)
        self.points_from_updates = FESEM_POINTS.of(settings) == "update"
        self.kmeans_iters = FESEM_KMEANS_ITERS.of(settings) or CONVERGED_KMEANS_ITERS
        self.per_cluster = FESEM_SAMPLING.of(settings) == "per-cluster"
        self.cold_rng = np.random.default_rng(
            np.random.SeedSequence([settings.training.seed, _COLD_START_KEY])
        )
        dim = self.vector_size()
        self.centroids = np.zeros((self.num_models, dim), dtype=np.float64)

    def vector_size(self) -> int:
        """The clustered layer's size D (the width of each client's point)."""
        return sum(int(np.asarray(self.models[0][k]).size) for k in self.point_keys)

    def cold_points(self, n: int) -> np.ndarray:
        """``n`` seeded points uniform in [-0.01, 0.01]^D (clients without a model yet)."""
        d = self.vector_size()
        return self.cold_rng.uniform(-COLD_POINT_SCALE, COLD_POINT_SCALE, (n, d)).astype(np.float32)

    def setup(self, clients: QueryResult) -> None:
        """Cold start: K-means over random points, centroids from the first K of them."""
        super().setup(clients)
        n, k = len(clients), self.num_models
        self.latest = self.cold_points(n)
        order = self.cold_rng.permutation(n)  # "the first K points" of a seeded client order
        init = self.latest[order[:k]] if n >= k else self.cold_points(k)
        self.centroids, self.assignment = kmeans_lloyd(self.latest, init, FIRST_KMEANS_ITERS)

    def add_clients(self, joined: QueryResult, server_round: int) -> None:
        """A late joiner gets a cold point and the cluster whose centroid is nearest it."""
        start = len(self.assignment)
        super().add_clients(joined, server_round)
        self.latest[start:] = self.cold_points(len(joined))
        _, labels = kmeans_lloyd(self.latest[start:], self.centroids, iters=0)
        self.assignment[start:] = labels

    def sample_rows(self, server_round: int) -> np.ndarray | None:
        """``per-cluster``: up to clients-per-round inside each cluster of 2+ active members
        (``None``: the run's uniform draw)."""
        if not self.per_cluster:
            return None
        active = self.run.active_rows()
        labels = self.assignment[active]
        picked = []
        for k in range(self.num_models):  # in cluster order, so one seed gives one draw
            members = active[labels == k]
            if len(members) >= 2:  # the authors skip clusters of one client
                size = min(self.settings.training.clients_per_round, len(members))
                picked.append(members[uniform_sample(len(members), size, self.run.rng)])
        if not picked:
            return None
        return np.sort(np.concatenate(picked))

    def aggregate(self, server_round: int, accepted: list[Accepted]) -> ArrayRecord | None:
        """Centres = mean of their members' models; every few rounds, K-means reassigns."""
        rows = [a.row for a in accepted]
        points = flatten([a.state for a in accepted], self.point_keys)
        if self.points_from_updates:
            sent = [self.models[self._sent_from[r]] for r in rows]
            points -= flatten(sent, self.point_keys)
        self.remember(rows, points)
        self.average_into_clusters(server_round, accepted, [self._sent_from[r] for r in rows])
        if server_round % self.update_every == 0 and server_round < self.run.num_rounds:
            self.reassign(server_round)
        return None

    def reassign(self, server_round: int) -> None:
        """Lloyd iterations over every client's point, from the previous centroids."""
        before = self.assignment.copy()
        self.centroids, self.assignment = kmeans_lloyd(
            self.latest, self.centroids, self.kmeans_iters
        )
        sizes = np.bincount(self.assignment, minlength=self.num_models).tolist()
        moved = int((before != self.assignment).sum())
        self.events.append({"round": server_round, "reassigned": moved, "sizes": sizes})
        log.info(
            "round %d: FeSEM K-means moved %d clients; cluster sizes %s", server_round, moved, sizes
        )

    def restore(self, fields: dict[str, Any]) -> None:
        """ClusterModels' restore and checks, then the centroids' and points' shapes."""
        super().restore(fields)
        k, d = self.num_models, self.vector_size()
        if self.centroids.shape != (k, d) or self.latest.shape[1:] != (d,):
            raise ValueError(
                f"the saved FeSEM centroids {self.centroids.shape} or points "
                f"{self.latest.shape} do not match K = {k} and the layer's {d} values; resume "
                "from a <results>.resume.npz this method wrote, or start the run again"
            )


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = FeSEMMethod


def build(spec: MethodSpec, inputs: MethodInputs) -> FeSEMMethod:
    """K centres, all copies of the one initial model (the authors' ``center_init``)."""
    k = inputs.settings.embedding.num_components
    return FeSEMMethod(
        inputs.settings, [dict(inputs.initial_state) for _ in range(k)], truth=inputs.true_mixtures
    )
