"""Datasets with natural clients (GLDv2's photographers): one client per group of rows.

``dataset.groups`` gives each row's user (0..U-1, in the order the loader numbered
them) or -1 for the server's rows; D_aux comes from the server's rows only.
:func:`~ripple_flwr.data.federation.natural_federation` builds the run's federation
from :func:`natural_clients`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ripple_flwr.data.base import ImageDataset
from ripple_flwr.data.partition import server_aux_split


def natural_aux(
    dataset: ImageDataset, cluster: np.ndarray, aux_size: int, label_kind: str, seed: int
) -> np.ndarray:
    """D_aux from the server's rows (group -1), balanced over the cluster labels."""
    assert dataset.groups is not None
    server = np.flatnonzero(np.asarray(dataset.groups) == -1)
    if not len(server):
        raise ValueError(
            f"{dataset.name!r} has no server rows (group -1) to draw D_aux from; its natural "
            "split keeps every user's rows for that user"
        )
    labels = cluster[server]
    num_labels = len(np.unique(labels))
    if not num_labels <= aux_size <= len(server):
        raise ValueError(
            f"aux_size must be in [{num_labels}, {len(server)}] for {dataset.name!r}: in its "
            f"natural split D_aux comes from the {len(server)} server rows (group -1), which "
            f"hold {num_labels} {label_kind} labels (one row per label at least); got {aux_size}"
        )
    if aux_size == len(server):
        return server
    aux, _ = server_aux_split(labels, aux_size, seed)
    return server[aux]


def _natural_groups(dataset: ImageDataset, cluster: np.ndarray) -> np.ndarray:
    """``dataset.groups`` checked: one integer id >= -1 per row."""
    groups = np.asarray(dataset.groups)
    if groups.shape != cluster.shape or (
        len(groups) and not np.issubdtype(groups.dtype, np.integer)
    ):
        raise ValueError(
            f"{dataset.name!r}: groups must be one integer per row ({cluster.shape}), "
            f"got {groups.dtype} {groups.shape}"
        )
    groups = groups.astype(np.int64, copy=False)
    if len(groups) and groups.min() < -1:
        raise ValueError(f"{dataset.name!r}: group ids must be >= -1, got {int(groups.min())}")
    return groups


def _user_rows(name: str, groups: np.ndarray, users: np.ndarray) -> list[np.ndarray]:
    """Each user's rows (sorted), in ``users``' order; a user needs a train and a test row."""
    order = np.argsort(groups, kind="stable")
    starts = np.searchsorted(groups[order], users, side="left")
    ends = np.searchsorted(groups[order], users, side="right")
    clients = [np.sort(order[a:b]).astype(np.int64) for a, b in zip(starts, ends, strict=True)]
    for pid, (user, rows) in enumerate(zip(users, clients, strict=True)):
        if len(rows) < 2:
            raise ValueError(
                f"user {int(user)} of {name!r} (client {pid}) has {len(rows)} image(s); "
                "a client needs >= 2 (a train and a test row)"
            )
    return clients


def natural_clients(
    dataset: ImageDataset,
    cluster: np.ndarray,
    num_partitions: int,
    new_partitions: int,
    aux_size: int,
    label_kind: str,
    seed: int,
) -> tuple[np.ndarray, list[np.ndarray], dict[str, Any]]:
    """(D_aux rows, the first ``num_partitions + new_partitions`` users' rows, what the
    split found).

    Clients are the users in id order; each keeps all its rows. Raises when the
    dataset has no groups, bad group ids, fewer users than asked for, a user
    without a train and a test row, or too few server rows for D_aux.
    """
    if dataset.groups is None:
        raise ValueError(f"{dataset.name!r} has no natural groups (dataset.groups is None)")
    groups = _natural_groups(dataset, cluster)
    users = np.unique(groups[groups >= 0])
    wanted = num_partitions + new_partitions
    if wanted > len(users):
        raise ValueError(
            f"{dataset.name!r} has {len(users)} natural clients (users), but num_partitions="
            f"{num_partitions} + new_partitions={new_partitions} = {wanted} were asked for"
        )
    aux = natural_aux(dataset, cluster, aux_size, label_kind, seed)
    clients = _user_rows(dataset.name, groups, users[:wanted])
    record = {
        "num_rows": len(cluster),
        "num_cluster_labels": len(np.unique(cluster)),
        "num_groups": len(users),
        "num_server_rows": int(np.count_nonzero(groups == -1)),
    }
    return aux, clients, record
