"""Several candidate models in one message; the client keeps the one with the lowest training loss.

IFCA's clients receive all K cluster models each round and train the one
that fits their own data best; the clustered baselines' new clients (and
the best-by-loss reference) choose their cluster model the same way. The
choice is made on the client's **training split** only: its test split,
which the reported accuracy comes from, never takes part.

Wire layout: candidate 0 is the message's usual ``arrays`` record,
candidate i >= 1 is ``candidate-<i>``; the reply's metrics carry ``chosen``
(the index) and ``candidate-losses``. Every candidate travels as a full
model, so the bytes counted per message are K models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from flwr.app import ArrayRecord

from ripple_flwr.runs.results import arrayrecord_nbytes
from ripple_flwr.training.loops import evaluate_states
from ripple_flwr.training.models import set_state

CANDIDATE_PREFIX = "candidate-"

Payload = ArrayRecord | Sequence[ArrayRecord]
"""What one client is sent: one model, or a list of candidates (the first is ``arrays``)."""


def payload_records(payload: Payload) -> dict[str, ArrayRecord]:
    """The message's ArrayRecords for one model or a list of candidates."""
    if isinstance(payload, ArrayRecord):
        return {"arrays": payload}
    payload = list(payload)
    if not payload:
        raise ValueError("a candidate list must hold at least one model")
    return {
        ("arrays" if i == 0 else f"{CANDIDATE_PREFIX}{i}"): record
        for i, record in enumerate(payload)
    }


def payload_size(payload: Payload) -> int:
    """How many models a payload carries."""
    return 1 if isinstance(payload, ArrayRecord) else len(payload)


def payload_nbytes(payload: Payload) -> int:
    """Bytes of every model a payload carries."""
    return sum(arrayrecord_nbytes(r) for r in payload_records(payload).values())


def split_candidates(
    records: Mapping[str, ArrayRecord],
) -> tuple[list[ArrayRecord], dict[str, ArrayRecord]]:
    """(candidates in index order, the message's other ArrayRecords).

    A message without ``candidate-*`` records has one candidate, ``arrays``.
    Indices must run 1..K-1 without gaps, else ``ValueError``.
    """
    others = {n: r for n, r in records.items() if n != "arrays"}
    extra = {n: r for n, r in others.items() if n.startswith(CANDIDATE_PREFIX)}
    for n in extra:
        others.pop(n)
    try:
        index = {int(n[len(CANDIDATE_PREFIX) :]): r for n, r in extra.items()}
    except ValueError:
        raise ValueError(f"candidate records must be named {CANDIDATE_PREFIX}<i>") from None
    if sorted(index) != list(range(1, len(index) + 1)):
        raise ValueError(f"candidate indices {sorted(index)} do not run 1..{len(index)}")
    return [records["arrays"], *(index[i] for i in sorted(index))], others


def lowest_loss(
    model: torch.nn.Module,
    states: Sequence[dict[str, np.ndarray]],
    x: np.ndarray,
    y: np.ndarray,
    device: str = "cpu",
) -> tuple[int, list[float]]:
    """Index of the state with the lowest mean cross-entropy on (x, y), and every loss.

    ``model`` is left holding the chosen state. Ties go to the lowest index.
    """
    if not len(states):
        raise ValueError("no candidate model to choose from")
    losses = [float(r["loss"]) for r in evaluate_states(model, states, x, y, device=device)]
    best = int(np.argmin(losses))
    if best != len(states) - 1:
        set_state(model, states[best])
    return best, losses
