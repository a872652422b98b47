"""A round's personalised evaluation, sent and scored: :class:`Evaluator`.

A collaborator of :class:`~ripple_flwr.app.server.engine.Engine`,
passed in through its constructor. On eval rounds every sampled client gets the
model(s) the method would give it; the replies are scored in one place
(:func:`~ripple_flwr.app.server.replies.validation.collect_evaluations`).
The evaluator names no method: the strategy supplies the payloads and reads the scores.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import numpy as np
from flwr.app import Message, MetricRecord

from ripple_flwr.app.protocol.candidates import Payload, payload_nbytes, payload_size
from ripple_flwr.app.protocol.messages import ACCURACY, LOSS, NUM_EXAMPLES
from ripple_flwr.app.server.evaluation.scoring import evaluate_messages, score_stats
from ripple_flwr.app.server.replies.validation import (
    collect_evaluations,
)
from ripple_flwr.app.server.roster.query import QueryResult
from ripple_flwr.app.server.rounds.accounting import EvaluationRecord
from ripple_flwr.settings import RunSettings

log = logging.getLogger("flwr.ripple")

_EVAL_SAMPLE_KEY = 0xE7A1  # SeedSequence key of the evaluation sample (apart from training's)


def eval_sample(num_clients: int, fraction: float, seed: int, server_round: int) -> np.ndarray:
    """The rows scored in the evaluation of ``server_round``: sorted, without repeats.

    ``fraction`` 1 takes every row (no draw). Otherwise ``round(fraction * n)``
    rows (at least one), drawn from a generator of the run's seed and the round
    alone: the same in every process and after a resume, a new sample each
    evaluation, and the training sampler's stream is not touched.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"eval fraction must be in (0, 1], got {fraction}")
    if fraction >= 1.0 or num_clients == 0:
        return np.arange(num_clients, dtype=np.int64)
    size = min(num_clients, max(1, round(fraction * num_clients)))
    rng = np.random.default_rng(np.random.SeedSequence([seed, _EVAL_SAMPLE_KEY, server_round]))
    return np.sort(rng.choice(num_clients, size=size, replace=False)).astype(np.int64)


class Evaluator:
    """Evaluates a run's clients: every client, or an ``eval-fraction`` sample of them
    (:func:`eval_sample`), every ``eval-every`` rounds and at the last.

    Parameters
    ----------
    settings
        The run's settings (its evaluation group, seed and round timeout).
    """

    def __init__(self, settings: RunSettings) -> None:
        self.settings = settings
        self._sent: list[tuple[int, Message]] = []  # (row, message) of this evaluation
        self._candidates: dict[int, int] = {}  # row -> models sent (the reply may pick one)
        self._record: EvaluationRecord | None = None
        self._start = 0.0

    def is_eval_round(self, server_round: int, num_rounds: int) -> bool:
        """Every ``eval-every`` rounds, and the run's last."""
        return server_round % self.settings.evaluation.eval_every == 0 or server_round == num_rounds

    def sample(self, num_clients: int, server_round: int) -> np.ndarray:
        """The rows scored this round (:func:`eval_sample`)."""
        s = self.settings
        return eval_sample(num_clients, s.evaluation.eval_fraction, s.training.seed, server_round)

    def send(
        self,
        server_round: int,
        rows: np.ndarray,
        clients: QueryResult,
        payloads: list[Payload],
    ) -> list[Message]:
        """The evaluation messages: row ``rows[i]`` gets ``payloads[i]``."""
        node_ids = [clients.node_ids[r] for r in rows.tolist()]
        messages = evaluate_messages(node_ids, payloads, server_round)
        self._sent = list(zip(rows.tolist(), messages, strict=True))
        self._candidates = {
            row: payload_size(p) for row, p in zip(rows.tolist(), payloads, strict=True)
        }
        self._record = EvaluationRecord(
            round=server_round,
            bytes_down=sum(payload_nbytes(p) for p in payloads),
            expected=len(messages),
            population=len(clients),
        )
        self._start = time.perf_counter()
        return messages

    def score(
        self, server_round: int, replies: Iterable[Message], clients: QueryResult, num_rounds: int
    ) -> EvaluationRecord | None:
        """The evaluation's record from its replies (``None``: nothing was sent this round).

        Accuracies are the sample-weighted mean and spread of the clients' personalised
        scores; a reply that fails the checks is a failed client, with its reason.
        """
        if not self._sent:
            return None
        pending = {str(m.metadata.message_id): row for row, m in self._sent}
        self._sent = []
        per_client, failed = collect_evaluations(
            replies,
            pending,
            clients.partition_ids,
            clients.known_tests(),
            self.settings.robustness.round_timeout,
            server_round,
            num_candidates=self._candidates,
        )
        rec = self._record
        rec.wall_seconds = time.perf_counter() - self._start
        rec.accuracy, rec.loss = score_stats(per_client), score_stats(per_client, "loss")
        rec.clients, rec.failed = per_client, failed
        rec.scored = len(per_client)
        rec.coverage = rec.scored / rec.expected if rec.expected else 0.0
        _log_evaluation(rec, num_rounds)
        return rec


def metrics_of(rec: EvaluationRecord) -> MetricRecord | None:
    """Flower's metrics of an evaluation (``None`` when no client was scored)."""
    if not rec.clients:
        return None
    return MetricRecord(
        {
            ACCURACY: rec.accuracy["weighted_mean"],
            "accuracy-std": rec.accuracy["std"],
            LOSS: rec.loss["weighted_mean"],
            NUM_EXAMPLES: sum(c.num_examples for c in rec.clients),
        }
    )


def _log_evaluation(rec: EvaluationRecord, num_rounds: int) -> None:
    log.info(
        "round %d/%d: personalised accuracy %.4f (weighted mean over %d of %d clients asked, "
        "of %d; coverage %.2f; std %.4f, min %.4f)",
        rec.round,
        num_rounds,
        rec.accuracy["weighted_mean"],
        rec.scored,
        rec.expected,
        rec.population,
        rec.coverage,
        rec.accuracy["std"],
        rec.accuracy["min"],
    )
    for f in rec.failed:
        log.warning("round %d: partition %d not scored: %s", rec.round, f.partition, f.reason)
