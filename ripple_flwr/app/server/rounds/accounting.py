"""What a run records, as typed records: one per training round, one per evaluation.

The results file is made of these (``to_dict``), so its keys are defined in
one place; the strategies only fill them in.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

log = logging.getLogger("flwr.ripple")


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


class RoundBook:
    """The run's :class:`Ledger` and the training round being recorded in it.

    A round opens when its clients are drawn (:meth:`open`), is charged what goes over the
    wire (:meth:`sent`, :meth:`received`, :meth:`add_bytes`) and what happened to its
    replies (:meth:`drop`, :meth:`refuse`), and closes into the ledger (:meth:`close`).
    """

    def __init__(self, ledger: Ledger | None = None) -> None:
        self.ledger = Ledger() if ledger is None else ledger
        self._open: RoundRecord | None = None
        self._start = 0.0
        self._messages = 0

    def open(self, server_round: int) -> None:
        """A training round begins (its server time counts from here)."""
        self._start = time.perf_counter()
        self._messages = 0
        self._open = RoundRecord(round=server_round, sampled=[])

    def sampled(self, partitions: list[int]) -> None:
        """The round's clients were drawn (partition ids, in row order)."""
        self._open.sampled = partitions

    def sent(self, bytes_down: int, messages: int) -> None:
        """The round's training messages are built: their bytes and the server time so far."""
        self._open.bytes_down += bytes_down
        self._open.server_seconds = time.perf_counter() - self._start
        self._messages = messages

    def received(self, bytes_up: int) -> None:
        """The round's replies came back (every one, used or not)."""
        self._open.bytes_up += bytes_up

    def add_bytes(self, down: int, up: int) -> None:
        """Bytes of a side exchange (FLUX's descriptor round) charged to this round."""
        self._open.bytes_down += down
        self._open.bytes_up += up

    def drop(self, dropped: list[Dropped]) -> None:
        """The replies not used this round, and why (by partition)."""
        self._open.dropped = dropped

    def refuse(self, reason: str) -> None:
        """The round's aggregate was refused: the model stays as it was."""
        self._open.refused = reason

    def close(
        self, losses: list[tuple[float, int]], server_seconds: float, num_rounds: int
    ) -> RoundRecord:
        """Close the round into the ledger and log it.

        ``losses`` are the used replies' (train loss, examples); the round's loss is their
        example-weighted mean over the finite ones.
        """
        rec = self._open
        rec.server_seconds += server_seconds
        rec.wall_seconds = time.perf_counter() - self._start
        rec.received = len(losses)
        rec.num_examples = sum(n for _, n in losses)
        finite = [(v, n) for v, n in losses if math.isfinite(v)]
        if finite:
            rec.train_loss = sum(v * n for v, n in finite) / sum(n for _, n in finite)
        self.ledger.add_round(rec)
        log.info(
            "round %d/%d: %d/%d replies used, train loss %.4f, %.2f MB down, %.2f MB up",
            rec.round,
            num_rounds,
            len(losses),
            self._messages,
            rec.train_loss,
            rec.bytes_down / 2**20,
            rec.bytes_up / 2**20,
        )
        return rec

    def add_evaluation(self, record: EvaluationRecord) -> None:
        """An evaluation's record joins the ledger."""
        self.ledger.add_evaluation(record)

    def restore(self, saved: dict[str, Any]) -> None:
        """Continue the ledger a resumed run saved (:meth:`Ledger.to_dict`)."""
        self.ledger = Ledger.from_dict(saved)
