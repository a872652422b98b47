"""A round's personalised evaluation, sent and scored: :class:`EvaluationRounds`.

Part of :class:`~ripple_flwr.app.server.strategies.core.base.AppStrategy` (a mixin
it is built from). Every client gets the model(s) it would receive on eval
rounds; the replies are scored in one place
(:func:`~ripple_flwr.app.server.strategies.core.replies.validation.collect_evaluations`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid

from ripple_flwr.app.protocol.candidates import payload_nbytes, payload_size
from ripple_flwr.app.server.strategies.core.evaluation.scoring import evaluate_messages, score_stats
from ripple_flwr.app.server.strategies.core.replies.validation import (
    collect_evaluations,
)
from ripple_flwr.app.server.strategies.core.rounds.accounting import EvaluationRecord

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


class EvaluationRounds:
    """Evaluates the clients for :class:`AppStrategy` (see its attributes): every client, or
    an ``eval-fraction`` sample of them (:func:`eval_sample`)."""

    def is_eval_round(self, server_round: int) -> bool:
        return (
            server_round % self.settings.evaluation.eval_every == 0
            or server_round == self.num_rounds
        )

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Each client of the round's sample gets the model it would receive, on eval rounds."""
        if not self.is_eval_round(server_round):
            return []
        s = self.settings
        rows = eval_sample(
            len(self.clients), s.evaluation.eval_fraction, s.training.seed, server_round
        )
        payloads = self.eval_payloads_of(arrays, rows)
        node_ids = [self.clients.node_ids[r] for r in rows.tolist()]
        messages = evaluate_messages(node_ids, payloads, server_round)
        self._eval_sent = list(zip(rows.tolist(), messages, strict=True))
        self._eval_candidates = {
            row: payload_size(p) for row, p in zip(rows.tolist(), payloads, strict=True)
        }
        self._eval = EvaluationRecord(
            round=server_round,
            bytes_down=sum(payload_nbytes(p) for p in payloads),
            expected=len(messages),
            population=len(self.clients),
        )
        self._eval_start = time.perf_counter()
        return messages

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Sample-weighted mean and spread of the clients' personalised accuracies."""
        if not self._eval_sent:
            return None
        pending = {str(m.metadata.message_id): row for row, m in self._eval_sent}
        self._eval_sent = []
        per_client, failed = collect_evaluations(
            replies,
            pending,
            self.clients.partition_ids,
            self.clients.known_tests(),
            self.settings.robustness.round_timeout,
            server_round,
            num_candidates=self._eval_candidates,
        )
        self.scored(server_round, per_client)
        rec = self._eval
        rec.wall_seconds = time.perf_counter() - self._eval_start
        rec.accuracy, rec.loss = score_stats(per_client), score_stats(per_client, "loss")
        rec.clients, rec.failed = per_client, failed
        rec.scored = len(per_client)
        rec.coverage = rec.scored / rec.expected if rec.expected else 0.0
        self.ledger.add_evaluation(rec)
        self._readmit(server_round, per_client)
        log.info(
            "round %d/%d: personalised accuracy %.4f (weighted mean over %d of %d clients asked, "
            "of %d; coverage %.2f; std %.4f, min %.4f)",
            server_round,
            self.num_rounds,
            rec.accuracy["weighted_mean"],
            rec.scored,
            rec.expected,
            rec.population,
            rec.coverage,
            rec.accuracy["std"],
            rec.accuracy["min"],
        )
        for f in failed:
            log.warning(
                "round %d: partition %d not scored: %s", server_round, f.partition, f.reason
            )
        if not per_client:
            return None
        return MetricRecord(
            {
                "accuracy": rec.accuracy["weighted_mean"],
                "accuracy-std": rec.accuracy["std"],
                "loss": rec.loss["weighted_mean"],
                "num-examples": sum(c.num_examples for c in per_client),
            }
        )

    def scored(self, server_round: int, per_client: list) -> None:
        """Read an evaluation's scores (IFCA: which model each client chose); nothing by default."""
        return None

    def _readmit(self, server_round: int, scored: list) -> None:
        """A client left out of sampling that answers an evaluation is sampled again."""
        row_of = {p: r for r, p in enumerate(self.clients.partition_ids)}
        for c in scored:
            row = row_of[c.partition]
            if self.failures.get(row, 0) >= self.settings.robustness.max_failures:
                log.info(
                    "round %d: partition %d answers again; back in sampling",
                    server_round,
                    c.partition,
                )
            self.failures.pop(row, None)
