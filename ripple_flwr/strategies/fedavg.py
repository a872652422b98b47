"""FedAvg on the app's clients: Flower's own FedAvg, with seeded sampling and shared accounting.

McMahan et al., "Communication-Efficient Learning of Deep Networks from
Decentralized Data" (https://arxiv.org/abs/1602.05629). Aggregation is
Flower's (``FedAvg.aggregate_train``, weighted by ``num-examples``); only
the sampling (the run's seeded sampler instead of the global ``random``),
reply validation, byte accounting and the personalised evaluation (every
client evaluates the global model on its own test split) are shared with
Ripple through :class:`~ripple_flwr.strategies.common.FederationRun`.
"""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord
from flwr.serverapp.strategy import FedAvg

from ripple_flwr.config import RunSettings
from ripple_flwr.strategies.common import Accepted, FederationRun, QueryResult


class FedAvgBaseline(FederationRun, FedAvg):
    """Flower's FedAvg over the same clients, sampling budget and evaluation as Ripple.

    Parameters
    ----------
    settings : RunSettings
        The run (clients per round, seed, eval-every, ...).
    initial_state : dict[str, ndarray]
        The initial global model (its keys and shapes validate the replies).
    """

    def __init__(self, settings: RunSettings, initial_state: dict[str, np.ndarray]) -> None:
        FedAvg.__init__(
            self,
            min_train_nodes=settings.clients_per_round,
            min_available_nodes=settings.num_partitions,
            arrayrecord_key="arrays",
            configrecord_key="config",
        )
        self._init_run(settings, initial_state)

    def train_payloads(self, rows: np.ndarray, arrays: ArrayRecord) -> list[ArrayRecord]:
        """The same global model for every sampled client."""
        return [arrays] * len(rows)

    def apply_updates(self, server_round: int, accepted: list[Accepted]) -> ArrayRecord | None:
        """Flower's FedAvg aggregation of the validated replies."""
        arrays, _ = FedAvg.aggregate_train(self, server_round, [a.message for a in accepted])
        return arrays

    def eval_payloads(self, arrays: ArrayRecord) -> list[ArrayRecord]:
        """Every client evaluates the current global model."""
        return [arrays] * len(self.clients)

    def onboard_payloads(self, new: QueryResult) -> list[ArrayRecord] | None:
        """New clients get the final global model: FedAvg's zero-shot answer."""
        return None if self.final_global is None else [self.final_global] * len(new)
