"""Local-only training: every client trains alone, the floor any federated method must beat.

A client trains its own model only in the rounds where the run's seeded
sampler picks it, so it gets exactly the local steps it would get in the
federation; messages go through the same app, so bytes are counted alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import ArrayRecord

from ripple_flwr.app.protocol.records import states_to_records
from ripple_flwr.app.server.replies.validation import Accepted
from ripple_flwr.app.server.resume.plain import field_values, set_fields
from ripple_flwr.app.server.roster.query import QueryResult
from ripple_flwr.methods.api import Method
from ripple_flwr.settings import RunSettings


class LocalOnlyMethod(Method):
    """One model per client, never shared; all start from the same initialisation.

    Parameters
    ----------
    settings : RunSettings
        The run (clients per round, seed, eval-every, ...).
    initial_state : dict[str, ndarray]
        The initial model every client starts from.
    """

    state_fields = ("states",)
    run: Any = None  # the engine, set when it takes the method

    def __init__(self, settings: RunSettings, initial_state: dict[str, np.ndarray]) -> None:
        self.settings = settings
        self.initial_state = {k: np.array(v) for k, v in initial_state.items()}
        self.states: list[dict[str, np.ndarray]] = []

    def setup(self, clients: QueryResult) -> None:
        self.states = [self.initial_state] * len(clients)  # copy-on-write: replaced, never edited

    def state(self) -> dict[str, Any]:
        return field_values(self)

    def restore(self, fields: dict[str, Any]) -> None:
        set_fields(self, fields)

    def add_clients(self, joined: QueryResult, server_round: int) -> None:
        self.states += [self.initial_state] * len(joined)

    def train_payloads(self, rows: np.ndarray, arrays: ArrayRecord) -> list[ArrayRecord]:
        return states_to_records([self.states[int(r)] for r in rows])

    def aggregate(self, server_round: int, accepted: list[Accepted]) -> ArrayRecord | None:
        for a in accepted:
            self.states[a.row] = a.state
        return None

    def eval_payloads(self, arrays: ArrayRecord, rows: np.ndarray) -> list[ArrayRecord]:
        """Only the sampled clients' own models are serialised."""
        return states_to_records([self.states[r] for r in rows.tolist()])

    @property
    def num_models(self) -> int:
        """One model per client."""
        return len(self.states)


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = LocalOnlyMethod
