"""Several candidate models in one message: the wire layout (both sides read it here).

Candidate 0 is the message's usual ``arrays`` record, candidate i >= 1 is
``candidate-<i>``; the reply's metrics carry ``chosen`` (the index) and
``candidate-losses``. Every candidate travels as a full model, so the bytes counted per
message are K models. The client's choice is :mod:`ripple_flwr.app.client.candidates`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from flwr.app import ArrayRecord

from ripple_flwr.io.payload import arrayrecord_nbytes

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
