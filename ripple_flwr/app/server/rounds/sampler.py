"""Who may be sampled and the seeded draw: :class:`Sampler`.

It owns the run's sampler generator (one key for every method, so a seed draws the same
rounds whichever method runs) and each client's count of training rounds failed in a row.
A client that failed ``max-failures`` rounds in a row is left out of sampling until it
answers an evaluation; a late joiner that takes over its partition starts afresh.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import numpy as np

from ripple_flwr.aggregation.mixing import uniform_sample
from ripple_flwr.app.server.rounds.accounting import ClientScore, Dropped
from ripple_flwr.settings import RunSettings

log = logging.getLogger("flwr.ripple")

SAMPLER_KEY = 0x5A4D  # SeedSequence key of the client sampler (same for every method)


class Sampler:
    """The seeded client sampler of a run and the failures that leave clients out of it.

    Parameters
    ----------
    settings
        The run's settings: ``seed``, ``clients-per-round`` and ``max-failures``.
    """

    def __init__(self, settings: RunSettings) -> None:
        self.settings = settings
        self.rng = np.random.default_rng(
            np.random.SeedSequence([settings.training.seed, SAMPLER_KEY])
        )
        self.failures: dict[int, int] = {}  # row -> training rounds failed in a row

    def restore(self, failures: dict[int, int]) -> None:
        """Continue the failure counts a resumed run saved (checked on load)."""
        self.failures = dict(failures)

    def rng_state(self) -> dict:
        """The generator's state, saved for resume."""
        return self.rng.bit_generator.state

    def restore_rng(self, state: dict) -> None:
        """Continue the draws a resumed run saved."""
        self.rng.bit_generator.state = state

    def active_rows(self, num_clients: int) -> np.ndarray:
        """Rows that may be sampled: not failed ``max-failures`` training rounds in a row."""
        limit = self.settings.robustness.max_failures
        usable = np.ones(num_clients, dtype=bool)
        usable[[r for r, n in self.failures.items() if n >= limit and r < num_clients]] = False
        return np.flatnonzero(usable).astype(np.int64)

    def round_size(self, available: int) -> int:
        """Clients per round, fewer when fewer are usable (a smaller round, not a failure)."""
        return min(self.settings.training.clients_per_round, available)

    def uniform(self, num_clients: int) -> np.ndarray:
        """Rows trained this round: uniform without replacement over the active rows."""
        active = self.active_rows(num_clients)
        if not len(active):
            return active
        return active[uniform_sample(len(active), self.round_size(len(active)), self.rng)]

    def failing_rows(self, num_clients: int) -> list[int]:
        """Rows that failed their last training round (a newcomer may take one over)."""
        return [r for r, n in self.failures.items() if n > 0 and r < num_clients]

    def forget(self, rows: Iterable[int]) -> None:
        """These rows start afresh (a newcomer took their partition over)."""
        for row in rows:
            self.failures.pop(row, None)

    def count_failures(
        self,
        server_round: int,
        answered: Iterable[int],
        dropped: Sequence[Dropped],
        row_of: dict[int, int],
    ) -> None:
        """Count training rounds each client failed in a row (no reply or a client error).

        ``answered`` are the rows whose replies were used; ``row_of`` maps the partition
        of each client sent a message this round to its row.
        """
        self.forget(answered)
        for d in dropped:
            if not (d.reason.startswith("no reply") or d.reason.startswith("client error")):
                continue  # a bad reply came back: the node is alive
            row = row_of[d.partition]
            self.failures[row] = self.failures.get(row, 0) + 1
            if self.failures[row] == self.settings.robustness.max_failures:
                log.warning(
                    "round %d: partition %d failed %d rounds in a row; left out of sampling "
                    "until it answers an evaluation",
                    server_round,
                    d.partition,
                    self.failures[row],
                )

    def readmit(
        self, server_round: int, scored: Sequence[ClientScore], row_of: dict[int, int]
    ) -> None:
        """A client left out of sampling that answers an evaluation is sampled again."""
        for c in scored:
            row = row_of[c.partition]
            if self.failures.get(row, 0) >= self.settings.robustness.max_failures:
                log.info(
                    "round %d: partition %d answers again; back in sampling",
                    server_round,
                    c.partition,
                )
            self.failures.pop(row, None)
