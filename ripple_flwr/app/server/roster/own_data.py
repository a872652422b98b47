"""Nodes that bring their own data: what their query replies must say, and their slots.

A node with its own files has no partition id: it reports the hash of the class
list it mapped its labels through and its image shape (both must be the run's),
an optional name and whether it is held out; the server gives it a free slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ripple_flwr.app.protocol.messages import (
    CLASSES_HASH,
    HELD_OUT,
    IMAGE_SHAPE,
    NAME,
    NAME_LIMIT,
    LocalIdentity,
)
from ripple_flwr.app.server.replies.fields import as_count, as_flag, as_text


@dataclass(frozen=True)
class LocalData:
    """What a node with its own data must report: the run's classes and image shape."""

    classes_hash: str
    image_shape: tuple[int, int, int]
    num_train: int  # training slots (num-partitions); held-out slots come after them


def check_local_info(info: LocalIdentity, local: LocalData) -> tuple[str, bool]:
    """A local node's name and held-out flag, after checking its classes and shape.

    ``info`` holds the fields as the node sent them (``None``: left out).
    """
    got = as_text(_or(info.classes_hash, ""), CLASSES_HASH, limit=64)
    if got != local.classes_hash:
        raise ValueError(
            f"node mapped its labels through another class list (hash {got!r}, the run's "
            f"{local.classes_hash!r})"
        )
    raw_shape = _or(info.image_shape, [])
    if not isinstance(raw_shape, list) or len(raw_shape) != 3:
        raise ValueError(f"image-shape must be three integers, got {raw_shape!r}"[:120])
    shape = tuple(as_count(v, IMAGE_SHAPE, high=1 << 16) for v in raw_shape)
    if shape != tuple(local.image_shape):
        raise ValueError(f"node's images are {shape}, the run's {tuple(local.image_shape)}")
    name = as_text(_or(info.name, ""), NAME, limit=NAME_LIMIT)
    return name, as_flag(_or(info.held_out, False), HELD_OUT)


def _or(raw: Any, default: Any) -> Any:
    return default if raw is None else raw


def assign_local(
    rows: dict[int, tuple],
    pending: list[tuple[str, int, bool, tuple]],
    local: LocalData,
    num_partitions: int,
    taken: set[int],
    rejected: dict[int, str],
) -> None:
    """Give nodes with their own data the free partition slots, in order of name then node id.

    Training nodes take the free slots below ``num-train``, held-out nodes the
    ones after; a node that finds no slot (or repeats another's name) is left out.
    """
    used = set(taken) | set(rows)
    names = set()
    for name, nid, held_out, row in sorted(pending, key=lambda p: (p[0], p[1])):
        if name and name in names:
            rejected[nid] = f"invalid query reply: node name {name!r} already taken"
            continue
        lo, hi = (local.num_train, num_partitions) if held_out else (0, local.num_train)
        free = next((p for p in range(lo, hi) if p not in used), None)
        if free is None:
            kind = "held-out" if held_out else "training"
            rejected[nid] = f"no {kind} slot left (all {hi - lo} taken)"
            continue
        used.add(free)
        names.add(name)
        rows[free] = row
