"""The federation of one run: D_aux, the training clients and the held-out new clients.

Built identically by every Flower node from the run config: Dirichlet partitions
of the cluster labels (:func:`build_federation`), or a dataset's natural groups
(GLDv2's photographers, :func:`natural_federation`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ripple_flwr.data.base import ImageDataset
from ripple_flwr.data.natural import natural_clients
from ripple_flwr.data.partition import (
    derived_seed,
    dirichlet_partition,
    fold_labels,
    server_aux_split,
    spread_sizes,
    train_test_split_indices,
    true_mixtures,
)

# Concept shift per client, as FedRC's Fashion-MNIST (LINs-lab/FedRC, create_c/make_fmnist_c.py):
# 60% of clients keep the labels, 20% see y -> C-1-y, 20% y -> (y+1) mod C; one concept each.
CLIENT_CONCEPTS = ("none", "fedrc")
FEDRC_SHARES = (0.6, 0.2, 0.2)
_CONCEPT_KEY = 3  # SeedSequence key of the clients' concept draw


def fedrc_maps(num_classes: int) -> np.ndarray:
    """(3, C): FedRC's concepts, row g maps a class to its label (identity, reversed, shifted)."""
    c = np.arange(num_classes)
    return np.stack([c, num_classes - 1 - c, (c + 1) % num_classes])


# Offset of the new (held-out) clients' partition seed from the training one.
NEW_PARTITION_SEED_OFFSET = 1_000_003
_SPLIT_KEY = 2  # SeedSequence key of the per-client train/test split seeds


@dataclass(frozen=True, eq=False)
class Federation:
    """The clients of one run, rebuilt identically by every Flower node from the run config.

    Partition ids ``0 .. num_train_partitions-1`` are training clients; the
    ids after them are new clients held out for zero-shot onboarding. Indices
    are rows of ``dataset.images``; aux, every client's train and test rows
    are pairwise disjoint.
    """

    dataset: ImageDataset
    aux_indices: np.ndarray
    train_indices: list[np.ndarray]
    test_indices: list[np.ndarray]
    mixtures: np.ndarray
    num_train_partitions: int
    settings: dict[str, Any]
    # Concept shift per client (client-concepts): each client's concept, and each concept's
    # map from class to label; None: every client labels as the dataset does.
    concepts: np.ndarray | None = None
    concept_maps: np.ndarray | None = None

    @property
    def num_partitions(self) -> int:
        """All clients, training and new."""
        return len(self.train_indices)

    @property
    def num_new_partitions(self) -> int:
        return self.num_partitions - self.num_train_partitions

    @property
    def num_components(self) -> int:
        return int(self.mixtures.shape[1])

    def label_mixtures(self) -> np.ndarray:
        """Every client's proportions of each class (or domain), unfolded: ``(N, labels)``.

        ``mixtures`` folds class c into component c mod K; this keeps all the
        labels, so a clustering at any K can be scored against each client's
        dominant label itself.
        """
        cluster, count = self.dataset.cluster_labels(self.settings["label_kind"])
        rows = [self.client_indices(pid) for pid in range(self.num_partitions)]
        return true_mixtures(rows, cluster, count)

    def concept_mixtures(self) -> np.ndarray | None:
        """Each client's true concept proportions ``(N, G)``, where the federation has concept
        shift (per client, or a dataset whose domains are concepts); else ``None``. For
        scoring a concept step only: nothing routes by it."""
        if self.concepts is not None:
            return np.eye(len(self.concept_maps))[self.concepts]
        data = self.dataset
        if data.domains_are_concepts and data.domains is not None:
            rows = [self.client_indices(pid) for pid in range(self.num_partitions)]
            return true_mixtures(rows, np.asarray(data.domains), data.num_domains)
        return None

    def _check_pid(self, pid: int) -> int:
        if not 0 <= pid < self.num_partitions:
            raise IndexError(f"partition id {pid} out of range [0, {self.num_partitions})")
        return int(pid)

    def client_indices(self, pid: int) -> np.ndarray:
        """All rows of one client (train then test)."""
        pid = self._check_pid(pid)
        return np.concatenate([self.train_indices[pid], self.test_indices[pid]])

    def client_data(self, pid: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(x_train, y_train, x_test, y_test)`` with class labels: what the model trains on."""
        pid = self._check_pid(pid)
        train, test = self.train_indices[pid], self.test_indices[pid]
        data, labels = self.dataset, self.dataset.labels
        y, yt = labels[train], labels[test]
        if self.concepts is not None:
            to = self.concept_maps[self.concepts[pid]]
            y, yt = to[y].astype(y.dtype), to[yt].astype(yt.dtype)
        return data.rows(train), y, data.rows(test), yt

    def client_images(self, pid: int) -> np.ndarray:
        """Every image of the client (train + test): the input of its embedding Phi."""
        return self.dataset.rows(self.client_indices(pid))

    def aux_data(self) -> tuple[np.ndarray, np.ndarray]:
        """The server's D_aux: images and cluster labels folded to K (synthetic-client source)."""
        cluster, _ = self.dataset.cluster_labels(self.settings["label_kind"])
        folded = fold_labels(cluster[self.aux_indices], self.num_components)
        return self.dataset.rows(self.aux_indices), folded


def build_federation(
    dataset: ImageDataset,
    *,
    num_partitions: int,
    partition_size: int,
    alpha: float,
    aux_size: int,
    num_components: int,
    label_kind: str = "class",
    test_fraction: float = 0.2,
    seed: int = 0,
    new_partitions: int = 0,
    alpha_new: float = 1.0,
    size_spread: float = 1.0,
    new_partition_size: int = 0,
    client_concepts: str = "none",
) -> Federation:
    """Split a dataset into D_aux, Dir(alpha) training clients and held-out new clients.

    ``size_spread`` > 1 makes the training clients' sizes vary by about that factor
    around ``partition_size`` (quantity skew, :func:`spread_sizes`; the same rows in
    all); the new clients have ``new_partition_size`` rows (0: ``partition_size``).

    Deterministic: the same arguments give the same federation in every
    process, so each Flower node rebuilds it from the run config instead of
    receiving data. The clusters follow ``dataset.cluster_labels(label_kind)``
    (class or domain); D_aux is balanced over them, the clients' mixtures are
    drawn over them, and ``mixtures`` holds each client's folded pi* (N, K).

    A dataset with natural clients (``dataset.groups`` set, e.g. GLDv2's
    photographers) is split along them instead: see :func:`natural_federation`
    (``partition_size``, ``alpha`` and ``alpha_new`` are then ignored).

    ``client_concepts = "fedrc"`` gives every client (training and new alike) one concept,
    drawn with :data:`FEDRC_SHARES` from a generator of its own: its labels, train and test,
    are that concept's map of the classes (:func:`fedrc_maps`); D_aux keeps the dataset's.
    """
    if client_concepts not in CLIENT_CONCEPTS:
        raise ValueError(
            f"client-concepts {client_concepts!r} unknown; choose {', '.join(CLIENT_CONCEPTS)}"
        )
    if client_concepts != "none" and (dataset.domains_are_concepts or dataset.groups is not None):
        raise ValueError(
            f"client-concepts={client_concepts} relabels clients of a plain dataset; "
            f"{dataset.name!r} already has concepts or natural clients"
        )
    fed = _build(
        dataset,
        (num_partitions, partition_size, new_partitions, new_partition_size, aux_size),
        (alpha, alpha_new, test_fraction, size_spread),
        label_kind,
        num_components,
        seed,
    )
    if client_concepts == "none":
        return fed
    rng = np.random.default_rng(derived_seed(seed, _CONCEPT_KEY))
    concepts = rng.choice(len(FEDRC_SHARES), size=fed.num_partitions, p=FEDRC_SHARES)
    return replace(
        fed,
        concepts=concepts.astype(np.int64),
        concept_maps=fedrc_maps(dataset.num_classes),
        settings={**fed.settings, "client_concepts": client_concepts},
    )


def _build(
    dataset: ImageDataset,
    sizes: tuple[int, int, int, int, int],
    rates: tuple[float, float, float, float],
    label_kind: str,
    num_components: int,
    seed: int,
) -> Federation:
    """:func:`build_federation` without concepts per client."""
    num_partitions, partition_size, new_partitions, new_partition_size, aux_size = sizes
    alpha, alpha_new, test_fraction, size_spread = rates
    cluster, _ = dataset.cluster_labels(label_kind)  # validates label_kind first
    cluster = np.asarray(cluster, dtype=np.int64)
    natural = dataset.groups is not None
    _check_counts(
        num_partitions=num_partitions,
        partition_size=None if natural else partition_size,
        new_partitions=new_partitions,
        num_components=num_components,
        aux_size=aux_size,
        seed=seed,
        new_partition_size=new_partition_size or None,
    )
    if natural:
        return natural_federation(
            dataset,
            num_partitions=num_partitions,
            aux_size=aux_size,
            num_components=num_components,
            label_kind=label_kind,
            test_fraction=test_fraction,
            seed=seed,
            new_partitions=new_partitions,
        )
    counts = (int(num_partitions), int(new_partitions), int(partition_size), int(aux_size))
    rates = (float(alpha), float(alpha_new), float(test_fraction), float(size_spread))
    return _dirichlet_federation(
        dataset,
        cluster,
        counts,
        rates,
        label_kind,
        int(num_components),
        int(seed),
        int(new_partition_size or partition_size),
    )


def _dirichlet_federation(
    dataset: ImageDataset,
    cluster: np.ndarray,
    counts: tuple[int, int, int, int],
    rates: tuple[float, float, float, float],
    label_kind: str,
    num_components: int,
    seed: int,
    new_size: int,
) -> Federation:
    """D_aux, then Dir(alpha) training clients and Dir(alpha_new) new clients from the rest.

    ``counts``: training clients, new clients, client size, D_aux size; ``rates``:
    alpha, alpha_new, test fraction, size spread; ``new_size``: a new client's rows.
    """
    num_partitions, new_partitions, partition_size, aux_size = counts
    alpha, alpha_new, test_fraction, size_spread = rates
    n, num_labels = len(cluster), len(np.unique(cluster))
    _check_split(dataset.name, n, num_labels, label_kind, counts, rates[:3], new_size)
    aux, pool = server_aux_split(cluster, aux_size, seed)
    sizes = spread_sizes(num_partitions, partition_size, size_spread, seed)
    clients = _dirichlet_clients(
        cluster,
        pool,
        (num_partitions, new_partitions, partition_size, new_size),
        (alpha, alpha_new),
        sizes,
        seed,
    )
    settings = {
        "dataset": dataset.name,
        "num_rows": n,
        "num_cluster_labels": num_labels,
        "num_partitions": int(num_partitions),
        "partition_size": int(partition_size),
        "alpha": float(alpha),
        "aux_size": int(aux_size),
        "num_components": int(num_components),
        "label_kind": label_kind,
        "test_fraction": float(test_fraction),
        "seed": int(seed),
        "new_partitions": int(new_partitions),
        "alpha_new": float(alpha_new),
        **({"size_spread": float(size_spread)} if size_spread != 1 else {}),
        **({"new_partition_size": new_size} if new_size != partition_size else {}),
    }
    return _assemble(dataset, aux, clients, cluster, settings)


def _assemble(
    dataset: ImageDataset,
    aux: np.ndarray,
    clients: list[np.ndarray],
    cluster: np.ndarray,
    settings: dict[str, Any],
) -> Federation:
    """The federation of these clients' rows: each split into train/test by its own seed.

    ``settings`` must hold ``num_partitions``, ``num_components``, ``test_fraction`` and
    ``seed``; the first ``num_partitions`` clients train, the rest are new clients.
    """
    fraction, seed = settings["test_fraction"], settings["seed"]
    splits = [
        train_test_split_indices(rows, fraction, derived_seed(seed, _SPLIT_KEY, pid))
        for pid, rows in enumerate(clients)
    ]
    return Federation(
        dataset=dataset,
        aux_indices=aux,
        train_indices=[train for train, _ in splits],
        test_indices=[test for _, test in splits],
        mixtures=true_mixtures(clients, cluster, settings["num_components"]),
        num_train_partitions=settings["num_partitions"],
        settings=settings,
    )


_LOWEST = {
    "num_partitions": 1,
    "partition_size": 2,
    "new_partition_size": 2,
    "num_components": 1,
    "aux_size": 1,
}


def _check_counts(**counts: Any) -> None:
    """Each count an integer at or above its least value (``None``: not checked)."""
    for name, value in counts.items():
        low = _LOWEST.get(name, 0)
        if value is not None and (int(value) != value or value < low):
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def _check_split(
    name: str,
    n: int,
    num_labels: int,
    label_kind: str,
    counts: tuple[int, int, int, int],
    rates: tuple[float, float, float],
    new_size: int,
) -> None:
    """Refuse a Dirichlet split the dataset cannot hold, naming the number that is wrong."""
    num_partitions, new_partitions, partition_size, aux_size = counts
    alpha, alpha_new, test_fraction = rates
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    if new_partitions and not alpha_new > 0:
        raise ValueError(f"alpha_new must be > 0, got {alpha_new}")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    if not num_labels <= aux_size < n:
        raise ValueError(
            f"aux_size must be in [{num_labels}, {n}) for {name!r} "
            f"(one row per {label_kind} label at least), got {aux_size}"
        )
    needed = aux_size + num_partitions * partition_size + new_partitions * new_size
    if needed > n:
        raise ValueError(
            f"{name!r} has {n} rows, but aux_size={aux_size} plus {num_partitions} clients of "
            f"{partition_size} rows and {new_partitions} of {new_size} need {needed}"
        )


def _dirichlet_clients(
    cluster: np.ndarray,
    pool: np.ndarray,
    counts: tuple[int, int, int, int],
    alphas: tuple[float, float],
    sizes: Any,
    seed: int,
) -> list[np.ndarray]:
    """The training clients' rows from ``pool``, then the new clients' from what is left."""
    num_partitions, new_partitions, partition_size, new_size = counts
    alpha, alpha_new = alphas
    clients = [
        pool[p]
        for p in dirichlet_partition(
            cluster[pool], num_partitions, partition_size, alpha, seed, sizes=sizes
        )
    ]
    if new_partitions:
        taken = np.concatenate(clients)
        rest = np.setdiff1d(pool, taken, assume_unique=True)
        new_seed = seed + NEW_PARTITION_SEED_OFFSET
        clients += [
            rest[p]
            for p in dirichlet_partition(
                cluster[rest], new_partitions, new_size, alpha_new, new_seed
            )
        ]
    return clients


def natural_federation(
    dataset: ImageDataset,
    *,
    num_partitions: int,
    aux_size: int,
    num_components: int,
    label_kind: str = "class",
    test_fraction: float = 0.2,
    seed: int = 0,
    new_partitions: int = 0,
) -> Federation:
    """The federation of a dataset with natural clients: one client per group (user).

    ``dataset.groups`` gives each row's user (0..U-1, in the order the loader
    numbered them) or -1 for the server's rows. Clients are the users in that
    order: the first ``num_partitions`` train, the next ``new_partitions`` are
    held out as new clients, the rest are unused. Each client keeps all its
    rows, split into train/test by ``test_fraction`` as the Dirichlet clients
    are; D_aux is drawn from the server rows only (balanced over the cluster
    labels, :func:`server_aux_split`); ``mixtures`` are the clients' folded
    cluster-label proportions. ``settings["split"]`` is ``"natural"``.
    """
    cluster, _ = dataset.cluster_labels(label_kind)
    cluster = np.asarray(cluster, dtype=np.int64)
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    num_partitions, new_partitions = int(num_partitions), int(new_partitions)
    num_components, aux_size, seed = int(num_components), int(aux_size), int(seed)
    aux, clients, record = natural_clients(
        dataset, cluster, num_partitions, new_partitions, aux_size, label_kind, seed
    )
    settings = {
        "dataset": dataset.name,
        "split": "natural",
        **record,
        "num_partitions": num_partitions,
        "aux_size": aux_size,
        "num_components": num_components,
        "label_kind": label_kind,
        "test_fraction": float(test_fraction),
        "seed": seed,
        "new_partitions": new_partitions,
    }
    return _assemble(dataset, aux, clients, cluster, settings)
