"""CFL (Sattler et al., 2020): one model, split recursively by the cosine similarity of updates.

All clients start in one cluster with one model. Each round a cluster model
becomes the example-weighted mean of the models its sampled members
returned. From round ``cfl-warmup`` on, a cluster whose round had at least
two members is split in two when the norm of their weighted mean update is
below ``cfl-eps1`` (the joint objective is near a stationary point) while
the largest single update is above ``cfl-eps2`` (some clients still pull
away): complete-linkage clustering of the cosine similarities of its
members' most recent updates, up to ``cfl-max-clusters`` clusters. With a
fraction of clients per round (unlike the paper, where all take part),
each member's latest update stands for it; a member that has not trained
yet joins the larger side. Both sides start from the parent's model.
"""

from __future__ import annotations

import logging

import numpy as np
from flwr.app import ArrayRecord

from ripple_flwr.aggregation.clustering import (
    State,
    cfl_bipartition,
    cfl_should_split,
    flatten,
)
from ripple_flwr.app.strategies.core.clustered import ClusterModels
from ripple_flwr.app.strategies.core.replies import Accepted
from ripple_flwr.settings import Option, RunSettings

CFL_WARMUP = Option(
    "cfl-warmup", int, 60, "CFL: first round a cluster may be split", low=1, high=1_000_000
)
CFL_EPS1 = Option(
    "cfl-eps1",
    float,
    0.35,
    "CFL: split when the mean update norm is below this ...",
    low=0,
    low_open=True,
)
CFL_EPS2 = Option(
    "cfl-eps2",
    float,
    0.9,
    "CFL: ... and the largest client update norm above this",
    low=0,
    low_open=True,
)
CFL_MAX_CLUSTERS = Option(
    "cfl-max-clusters", int, 10, "CFL: at most this many clusters (paper: 10)", low=1, high=100
)

log = logging.getLogger("flwr.ripple")


class CFL(ClusterModels):
    """Clustered FL by recursive bi-partitioning.

    Parameters
    ----------
    settings : RunSettings
        Its options ``cfl-warmup``, ``cfl-eps1``, ``cfl-eps2``, ``cfl-max-clusters``.
    initial_state : the one initial model.
    truth : the true mixtures pi* by partition id, for the ARI of the final clusters.
    """

    options = (CFL_WARMUP, CFL_EPS1, CFL_EPS2, CFL_MAX_CLUSTERS)
    state_fields = ("criterion",)
    keeps_latest = True  # each client's last update

    def __init__(
        self, settings: RunSettings, initial_state: State, truth: np.ndarray | None = None
    ) -> None:
        super().__init__(settings, [initial_state], truth)
        # Per round and cluster with >= 2 replies: [round, cluster, mean norm, max norm], so
        # cfl-eps1 / cfl-eps2 can be read off a run (the warm-up rounds included).
        self.criterion: list[list[float]] = []

    def apply_updates(self, server_round: int, accepted: list[Accepted]) -> ArrayRecord | None:
        """Per-cluster mean of the returned models, then the split test."""
        s = self.settings
        rows = [a.row for a in accepted]
        labels = [self._sent_from[r] for r in rows]
        sent = {c: flatten([self.models[c]], self.keys)[0] for c in set(labels)}  # once each
        updates = flatten([a.state for a in accepted], self.keys)
        updates -= np.stack([sent[c] for c in labels])
        self.remember(rows, updates)
        self.average_into_clusters(server_round, accepted, labels)
        weights = np.array([a.num_examples for a in accepted], dtype=np.float64)
        for c in sorted(set(labels)):
            mask = np.array(labels) == c
            split, mean_norm, max_norm = cfl_should_split(
                updates[mask], weights[mask], CFL_EPS1.of(s), CFL_EPS2.of(s)
            )
            if mask.sum() >= 2:
                self.criterion.append([server_round, c, mean_norm, max_norm])
            if (
                split
                and server_round >= CFL_WARMUP.of(s)
                and self.num_models < CFL_MAX_CLUSTERS.of(s)
            ):
                self.split(server_round, c, mean_norm, max_norm)
        return None

    def split(self, server_round: int, c: int, mean_norm: float, max_norm: float) -> bool:
        """Bi-partition cluster ``c`` by its members' latest updates (at least three needed)."""
        s = self.settings
        members = np.flatnonzero(self.assignment == c)
        with_update = members[self.has_latest[members]]
        if len(with_update) < 3:
            return False
        a, b, cross = cfl_bipartition(self.latest[with_update])
        new = self.num_models
        self.assignment[with_update[b]] = new
        self.set_models([*self.models, self.models[c]])
        event = {
            "round": server_round,
            "split": c,
            "into": [c, new],
            "sizes": [int((self.assignment == c).sum()), int(len(b))],
            "mean_norm": mean_norm,
            "max_norm": max_norm,
            "cross_similarity_max": cross,
        }
        self.events.append(event)
        log.info(
            "round %d: CFL split cluster %d (mean update %.3f < %g, max %.3f > %g) into "
            "%d + %d clients; %d clusters now",
            server_round,
            c,
            mean_norm,
            CFL_EPS1.of(s),
            max_norm,
            CFL_EPS2.of(s),
            event["sizes"][0],
            event["sizes"][1],
            self.num_models,
        )
        return True

    def run_record(self) -> dict:
        rec = super().run_record()
        rec["assignment"]["criterion"] = {
            "columns": ["round", "cluster", "mean_update_norm", "max_update_norm"],
            "rows": self.criterion,
        }
        return rec
