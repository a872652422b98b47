"""What a run records, as typed records: one per training round, one per evaluation.

The results file is made of these (``to_dict``), so its keys are defined in
one place; the strategies only fill them in.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Dropped:
    """A client whose reply was not used, and why."""

    partition: int
    reason: str


@dataclass
class ClientScore:
    """One client's personalised evaluation."""

    partition: int
    accuracy: float
    loss: float
    num_examples: int
    chosen: int | None = None  # the candidate kept (lowest training-split loss), if several


@dataclass
class RoundRecord:
    """One training round: who was sampled, what moved over the wire, what it cost."""

    round: int
    sampled: list[int]
    bytes_down: int = 0
    bytes_up: int = 0
    server_seconds: float = 0.0
    wall_seconds: float = 0.0
    received: int = 0
    dropped: list[Dropped] = field(default_factory=list)
    train_loss: float = math.nan
    num_examples: int = 0
    refused: str | None = None  # why this round's aggregate was refused (the model stayed)


@dataclass
class EvaluationRecord:
    """One personalised evaluation of every client, or of an ``eval-fraction`` sample."""

    round: int
    bytes_down: int = 0
    wall_seconds: float = 0.0
    expected: int = 0  # clients sent a model to score (the sample, under eval-fraction < 1)
    population: int = 0  # training clients at the time (expected / population: the sample)
    scored: int = 0  # clients whose score counts (the headline covers these)
    coverage: float = 0.0  # scored / expected
    accuracy: dict[str, float] = field(default_factory=dict)
    loss: dict[str, float] = field(default_factory=dict)
    clients: list[ClientScore] = field(default_factory=list)
    failed: list[Dropped] = field(default_factory=list)


@dataclass
class Ledger:
    """Every round and evaluation of a run, and where the time went."""

    rounds: list[RoundRecord] = field(default_factory=list)
    evaluations: list[EvaluationRecord] = field(default_factory=list)
    query_seconds: float = 0.0
    round_seconds: float = 0.0
    evaluation_seconds: float = 0.0

    def add_round(self, record: RoundRecord) -> None:
        self.rounds.append(record)
        self.round_seconds += record.wall_seconds

    def add_evaluation(self, record: EvaluationRecord) -> None:
        self.evaluations.append(record)
        self.evaluation_seconds += record.wall_seconds

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Ledger:
        """The ledger :meth:`to_dict` described (a resumed run continues it)."""
        rounds = [
            RoundRecord(**{**r, "dropped": [Dropped(**x) for x in r["dropped"]]})
            for r in d["rounds"]
        ]
        evaluations = [
            EvaluationRecord(
                **{
                    **e,
                    "clients": [ClientScore(**c) for c in e["clients"]],
                    "failed": [Dropped(**x) for x in e["failed"]],
                }
            )
            for e in d["evaluations"]
        ]
        t = d["timings"]
        return cls(rounds, evaluations, t["query"], t["rounds"], t["evaluation"])

    def to_dict(self) -> dict[str, Any]:
        """The results file's ``rounds``, ``evaluations`` and ``timings``."""
        return {
            "rounds": [asdict(r) for r in self.rounds],
            "evaluations": [asdict(e) for e in self.evaluations],
            "timings": {
                "query": self.query_seconds,
                "rounds": self.round_seconds,
                "evaluation": self.evaluation_seconds,
            },
        }
