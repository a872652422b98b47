"""Flower's one-model strategies (FedAvg, FedProx, FedAdam, ...) as the app's methods.

:class:`FlowerMethod` holds a Flower strategy object and leaves its
``configure_train`` / ``aggregate_train`` to run as Flower wrote them
(whatever state the object keeps, such as FedOpt's ``current_arrays`` and
moments, stays its own). Around them it adds only what
the app must: its seeded sampler (Flower samples from the grid it is handed,
so it is handed a view showing the sampled nodes), byte accounting, reply
validation before Flower sees a reply, the model's own dtypes on the result,
personalised evaluation of every client, and the global model for new clients.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from ripple_flwr.aggregation.robust import unsafe_step
from ripple_flwr.app.protocol.records import record_to_state, state_to_record
from ripple_flwr.app.server.roster.query import QueryResult
from ripple_flwr.app.server.rounds.grid import SampledGrid
from ripple_flwr.methods.api import Export, Method, Onboarding, declared_fields
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


class FlowerMethod(Method):
    """One of Flower's one-model strategies, held as Flower wrote it (composition).

    A method folder subclasses it once, naming ``flower_class`` (Flower's class) and, in
    ``state_fields``, the attributes of Flower's object saved for resume (FedOpt's
    ``current_arrays``, ``m_t``, ``v_t``). Flower's ``configure_train`` and
    ``aggregate_train`` run unchanged; around them this adds only what the app must: the
    run's seeded sample (Flower samples from the grid it is handed, so it is handed a view
    showing the sampled nodes), the model's own dtypes on the result, the refusal of an
    insane step, personalised evaluation of every client, and the global model for new
    clients.
    """

    flower_class: type = Strategy
    state_fields: tuple[str, ...] = ("latest_global",)
    run: Any = None  # the engine, set when it takes the method

    def __init__(
        self, settings: RunSettings, initial_state: dict[str, np.ndarray], **flower_args: Any
    ) -> None:
        self.settings = settings
        self.flower = self.flower_class(**flower_kwargs(settings), **flower_args)
        self.latest_global: dict[str, np.ndarray] | None = None  # the loop's current model
        self.final_global: ArrayRecord | None = None  # the run's last global model

    # -- state -------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The saved fields: the current global model, then Flower's own attributes."""
        return {
            "latest_global": self.latest_global,
            **{name: getattr(self.flower, name) for name in self.flower_fields()},
        }

    def restore(self, fields: dict[str, Any]) -> None:
        """Put back checked fields: ours on this object, Flower's on Flower's."""
        fields = dict(fields)
        self.latest_global = fields.pop("latest_global", self.latest_global)
        for name, value in fields.items():
            setattr(self.flower, name, value)

    @classmethod
    def flower_fields(cls) -> list[str]:
        """The saved attributes of Flower's object (every field but ``latest_global``)."""
        return [n for n in declared_fields(cls) if n != "latest_global"]

    # -- a round -----------------------------------------------------------------------------
    def configure_train(
        self,
        server_round: int,
        rows: np.ndarray,
        arrays: ArrayRecord,
        config: ConfigRecord,
        grid: Grid,
    ) -> list[Message]:
        """Flower's ``configure_train`` over the nodes the run's seeded sampler chose."""
        self.latest_global = record_to_state(arrays)
        if not len(rows):
            return []
        view = SampledGrid(grid, [self.run.clients.node_ids[int(r)] for r in rows])
        # Flower writes into the config it is given (server-round, proximal-mu): a copy.
        config = ConfigRecord(dict(config))
        return list(self.flower.configure_train(server_round, arrays, config, view))

    def aggregate(self, server_round: int, accepted: list) -> ArrayRecord | None:
        """Flower's ``aggregate_train`` over the replies that passed validation."""
        arrays, _ = self.flower.aggregate_train(server_round, [a.message for a in accepted])
        if arrays is None:
            return None
        arrays = self.refuse_unsafe(server_round, self.as_model_dtypes(arrays))
        if arrays is not None:
            self.latest_global = record_to_state(arrays)
        return arrays

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
        reference = self.run.reference
        if all(state[k].dtype == dtype for k, (_, dtype) in reference.items()):
            return arrays
        return state_to_record(
            {k: state[k].astype(dtype, copy=False) for k, (_, dtype) in reference.items()}
        )

    def finish(self, arrays: ArrayRecord) -> None:
        """The run's last global model (new clients and a saved run get it)."""
        self.final_global = arrays

    def summary(self) -> None:
        """Flower's own settings line."""
        self.flower.summary()

    def eval_payloads(self, arrays: ArrayRecord, rows: np.ndarray) -> list[ArrayRecord]:
        """Every client evaluates the current global model."""
        return [arrays] * len(rows)

    def onboard(self, new: QueryResult) -> Onboarding:
        """New clients get the final global model: a one-model method's zero-shot answer."""
        return Onboarding(None if self.final_global is None else [self.final_global] * len(new))

    def export(self) -> Export:
        """The global model, on a leading axis of one."""
        if self.final_global is None:
            return Export(None)
        state = record_to_state(self.final_global)
        return Export({k: np.asarray(v)[None] for k, v in state.items()})


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
