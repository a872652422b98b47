"""FeSEM (Long et al., 2023): clients belong to the centre nearest their own model (L2, hard).

Expectation step: a client that has trained before belongs to the centre
nearest, in L2 over the floating-point weights, to the model it returned
last. Maximisation step: each centre becomes the example-weighted mean of
the models its members of the round returned. Assignments are hard, as in
both public reference implementations (the Ripple paper's related-work text
calls them soft).

Cold start: the K centres start from K distinct seeded initialisations, and
a client that has not trained yet (no model of its own) belongs to a centre
drawn uniformly at random from the run's seeded generator. It trains from
that centre; the model it returns is its own from then on.
"""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord
from flwr.serverapp.strategy import Strategy

from ripple_flwr.cluster_baselines import State, flatten, float_keys, nearest_centres
from ripple_flwr.config import RunSettings
from ripple_flwr.strategies.clustered import ClusterModels
from ripple_flwr.strategies.replies import Accepted

_COLD_START_KEY = 0xFE5E  # SeedSequence key of the cold-start assignment


class FeSEM(ClusterModels, Strategy):
    """FeSEM with K = ``num-components`` centres.

    Parameters
    ----------
    settings : RunSettings
    models : the K initial centres (distinct initialisations).
    truth : the true mixtures pi* by partition id, for the ARI of the final assignment.
    """

    checkpoint_fields = ("own", "has_own")

    def __init__(
        self, settings: RunSettings, models: list[State], truth: np.ndarray | None = None
    ) -> None:
        if len(models) < 2:
            raise ValueError(f"FeSEM needs K >= 2 centres, got {len(models)}")
        self._init_clusters(settings, models, truth)
        self.keys = float_keys(models[0])
        self.cold_rng = np.random.default_rng(
            np.random.SeedSequence([settings.seed, _COLD_START_KEY])
        )
        self.own = np.zeros((0, 0), dtype=np.float32)  # (rows, P): each client's last model
        self.has_own = np.zeros(0, dtype=bool)

    def initial_assignment(self, n: int) -> np.ndarray:
        """Cold start: a centre drawn uniformly (seeded) for each client without a model."""
        return self.cold_rng.integers(0, self.num_models, size=n).astype(np.int64)

    def setup(self, clients) -> None:
        super().setup(clients)
        p = int(flatten([self.models[0]], self.keys).shape[1])
        self.own = np.zeros((len(clients), p), dtype=np.float32)
        self.has_own = np.zeros(len(clients), dtype=bool)

    def add_clients(self, joined) -> None:
        super().add_clients(joined)
        pad = np.zeros((len(joined), self.own.shape[1]), dtype=np.float32)
        self.own = np.concatenate([self.own, pad])
        self.has_own = np.concatenate([self.has_own, np.zeros(len(joined), dtype=bool)])

    def expectation(self) -> None:
        """Every client with a model of its own moves to its nearest centre."""
        if self.has_own.any():
            centres = flatten(self.models, self.keys)
            self.assignment[self.has_own] = nearest_centres(self.own[self.has_own], centres)

    def current_assignment(self) -> np.ndarray:
        self.expectation()
        return self.assignment

    def train_payloads(self, rows: np.ndarray, arrays: ArrayRecord) -> list[ArrayRecord]:
        """Each sampled client trains from its (freshly computed) centre."""
        self.expectation()
        records = self.model_records()
        self._sent_from = {int(r): int(self.assignment[r]) for r in rows}
        return [records[self._sent_from[int(r)]] for r in rows]

    def apply_updates(self, server_round: int, accepted: list[Accepted]) -> ArrayRecord | None:
        """Keep each client's returned model; centres = mean of their members' models."""
        rows = [a.row for a in accepted]
        self.own[rows] = flatten([a.state for a in accepted], self.keys)
        self.has_own[rows] = True
        labels = [self._sent_from[r] for r in rows]
        self.average_into_clusters(server_round, accepted, labels)
        return None
