"""The server's count of the clients' DP releases of their embedding, across resumed processes.

A client that runs its embedding through the DP mechanism twice has spent
(2 epsilon, 2 delta) by basic composition, not (epsilon, delta): the results
must say how often each client was asked. The count is by partition and is
saved with the roster, so a resumed run adds to the interrupted run's count
instead of starting from zero.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ReleaseLedger:
    """DP releases per partition, and how many DP queries were sent in all."""

    per_partition: dict[int, int] = field(default_factory=dict)
    # Every query that carried the mechanism: each may have cost its node one release, also
    # when its reply was lost or refused (then no partition is known to charge it to).
    requests: int = 0

    def count(self, asked: int, partitions: Iterable[int]) -> None:
        """``asked`` DP queries went out; the nodes of ``partitions`` answered with a release."""
        self.requests += int(asked)
        for p in partitions:
            self.per_partition[int(p)] = self.per_partition.get(int(p), 0) + 1

    def to_dict(self) -> dict[str, Any]:
        """As plain data, for the server checkpoint."""
        return {"per_partition": dict(self.per_partition), "requests": self.requests}

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> ReleaseLedger:
        """The inverse of :meth:`to_dict`."""
        per = {int(p): int(n) for p, n in saved["per_partition"].items()}
        return cls(per_partition=per, requests=int(saved["requests"]))

    @classmethod
    def of_saved_roster(cls, roster: dict[str, Any]) -> ReleaseLedger:
        """What a checkpoint written before this count existed implies.

        That server asked every node it knew exactly once (the query round or a
        late joiner's one query), so each saved client released once.
        """
        pids = list(roster["clients"]["partition_ids"]) + list(
            roster["new_clients"]["partition_ids"]
        )
        return cls({int(p): 1 for p in pids}, requests=len(roster["known_nodes"]))

    def record(self, epsilon: float, delta: float) -> dict[str, Any]:
        """For the results file: releases per client and the worst client's budget spent."""
        worst = max(self.per_partition.values(), default=0)
        return {
            "releases_per_client": {str(p): n for p, n in sorted(self.per_partition.items())},
            "max_releases_per_client": worst,
            # Basic composition: k releases at (epsilon, delta) cost at most (k eps, k delta).
            "epsilon_spent": worst * epsilon,
            "delta_spent": worst * delta,
            "release_requests": self.requests,
            "unattributed_requests": self.requests - sum(self.per_partition.values()),
        }
