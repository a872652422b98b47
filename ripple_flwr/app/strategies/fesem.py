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

from ripple_flwr.aggregation.clustering import State, flatten, nearest_centres
from ripple_flwr.app.strategies.core.clustered import ClusterModels
from ripple_flwr.app.strategies.core.replies import Accepted
from ripple_flwr.settings import RunSettings

_COLD_START_KEY = 0xFE5E  # SeedSequence key of the cold-start assignment


class FeSEM(ClusterModels):
    """FeSEM with K = ``num-components`` centres.

    Parameters
    ----------
    settings : RunSettings
    models : the K initial centres (distinct initialisations).
    truth : the true mixtures pi* by partition id, for the ARI of the final assignment.
    """

    state_fields = ("cold_rng",)  # where the cold start's draws stand
    keeps_latest = True  # each client's last returned model

    def __init__(
        self, settings: RunSettings, models: list[State], truth: np.ndarray | None = None
    ) -> None:
        super().__init__(settings, models, truth, min_models=2)
        self.cold_rng = np.random.default_rng(
            np.random.SeedSequence([settings.seed, _COLD_START_KEY])
        )

    def initial_assignment(self, n: int) -> np.ndarray:
        """Cold start: a centre drawn uniformly (seeded) for each client without a model."""
        return self.cold_rng.integers(0, self.num_models, size=n).astype(np.int64)

    def expectation(self) -> None:
        """Every client with a model of its own moves to its nearest centre."""
        if self.has_latest.any():
            centres = flatten(self.models, self.keys)
            self.assignment[self.has_latest] = nearest_centres(
                self.latest[self.has_latest], centres
            )

    def current_assignment(self) -> np.ndarray:
        self.expectation()
        return self.assignment

    def train_payloads(self, rows: np.ndarray, arrays: ArrayRecord) -> list[ArrayRecord]:
        """Each sampled client trains from its (freshly computed) centre."""
        self.expectation()
        return super().train_payloads(rows, arrays)

    def apply_updates(self, server_round: int, accepted: list[Accepted]) -> ArrayRecord | None:
        """Keep each client's returned model; centres = mean of their members' models."""
        rows = [a.row for a in accepted]
        self.remember(rows, flatten([a.state for a in accepted], self.keys))
        labels = [self._sent_from[r] for r in rows]
        self.average_into_clusters(server_round, accepted, labels)
        return None
