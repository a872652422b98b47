"""CFL (Sattler et al., 2020): one model, split recursively by the cosine similarity of updates.

All clients start in one cluster with one model. A round goes in the order of
Sattler et al.'s reference code (felisat/clustered-federated-learning):

1. every sampled client trains its cluster's model; its update is the model it
   returned minus the model it was sent;
2. each cluster whose round had at least two replies is tested: the norm of its
   members' weighted mean update below ``cfl-eps1`` (the joint objective is near
   a stationary point) while the largest single update is above ``cfl-eps2``
   (some clients still pull away). From round ceil(``cfl-warmup-fraction`` x
   ``num-server-rounds``) on (round 1 at the earliest) and below ``cfl-max-clusters``
   clusters, such a cluster is bi-partitioned by complete-linkage clustering
   of the cosine similarities of its members' updates (at least three
   members with one). The bi-partition is kept only when the largest cosine
   similarity across its two sides (alpha_cross_max) is below
   ``cfl-max-similarity``, the paper's test; a refused one is logged and
   recorded, and the cluster stays whole;
3. every cluster, a new one included, becomes the example-weighted mean of the
   models its own members returned this round: the model it sent plus the mean
   of its own members' updates. A new cluster none of whose members replied
   this round starts from the parent's sent model.

Defaults, measured on the paper's protocol (Fashion-MNIST, 100 x 200 images,
Dir(0.1), 10 clients a round, E = 1, lr 0.01, momentum 0.9; seed 0, 300
rounds; docs/results.md): the reference code's ``EPS_1`` / ``EPS_2`` = 0.4 /
1.6 (felisat/clustered-federated-learning's notebook) are on the scale of its
own models and learning rate: here the largest update norm of a round never
exceeds 1.30, so with 1.6 CFL never splits and is FedAvg (69.8%). The
defaults ``cfl-eps1 = 0.35`` and ``cfl-eps2 = 0.9`` sit on this federation's
scale (round means 0.05-0.58, maxima 0.36-1.30). The Ripple paper's
similarity threshold 0.5 (``cfl-max-similarity = 0.5``: a split is refused
when its largest cross-side cosine similarity is not below it, Sattler et
al.'s alpha_cross_max) refused all 19 splits of that run (0.61-0.82: among
100 clients' latest updates some pair across the sides is always similar),
so CFL was FedAvg again; the reference code has no such test, and the
default, 1.0, follows it (82.9%, 4 clusters). ``cfl-warmup-fraction = 0.2``
and ``cfl-max-clusters = 10`` are the paper's protocol (a 200-round warm-up
of 1,000 rounds, at most 10 clusters).
With a fraction of clients per round (unlike the
paper, where all take part), each member's latest update stands for it in
the bi-partition; a member that has not trained yet joins the larger side.
The reference averages updates uniformly; here they are weighted by
examples by default, as in every other method of the app
(``cfl-weighting = "uniform"`` is the reference's rule).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
from flwr.app import ArrayRecord

from ripple_flwr.aggregation.clustering import (
    State,
    cfl_bipartition,
    cfl_should_split,
    flatten,
)
from ripple_flwr.app.server.bases.clustered import ClusterModels
from ripple_flwr.app.server.replies.validation import Accepted
from ripple_flwr.methods.cfl.spec import (
    CFL_EPS1,
    CFL_EPS2,
    CFL_MAX_CLUSTERS,
    CFL_MAX_SIMILARITY,
    CFL_WARMUP_FRACTION,
    CFL_WEIGHTING,
)
from ripple_flwr.methods.spec import MethodInputs, MethodSpec
from ripple_flwr.settings import RunSettings

log = logging.getLogger("flwr.ripple")


def first_split_round(fraction: float, num_rounds: int) -> int:
    """The first round a split may happen: ceil(fraction x rounds), at least round 1."""
    return max(1, math.ceil(fraction * num_rounds - 1e-9))


class CFLMethod(ClusterModels):
    """Clustered FL by recursive bi-partitioning.

    Parameters
    ----------
    settings : RunSettings
        Its options ``cfl-warmup-fraction``, ``cfl-eps1``, ``cfl-eps2``,
        ``cfl-max-similarity``, ``cfl-max-clusters``, ``cfl-weighting``.
    initial_state : the one initial model.
    truth : the true mixtures pi* by partition id, for the ARI of the final clusters.
    """

    state_fields = ("criterion",)
    keeps_latest = True  # each client's last update

    def __init__(
        self, settings: RunSettings, initial_state: State, truth: np.ndarray | None = None
    ) -> None:
        super().__init__(settings, [initial_state], truth)
        # Per round and cluster with >= 2 replies: [round, cluster, mean norm, max norm], so
        # cfl-eps1 / cfl-eps2 can be read off a run (the warm-up rounds included).
        self.criterion: list[list[float]] = []

    @property
    def first_split_round(self) -> int:
        return first_split_round(CFL_WARMUP_FRACTION.of(self.settings), self.run.num_rounds)

    def aggregate(self, server_round: int, accepted: list[Accepted]) -> ArrayRecord | None:
        """The split test on this round's updates, then each cluster's mean, new ones included."""
        s = self.settings
        rows = [a.row for a in accepted]
        labels = [self._sent_from[r] for r in rows]
        sent = {c: flatten([self.models[c]], self.keys)[0] for c in set(labels)}  # once each
        updates = flatten([a.state for a in accepted], self.keys)
        updates -= np.stack([sent[c] for c in labels])
        self.remember(rows, updates)
        uniform = CFL_WEIGHTING.of(s) == "uniform"
        weights = np.array([1 if uniform else a.num_examples for a in accepted], dtype=np.float64)
        for c in sorted(set(labels)):
            mask = np.array(labels) == c
            split, mean_norm, max_norm = cfl_should_split(
                updates[mask], weights[mask], CFL_EPS1.of(s), CFL_EPS2.of(s)
            )
            if mask.sum() >= 2:
                self.criterion.append([server_round, c, mean_norm, max_norm])
            if (
                split
                and server_round >= self.first_split_round
                and self.num_models < CFL_MAX_CLUSTERS.of(s)
            ):
                self.split(server_round, c, mean_norm, max_norm)
        # Each reply counts for the cluster its client is in now (after this round's splits).
        self.average_into_clusters(
            server_round, accepted, [int(self.assignment[r]) for r in rows], uniform=uniform
        )
        return None

    def split(self, server_round: int, c: int, mean_norm: float, max_norm: float) -> bool:
        """Bi-partition cluster ``c`` by its members' latest updates (at least three needed).

        The new cluster starts from ``c``'s model as it was sent this round (and, with a
        ``cluster-optimizer``, from ``c``'s moments: both sides continue the parent's
        optimiser); the split is refused when its sides are too similar
        (``cfl-max-similarity``).
        """
        s = self.settings
        members = np.flatnonzero(self.assignment == c)
        with_update = members[self.has_latest[members]]
        if len(with_update) < 3:
            return False
        a, b, cross = cfl_bipartition(self.latest[with_update])
        accepted = cross < CFL_MAX_SIMILARITY.of(s)
        new = self.num_models
        event = {
            "round": server_round,
            "split": c,
            "into": [c, new] if accepted else [c],
            "sizes": [int(len(members) - len(b)), int(len(b))],
            "mean_norm": mean_norm,
            "max_norm": max_norm,
            "cross_similarity_max": cross,
            "accepted": bool(accepted),
        }
        self.events.append(event)
        if not accepted:
            log.info(
                "round %d: CFL refused to split cluster %d into %d + %d clients: the largest "
                "cross similarity %.3f is not below cfl-max-similarity=%g",
                server_round,
                c,
                *event["sizes"],
                cross,
                CFL_MAX_SIMILARITY.of(s),
            )
            return False
        self.assignment[with_update[b]] = new
        self.split_cluster(c)  # c's model; with a cluster-optimizer, c's moments too
        log.info(
            "round %d: CFL split cluster %d (mean update %.3f < %g, max %.3f > %g, cross "
            "similarity %.3f < %g) into %d + %d clients; %d clusters now",
            server_round,
            c,
            mean_norm,
            CFL_EPS1.of(s),
            max_norm,
            CFL_EPS2.of(s),
            cross,
            CFL_MAX_SIMILARITY.of(s),
            *event["sizes"],
            self.num_models,
        )
        return True

    def run_record(self, rec: dict[str, Any]) -> dict[str, Any]:
        rec = super().run_record(rec)
        rec["assignment"]["criterion"] = {
            "columns": ["round", "cluster", "mean_update_norm", "max_update_norm"],
            "rows": self.criterion,
        }
        rec["assignment"]["first_split_round"] = self.first_split_round
        return rec


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = CFLMethod


def build(spec: MethodSpec, inputs: MethodInputs) -> CFLMethod:
    """One model, with the true mixtures for the final clusters' ARI."""
    return CFLMethod(inputs.settings, inputs.initial_state, truth=inputs.true_mixtures)
