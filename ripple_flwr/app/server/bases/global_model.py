"""One global model kept in the strategy: the base of SCAFFOLD, FedDyn, Per-FedAvg and pFedMe.

None of these four is in Flower. Their server keeps state of its own between
rounds (SCAFFOLD's c, FedDyn's h) and their clients keep state in Flower's
``context.state`` (c_i, g_k, the personal model), so, like Ripple, the method
holds the global model, gives each round's payloads and folds the validated
replies in with its own rule (:meth:`GlobalModel.update`); the engine
(:class:`~ripple_flwr.app.server.engine.Engine`) runs the round.
"""

from __future__ import annotations

import copy
import logging
from abc import abstractmethod
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord

from ripple_flwr.aggregation.robust import unsafe_step
from ripple_flwr.app.protocol.messages import RULE, rule_record
from ripple_flwr.app.protocol.records import state_to_record
from ripple_flwr.app.server.replies.validation import Accepted
from ripple_flwr.app.server.resume.plain import field_values, set_fields
from ripple_flwr.app.server.roster.query import QueryResult
from ripple_flwr.methods.api import Export, Method, Onboarding, declared_fields
from ripple_flwr.settings import RunSettings

log = logging.getLogger("flwr.ripple")


def is_float(value: np.ndarray) -> bool:
    return np.issubdtype(np.asarray(value).dtype, np.inexact)


def stacked_mean(
    accepted: list[Accepted], key: str, weights: np.ndarray | None = None
) -> np.ndarray:
    """Mean (or ``weights``-weighted mean) over the replies of one tensor, in float64."""
    stack = np.stack([np.asarray(a.state[key], dtype=np.float64) for a in accepted])
    if weights is None:
        return stack.mean(axis=0)
    return np.tensordot(weights / weights.sum(), stack, axes=1)


class GlobalModel(Method):
    """A global model in the strategy; every sampled client receives it, every client is
    evaluated with it (its client rule may personalise it first), new clients get it.

    Each training message also carries a ConfigRecord ``rule`` with
    ``returning``: whether a training reply of this client was used before
    (an error reply does not count: the client may have failed before keeping
    any state), so its rule can tell a node that lost its state from one that
    never had any.
    """

    state_fields = ("global_state", "trained_count", "state_lost")
    run: Any = None  # the engine, set when it takes the method

    def __init__(self, settings: RunSettings, initial_state: dict[str, np.ndarray]) -> None:
        self.settings = settings
        self.global_state = {k: np.array(v) for k, v in initial_state.items()}
        self.trained_count: dict[int, int] = {}  # row -> training replies received
        self.state_lost: list[dict[str, int]] = []

    def state(self) -> dict[str, Any]:
        """The saved fields (GlobalModel's, then the method's own), by name."""
        return field_values(self)

    def restore(self, fields: dict[str, Any]) -> None:
        """Put back checked fields (:func:`~.state.restore.restored_fields`)."""
        set_fields(self, fields)

    @property
    def float_keys(self) -> list[str]:
        return [k for k, v in self.global_state.items() if is_float(v)]

    def zeros_like_floats(self) -> dict[str, np.ndarray]:
        return {k: np.zeros_like(self.global_state[k]) for k in self.float_keys}

    def global_record(self) -> ArrayRecord:
        return state_to_record(self.global_state)

    # -- round halves ------------------------------------------------------------------------
    def train_payloads(self, rows: np.ndarray, arrays: ArrayRecord) -> list[ArrayRecord]:
        record = self.global_record()  # one record, the same bytes for every client
        return [record] * len(rows)

    def extra_train_records(self, rows: np.ndarray) -> list[dict[str, ArrayRecord | ConfigRecord]]:
        return [{RULE: rule_record(self.trained_count.get(int(row), 0) > 0)} for row in rows]

    def aggregate(self, server_round: int, accepted: list[Accepted]) -> ArrayRecord | None:
        """Fold the replies in with :meth:`update`, unless the new model is not a sane step.

        A refused aggregate (non-finite, or a norm above 10 x the old one) leaves
        the global model *and* the method's own server state (SCAFFOLD's c,
        FedDyn's h) as they were; the refusal is logged and recorded in the round.
        """
        if not accepted:
            return None
        self.check_client_state(server_round, accepted)
        own = {name: copy.deepcopy(getattr(self, name)) for name in self.method_state()}
        new = self.update(accepted)
        # The model's own dtypes (float64 arithmetic must not double the bytes sent).
        candidate = {
            k: np.asarray(new[k]).astype(self.global_state[k].dtype, copy=False)
            for k in self.global_state
        }
        reason = unsafe_step(self.global_state, candidate)
        if reason is not None:
            for name, value in own.items():
                setattr(self, name, value)
            log.error(
                "round %d: refused the aggregate of partitions %s (%s); the global model and "
                "the server state stay",
                server_round,
                sorted(self.run.clients.partition_ids[a.row] for a in accepted),
                reason,
            )
            self.run.refuse(reason)
            return None
        for a in accepted:
            self.trained_count[a.row] = self.trained_count.get(a.row, 0) + 1
        self.global_state = candidate
        return self.global_record()

    @classmethod
    def method_state(cls) -> list[str]:
        """The state fields the method adds to GlobalModel's (what :meth:`update` may change)."""
        base = set(GlobalModel.state_fields)
        return [name for name in declared_fields(cls) if name not in base]

    def check_client_state(self, server_round: int, accepted: list[Accepted]) -> None:
        """Record clients whose state has seen fewer trainings than they were sent.

        Clients of stateful rules report ``state-trained`` (how many trainings
        their ``context.state`` has seen before this one); fewer than the
        replies the server used before means the node lost its state (a
        restarted SuperNode): it started again from zero, which is allowed, and
        recorded. (A reply the server dropped still counted on the client, so
        it can only make the client's count larger, never raise a false alarm.)
        """
        for a in accepted:
            if "state-trained" not in a.metrics:
                continue
            before = self.trained_count.get(a.row, 0)
            seen = int(a.metrics["state-trained"])
            if seen < before:
                pid = self.run.clients.partition_ids[a.row]
                log.warning(
                    "round %d: partition %d's state has seen %d of its %d trainings: it lost "
                    "its state and started again from zero",
                    server_round,
                    pid,
                    seen,
                    before,
                )
                self.state_lost.append(
                    {"round": server_round, "partition": pid, "seen": seen, "used": before}
                )

    def run_record(self, rec: dict[str, Any]) -> dict[str, Any]:
        rec["client_state"] = {"lost": self.state_lost}
        return rec

    @abstractmethod
    def update(self, accepted: list[Accepted]) -> dict[str, np.ndarray]:
        """The new global state from this round's validated replies (any float dtype)."""

    def non_float_from(self, accepted: list[Accepted]) -> dict[str, np.ndarray]:
        """Integer buffers (BatchNorm's counters) are taken from the first reply."""
        return {k: accepted[0].state[k] for k in self.global_state if k not in self.float_keys}

    # -- evaluation, onboarding, saved runs --------------------------------------------------
    def eval_payloads(self, arrays: ArrayRecord, rows: np.ndarray) -> list[ArrayRecord]:
        """Every client gets the global model (its rule may personalise it)."""
        return [self.global_record()] * len(rows)

    def onboard(self, new: QueryResult) -> Onboarding:
        """New clients get the global model."""
        return Onboarding([self.global_record()] * len(new))

    def export(self) -> Export:
        """The global model, on a leading axis of one."""
        return Export({k: np.asarray(v)[None] for k, v in self.global_state.items()})

    @property
    def num_models(self) -> int:
        return 1
