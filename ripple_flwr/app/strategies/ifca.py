"""IFCA (Ghosh et al., 2020): every sampled client receives all K models and trains the best one.

A client computes the loss of each of the K cluster models on its own
training split, trains the lowest-loss one and returns it with its choice;
each cluster model becomes the example-weighted mean of the models trained
from it (IFCA's model-averaging variant). Download is K models per client
per round, K x FedAvg's, and it is counted so. The K models start from K
distinct seeded initialisations (one identical start would make every
client choose model 0 forever). Evaluation sends all K models too: each
client is scored with the one it would choose, by training-split loss.
"""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord

from ripple_flwr.aggregation.clustering import State
from ripple_flwr.app.strategies.core.clustered import ClusterModels
from ripple_flwr.app.strategies.core.fields import REPLY_ERRORS
from ripple_flwr.app.strategies.core.replies import Accepted, check_choice
from ripple_flwr.settings import RunSettings


class IFCA(ClusterModels):
    """IFCA with K = ``num-components`` models.

    Parameters
    ----------
    settings : RunSettings
    models : the K initial cluster models (distinct initialisations).
    truth : the true mixtures pi* by partition id, for the ARI of the final choices.
    """

    state_fields = ()  # ClusterModels' (models, assignment, ...)

    def __init__(
        self, settings: RunSettings, models: list[State], truth: np.ndarray | None = None
    ) -> None:
        super().__init__(settings, models, truth, min_models=2)

    def train_payloads(self, rows: np.ndarray, arrays: ArrayRecord) -> list[list[ArrayRecord]]:
        """All K models to every sampled client (one shared list of records)."""
        records = self.model_records()
        return [records] * len(rows)

    def check_reply(self, a: Accepted) -> str | None:
        """The reply must name the model it trained (an index in [0, K))."""
        try:
            check_choice(a.metrics, self.num_models)
        except REPLY_ERRORS as err:
            return str(err)
        return None

    @staticmethod
    def choice(a: Accepted) -> int:
        return int(a.metrics["chosen"])

    def update_origin(self, a: Accepted, sent: State) -> State:
        """A reply's update is measured from the model it says it chose."""
        return self.models[self.choice(a)]

    def apply_updates(self, server_round: int, accepted: list[Accepted]) -> ArrayRecord | None:
        """theta_j = sum over clients that chose j of n_i theta_i / sum n_i."""
        labels = [self.choice(a) for a in accepted]
        for a, c in zip(accepted, labels, strict=True):
            self.assignment[a.row] = c
        self.average_into_clusters(server_round, accepted, labels)
        return None

    def eval_payloads(self, arrays: ArrayRecord) -> list[list[ArrayRecord]]:
        """All K models: each client is scored with its lowest training-loss one."""
        return [self.model_records()] * len(self.clients)

    def scored(self, server_round: int, per_client: list) -> None:
        """The models the clients chose in this evaluation are their assignment."""
        row_of = {p: r for r, p in enumerate(self.clients.partition_ids)}
        for c in per_client:
            if c.chosen is not None:
                self.assignment[row_of[c.partition]] = c.chosen
