"""The app's one round loop: Flower's ``Strategy.start`` loop, counting from the first round
this process runs (after a resume, the round after the saved one).

Flower's own loop always counts from 1, so a resumed run would hand every hook a
round number off by the rounds already done. Here the round a hook receives is
the run's round, in every hook, from one place. The engine supplies only
Flower's four hooks; the loop is Flower's (``Result``, the same calls in the
same order, the same metrics kept), plus the run's checkpoint after each round's
evaluation (also when that evaluation raised, so a crash keeps the last round).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

log = logging.getLogger("flwr.ripple")


def run_rounds(
    engine: Strategy,
    grid: Grid,
    arrays: ArrayRecord,
    first_round: int,
    num_rounds: int,
    timeout: float,
    train_config: ConfigRecord,
    evaluate_config: ConfigRecord,
    checkpoint: Callable[[int], None] | None = None,
) -> Result:
    """Rounds ``first_round`` .. ``num_rounds``: train, aggregate, evaluate, aggregate,
    then ``checkpoint(round)`` (the engine decides whether this round is saved)."""
    result = Result()
    t_start = time.time()
    for rnd in range(first_round, num_rounds + 1):
        log.info("[ROUND %s/%s]", rnd, num_rounds)
        replies = grid.send_and_receive(
            messages=engine.configure_train(rnd, arrays, train_config, grid), timeout=timeout
        )
        agg_arrays, train_metrics = engine.aggregate_train(rnd, replies)
        if agg_arrays is not None:
            result.arrays = arrays = agg_arrays
        if train_metrics is not None:
            result.train_metrics_clientapp[rnd] = train_metrics
        replies = grid.send_and_receive(
            messages=engine.configure_evaluate(rnd, arrays, evaluate_config, grid),
            timeout=timeout,
        )
        try:
            eval_metrics = engine.aggregate_evaluate(rnd, replies)
        finally:
            if checkpoint is not None:
                checkpoint(rnd)
        if eval_metrics is not None:
            result.evaluate_metrics_clientapp[rnd] = eval_metrics
    log.info("Strategy execution finished in %.2fs", time.time() - t_start)
    return result
