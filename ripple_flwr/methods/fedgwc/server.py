"""FedGWC (Licciardi et al., ICML 2025): clusters split by the Gaussian-weighted interplay of
the clients' losses.

Following the authors' code (``davedleo/FedGWC``, ``agents/servers.py`` and
``agents/clients.py``, read at ``24d0716``; the arithmetic in :mod:`.interactions`):

1. **One cluster first.** Every client starts in cluster 0; each cluster model is the
   example-weighted mean of its sampled members' returned models (FedAvg per cluster).
2. **Rewards.** Every trained client reports its steps' batch losses (``client.py``); the
   sampled members of a cluster get Gaussian rewards from them, and the cluster's
   interaction matrix W (its clients x its clients, starting at 1/N^2) moves its sampled
   block towards the normalised rewards at rate ``m_c / K_c``.
3. **Convergence.** The moving mean of W's squared change (rate ``m_c / K_c``, starting at
   1) must stay below ``fedgwc-eps`` for as many rounds in a row as a member needs on
   average to be sampled once; only clusters larger than ``clients-per-round`` are watched.
4. **Split.** Then the affinity P of W's columns is clustered spectrally into 2 ..
   min(K_c // m, 4) parts; the best by the Davies-Bouldin index splits the cluster if its
   score is below ``fedgwc-max-score`` (1.0). Children copy the parent model and their block
   of W, and start their watch again; an unsplit cluster starts its watch again too.

Differences from the authors' code, each for a reason (docs/baselines.md#fedgwc): their
server samples ``m`` clients inside every cluster each round (a round then costs K times
FedAvg's); here the run's sampler draws ``clients-per-round`` from the whole federation,
as for every method, so ``m_c`` is the members that fell in the sample, and the watch lasts
``round(N / clients-per-round)`` rounds (the authors' ``round(K_c / m)`` under their
per-cluster sample: either is the rounds a member waits, on average, to be sampled once). A
client reports the losses of its first ``fedgwc-steps`` steps (the authors run a fixed 7
steps; here clients train their usual epoch). New clients are not in the authors' code;
they get the cluster model of lowest loss on their own training split, as the other
clustered baselines. The Wasserstein Adjusted Score of the paper is not in the authors'
code and is not computed here.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ripple_flwr.aggregation.clustering import State
from ripple_flwr.app.server.bases.clustered import ClusterModels
from ripple_flwr.app.server.replies.validation import Accepted
from ripple_flwr.app.server.roster.query import QueryResult
from ripple_flwr.methods.fedgwc.interactions import (
    affinity,
    best_split,
    gaussian_rewards,
    moving_mse,
    update_interactions,
    watch_rounds,
)
from ripple_flwr.methods.fedgwc.spec import (
    FEDGWC_EPS,
    FEDGWC_GAMMA,
    FEDGWC_MAX_SCORE,
    FEDGWC_STEPS,
    LOSS_VALUES,
    STEP_LOSSES,
)
from ripple_flwr.methods.spec import MethodInputs, MethodSpec
from ripple_flwr.settings import RunSettings

log = logging.getLogger("flwr.ripple")

MAX_LOSS = 1e4  # a batch's cross-entropy beyond this is no honest client's


class FedGWCMethod(ClusterModels):
    """FedGWC over the app's clients.

    Parameters
    ----------
    settings : RunSettings
        Its options ``fedgwc-steps``, ``fedgwc-gamma``, ``fedgwc-eps``, ``fedgwc-max-score``.
    initial_state : the one initial model.
    truth : the true mixtures pi* by partition id, for the ARI of the clusters.
    """

    # Per cluster (by model index): its members' rows, W, the moving mean, the watch.
    state_fields = ("members", "interactions", "mse", "patience", "splits")

    def __init__(
        self, settings: RunSettings, initial_state: State, truth: np.ndarray | None = None
    ) -> None:
        super().__init__(settings, [initial_state], truth)
        self.steps = FEDGWC_STEPS.of(settings)
        self.extra_reply_references = {
            STEP_LOSSES: {LOSS_VALUES: ((self.steps,), np.dtype(np.float64))}
        }
        self.members: list[np.ndarray] = []
        self.interactions: list[np.ndarray] = []
        self.mse: list[float] = []
        self.patience: list[int] = []
        self.splits: list[dict[str, Any]] = []  # every split tried, for the record

    # -- who belongs where -------------------------------------------------------------------
    def setup(self, clients: QueryResult) -> None:
        super().setup(clients)
        n = len(clients)
        self.members = [np.arange(n, dtype=np.int64)]
        self.interactions = [np.full((n, n), 1.0 / max(n, 1) ** 2)]
        self.mse, self.patience = [1.0], [0]

    def add_clients(self, joined: QueryResult, server_round: int) -> None:
        """Late joiners join cluster 0 with the starting interaction 1/N^2 to everyone."""
        super().add_clients(joined, server_round)
        n0, total = len(self.members[0]), len(self.assignment)
        new = np.arange(total - len(joined), total, dtype=np.int64)
        self.assignment[new] = 0
        grown = np.full((n0 + len(new),) * 2, 1.0 / total**2)
        grown[:n0, :n0] = self.interactions[0]
        self.members[0] = np.concatenate([self.members[0], new])
        self.interactions[0] = grown

    def restore(self, fields: dict[str, Any]) -> None:
        super().restore(fields)
        self.members = [np.asarray(m, dtype=np.int64) for m in self.members]
        self.interactions = [np.asarray(w, dtype=np.float64) for w in self.interactions]
        sizes = {len(self.members), len(self.interactions), len(self.mse), len(self.patience)}
        if sizes != {self.num_models}:
            raise ValueError(
                f"the saved FedGWC clusters ({sorted(sizes)}) do not match its "
                f"{self.num_models} models; resume from a <results>.resume.npz this method "
                "wrote, or start the run again"
            )

    # -- a round -----------------------------------------------------------------------------
    def check_reply(self, a: Accepted) -> str | None:
        """The steps' losses must be cross-entropies: finite, >= 0 and not absurd."""
        v = a.extras[STEP_LOSSES][LOSS_VALUES]
        if not np.all((v >= 0) & (v <= MAX_LOSS)):
            return f"step losses outside [0, {MAX_LOSS:g}]"
        return None

    def aggregate(self, server_round: int, accepted: list[Accepted]) -> None:
        """FedAvg per cluster, then each watched cluster's interactions, and maybe a split."""
        labels = [self._sent_from[a.row] for a in accepted]
        self.average_into_clusters(server_round, accepted, labels)
        per_round = self.settings.training.clients_per_round
        watch = watch_rounds(len(self.assignment), per_round)
        for c in range(self.num_models):
            mine = [a for a, lab in zip(accepted, labels, strict=True) if lab == c]
            size = len(self.members[c])
            if size <= per_round or len(mine) < 2:
                continue
            pos = {int(r): i for i, r in enumerate(self.members[c])}
            at = np.array([pos[a.row] for a in mine], dtype=np.int64)
            losses = np.stack([a.extras[STEP_LOSSES][LOSS_VALUES] for a in mine])
            rewards = gaussian_rewards(losses, np.array([a.num_examples for a in mine]))
            rate = len(mine) / size
            change = update_interactions(self.interactions[c], at, rewards, rate)
            self.mse[c] = moving_mse(self.mse[c], change, rate)
            if self.mse[c] < FEDGWC_EPS.of(self.settings):
                self.patience[c] += 1
            else:
                self.patience[c] = 0
            if self.patience[c] >= watch:
                self.try_split(server_round, c)

    def try_split(self, server_round: int, c: int) -> None:
        """Spectral clustering of cluster ``c``'s affinity; children if it scores well."""
        s = self.settings
        p = affinity(self.interactions[c], FEDGWC_GAMMA.of(s))
        labels, tried = best_split(
            p, s.training.clients_per_round, s.training.seed, FEDGWC_MAX_SCORE.of(s)
        )
        event = {"round": server_round, "cluster": c, "size": len(self.members[c]), **tried}
        self.splits.append(event)
        self.mse[c], self.patience[c] = 1.0, 0
        if labels is None:
            return
        parts = [np.flatnonzero(labels == k) for k in range(int(labels.max()) + 1)]
        event["sizes"] = [len(q) for q in parts]
        models = list(self.models)
        parent, parent_w = self.members[c], self.interactions[c]
        for k, part in enumerate(parts):
            rows = parent[part]
            block = parent_w[np.ix_(part, part)].copy()
            target = c if k == 0 else len(models)
            if k:
                models.append(models[c])
                self.members.append(rows)
                self.interactions.append(block)
                self.mse.append(1.0)
                self.patience.append(0)
            else:
                self.members[c], self.interactions[c] = rows, block
            self.assignment[rows] = target
        self.set_models(models)
        log.info(
            "round %d: FedGWC split cluster %d (%d clients) into sizes %s (Davies-Bouldin %.3f)",
            server_round,
            c,
            event["size"],
            event["sizes"],
            tried["best"],
        )

    # -- results -----------------------------------------------------------------------------
    def run_record(self, rec: dict[str, Any]) -> dict[str, Any]:
        rec = super().run_record(rec)
        rec["fedgwc"] = {
            "splits": self.splits,
            "mse": [float(v) for v in self.mse],
            "patience": [int(v) for v in self.patience],
        }
        return rec


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = FedGWCMethod


def build(spec: MethodSpec, inputs: MethodInputs) -> FedGWCMethod:
    """One model, with the true mixtures for the final clusters' ARI."""
    return FedGWCMethod(inputs.settings, inputs.initial_state, truth=inputs.true_mixtures)
