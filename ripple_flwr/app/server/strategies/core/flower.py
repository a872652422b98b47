"""Flower's one-model strategies (FedAvg, FedProx, FedAdam, ...) as the app's methods.

:class:`FlowerModel` goes before a Flower strategy class and leaves its
``configure_train`` / ``aggregate_train`` to run as Flower wrote them
(``super()``; whatever state the class keeps, such as FedOpt's
``current_arrays`` and moments, stays its own). Around them it adds only what
the app must: its seeded sampler (Flower samples from the grid it is handed,
so it is handed a view showing the sampled nodes), byte accounting, reply
validation before Flower sees a reply, the model's own dtypes on the result,
personalised evaluation of every client, and the global model for new clients.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid

from ripple_flwr.aggregation.robust import unsafe_step
from ripple_flwr.app.protocol.records import record_to_state, state_to_record
from ripple_flwr.app.server.strategies.core.base import AppStrategy
from ripple_flwr.app.server.strategies.core.roster.admission import QueryResult
from ripple_flwr.app.server.strategies.core.rounds.grid import SampledGrid
from ripple_flwr.methods.options import FEDOPT_BETA1, FEDOPT_BETA2, FEDOPT_ETA, FEDOPT_TAU
from ripple_flwr.settings import RunSettings

log = logging.getLogger("flwr.ripple")


def flower_kwargs(settings: RunSettings) -> dict:
    """Constructor arguments every Flower strategy gets: the app samples and admits nodes.

    Flower's own sampler waits for ``min_available_nodes`` and draws
    ``fraction_train`` of what the grid shows; the grid it is handed shows
    exactly the nodes the run's sampler chose, so it takes all of them.
    """
    return {
        "fraction_train": 1.0,
        "fraction_evaluate": 1.0,
        "min_train_nodes": 1,
        "min_evaluate_nodes": 1,
        "min_available_nodes": 1,
        "arrayrecord_key": "arrays",
        "configrecord_key": "config",
    }


class FlowerModel(AppStrategy):
    """The app around one of Flower's one-model strategies (list it first among the bases).

    ``__init__`` passes :func:`flower_kwargs` and the method's own arguments
    on to the Flower class through the cooperative chain
    (``FlowerModel`` -> ``AppStrategy`` -> the Flower class).
    """

    def __init__(
        self, settings: RunSettings, initial_state: dict[str, np.ndarray], **method_kwargs: Any
    ) -> None:
        super().__init__(settings, initial_state, **flower_kwargs(settings), **method_kwargs)

    state_fields = ("latest_global",)
    latest_global: dict[str, np.ndarray] | None = None  # the loop's current model

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Flower's ``configure_train`` over the nodes the run's seeded sampler chose."""
        rows = self.begin_round(server_round, grid)  # the round's server time starts here
        self.latest_global = record_to_state(arrays)
        if not len(rows):
            return []
        view = SampledGrid(grid, [self.clients.node_ids[int(r)] for r in rows])
        # Flower writes into the config it is given (server-round, proximal-mu): a copy.
        config = ConfigRecord(dict(config))
        messages = list(super().configure_train(server_round, arrays, config, view))
        return self.record_sent(rows, messages)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower's ``aggregate_train`` over the replies that passed validation."""
        t0 = time.perf_counter()
        accepted = self.accept_replies(server_round, replies)
        arrays = None
        if accepted:
            arrays, _ = super().aggregate_train(server_round, [a.message for a in accepted])
            if arrays is not None:
                arrays = self.as_model_dtypes(arrays)
                arrays = self.refuse_unsafe(server_round, arrays)
                if arrays is not None:
                    self.latest_global = record_to_state(arrays)
        return arrays, self.end_round(accepted, time.perf_counter() - t0)

    def refuse_unsafe(self, server_round: int, arrays: ArrayRecord) -> ArrayRecord | None:
        """``None`` (the global model stays as it was) if the aggregate is not a sane step."""
        # The model sent this round, decoded once in configure_train.
        reason = unsafe_step(self.latest_global, record_to_state(arrays))
        if reason is None:
            return arrays
        log.error(
            "round %d: refused the aggregate (%s); the global model stays", server_round, reason
        )
        return None

    def as_model_dtypes(self, arrays: ArrayRecord) -> ArrayRecord:
        """The aggregate in the model's own dtypes and key order.

        Flower's FedOpt steps in float64 (a NumPy-2 float64 scalar times a
        float32 array); sent as is, every client would get twice FedAvg's bytes.
        """
        state = record_to_state(arrays)
        if all(state[k].dtype == dtype for k, (_, dtype) in self.reference.items()):
            return arrays
        return state_to_record(
            {k: state[k].astype(dtype, copy=False) for k, (_, dtype) in self.reference.items()}
        )

    def eval_payloads(self, arrays: ArrayRecord) -> list[ArrayRecord]:
        """Every client evaluates the current global model."""
        return [arrays] * len(self.clients)

    def onboard_payloads(self, new: QueryResult) -> list[ArrayRecord] | None:
        """New clients get the final global model: a one-model method's zero-shot answer."""
        return None if self.final_global is None else [self.final_global] * len(new)

    def saved_models(self) -> dict[str, np.ndarray] | None:
        """The global model, on a leading axis of one."""
        if self.final_global is None:
            return None
        return {k: np.asarray(v)[None] for k, v in record_to_state(self.final_global).items()}


# FedOpt's server optimiser (FedAdam, FedYogi, FedAdagrad): each lists the ones it reads.


def fedopt_kwargs(settings: RunSettings, moments: bool = True) -> dict:
    """FedOpt's server optimiser (the paper: beta1 0.9, beta2 0.99, tau 1e-3).

    ``moments=False`` for FedAdagrad, whose Flower class fixes both betas at 0.
    """
    kwargs = {
        "eta": FEDOPT_ETA.of(settings),
        "eta_l": settings.training.lr,
        "tau": FEDOPT_TAU.of(settings),
    }
    if moments:
        kwargs |= {"beta_1": FEDOPT_BETA1.of(settings), "beta_2": FEDOPT_BETA2.of(settings)}
    return kwargs
