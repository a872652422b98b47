"""IFCA (Ghosh et al., 2020): every sampled client receives all K models and trains the best one.

A client computes the loss of each of the K cluster models on its own
training split, trains the lowest-loss one and returns it with its choice;
each cluster model becomes the example-weighted mean of the models trained
from it (IFCA's model-averaging variant). Download is K models per client
per round, K x FedAvg's, and it is counted so. Evaluation sends all K
models too: each client is scored with the one it would choose, by
training-split loss.

Initialisation. The K models start from K distinct seeded initialisations
(one identical start would make every client choose model 0 forever). A
draw can still collapse: most clients prefer the same random model, and the
others never win a client. The original code (jichan3751/ifca,
``find_good_initializer``) therefore draws the K initialisations again,
evaluates which model each participating client would choose (lowest
training loss), and repeats until every model is chosen by at least a share
th of them (th = 0.1 at K = 4, 0.35 at K = 2: th x K = 0.4 and 0.7), with
no cap on the draws. Here, before round 1 (not on resume), each draw is sent
to **every** training client, not to one round's sample: with 10 of 100
clients a round, a share of 0.1 would be decided by a single client. A
model must be chosen by at least ``ifca-init-balance`` / K of the clients
that answered (the original's value at K = 4 is 0.4; the default 0 keeps
the first draw: on the paper's protocol, seed 0, 100 rounds, the re-draw took
4 draws and 4.8 GB and ended at 79.8% with one model holding 56 clients,
against 80.0% from the first draw), for at most ``ifca-init-draws`` draws, after which the most
balanced draw is kept and a warning logged. Draw d is the seeded
initialisations d x K .. d x K + K - 1 (draw 0: the run's initial model and
initialisations 1 .. K - 1). Every draw's cost (K models to every client) is
recorded in ``assignment.init_draws``; the kept draw's choices are the
initial assignment.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from flwr.app import ArrayRecord
from flwr.serverapp import Grid

from ripple_flwr.aggregation.clustering import State, redraw_until_balanced, smallest_share
from ripple_flwr.app.protocol.candidates import payload_nbytes
from ripple_flwr.app.protocol.messages import CHOSEN
from ripple_flwr.app.protocol.records import states_to_records
from ripple_flwr.app.server.bases.clustered import ClusterModels
from ripple_flwr.app.server.evaluation.scoring import evaluate_on
from ripple_flwr.app.server.replies.fields import REPLY_ERRORS
from ripple_flwr.app.server.replies.validation import Accepted, check_choice
from ripple_flwr.methods.ifca.spec import IFCA_INIT_BALANCE, IFCA_INIT_DRAWS
from ripple_flwr.methods.spec import MethodInputs, MethodSpec
from ripple_flwr.settings import RunSettings

log = logging.getLogger("flwr.ripple")


class IFCAMethod(ClusterModels):
    """IFCA with K = ``num-components`` models.

    Parameters
    ----------
    settings : RunSettings
        Its options ``ifca-init-balance``, ``ifca-init-draws``.
    models : the K initial cluster models (distinct initialisations): draw 0.
    truth : the true mixtures pi* by partition id, for the ARI of the final choices.
    draw : d -> the K initial models of draw d (d >= 1) for the re-draw; without it
        only draw 0 is evaluated.
    """

    state_fields = ("init_draws",)  # and ClusterModels' (models, assignment, ...)

    def __init__(
        self,
        settings: RunSettings,
        models: list[State],
        truth: np.ndarray | None = None,
        draw: Callable[[int], list[State]] | None = None,
    ) -> None:
        super().__init__(settings, models, truth, min_models=2)
        self.draw = draw
        # One entry per draw of the initial models: its counts per model and what it cost.
        self.init_draws: list[dict[str, Any]] = []

    # -- the initial models ------------------------------------------------------------------
    def _models_of_draw(self, d: int, first: list[State]) -> list[State]:
        if d == 0:
            return first
        models = list(self.draw(d))
        if len(models) != len(first):
            raise ValueError(f"draw {d} has {len(models)} models, expected {len(first)}")
        return models

    def before_training(self, grid: Grid, timeout: float) -> None:
        """Draw the K initial models again until every one is some clients' choice."""
        balance = IFCA_INIT_BALANCE.of(self.settings)
        if balance <= 0 or not len(self.run.clients):
            return
        k, first = self.num_models, list(self.models)
        max_draws = IFCA_INIT_DRAWS.of(self.settings) if self.draw is not None else 1
        picks: list[dict[int, int]] = []  # per draw: row -> the model it chose

        def choose(models: list[State]) -> list[int]:
            picks.append(self._choices(grid, timeout, models))
            return list(picks[-1].values())

        kept, counts = redraw_until_balanced(
            lambda d: self._models_of_draw(d, first), choose, k, balance / k, max_draws
        )
        for rec, c in zip(self.init_draws, counts, strict=True):
            rec["counts"], rec["kept"] = c, rec["draw"] == kept
        self.set_models(self._models_of_draw(kept, first))
        for row, c in picks[kept].items():
            self.assignment[row] = c
        share = smallest_share(counts[kept])
        if share < balance / k - 1e-12:
            log.warning(
                "IFCA: no balanced initial models in %d draw(s); kept draw %d, whose "
                "least-chosen model has %.2f of the clients (ifca-init-balance=%g wants %.2f)",
                len(counts),
                kept,
                share,
                balance,
                balance / k,
            )
        else:
            log.info("IFCA: initial models of draw %d kept (counts %s)", kept, counts[kept])

    def _choices(self, grid: Grid, timeout: float, models: list[State]) -> dict[int, int]:
        """Every training client's choice among ``models`` (lowest training-split loss)."""
        t0 = time.perf_counter()
        records = states_to_records(models)
        n = len(self.run.clients)
        per_client, failed = evaluate_on(grid, self.run.clients, [records] * n, 0, timeout)
        row_of = {p: r for r, p in enumerate(self.run.clients.partition_ids)}
        chosen = {row_of[c.partition]: int(c.chosen) for c in per_client if c.chosen is not None}
        self.init_draws.append(
            {
                "draw": len(self.init_draws),
                "answered": len(chosen),
                "failed": len(failed),
                "bytes_down": payload_nbytes(records) * n,
                "seconds": time.perf_counter() - t0,
            }
        )
        return chosen

    # -- training ----------------------------------------------------------------------------
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
        return int(a.metrics[CHOSEN])

    def update_origin(self, a: Accepted, sent: State) -> State:
        """A reply's update is measured from the model it says it chose."""
        return self.models[self.choice(a)]

    def aggregate(self, server_round: int, accepted: list[Accepted]) -> ArrayRecord | None:
        """theta_j = sum over clients that chose j of n_i theta_i / sum n_i."""
        labels = [self.choice(a) for a in accepted]
        for a, c in zip(accepted, labels, strict=True):
            self.assignment[a.row] = c
        self.average_into_clusters(server_round, accepted, labels)
        return None

    def eval_payloads(self, arrays: ArrayRecord, rows: np.ndarray) -> list[list[ArrayRecord]]:
        """All K models: each client is scored with its lowest training-loss one."""
        return [self.model_records()] * len(rows)

    def scored(self, server_round: int, per_client: list) -> None:
        """The models the clients chose in this evaluation are their assignment."""
        row_of = {p: r for r, p in enumerate(self.run.clients.partition_ids)}
        for c in per_client:
            if c.chosen is not None:
                self.assignment[row_of[c.partition]] = c.chosen

    # -- results -----------------------------------------------------------------------------
    def run_record(self, rec: dict[str, Any]) -> dict[str, Any]:
        rec = super().run_record(rec)
        rec["assignment"]["init_draws"] = self.init_draws
        rec["assignment"]["init_bytes_down"] = sum(d["bytes_down"] for d in self.init_draws)
        return rec


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = IFCAMethod


def build(spec: MethodSpec, inputs: MethodInputs) -> IFCAMethod:
    """K distinct seeded initial models (and the re-draws of ``ifca-init-balance``)."""
    k = inputs.settings.embedding.num_components
    return IFCAMethod(
        inputs.settings, inputs.initial_states(k), truth=inputs.true_mixtures, draw=inputs.draws(k)
    )
