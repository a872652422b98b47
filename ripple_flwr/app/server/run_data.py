"""The server's view of a run's data: image shape, class list, D_aux and, for benchmarks, pi*.

``client-data = "benchmark"``: the run's federation (every node rebuilds the same
one; the server knows each client's true mixture). ``client-data = "local"``:
the nodes hold their own files and the server holds only its own labelled
``aux-data`` (or, for a method without a router, just ``class-names``); the
run's classes and image shape come from the settings or from those files, and
go to every node with the one-shot query. Either way, ``aux-data`` (when set)
replaces the D_aux carved from the benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ripple_flwr.app.protocol.messages import RUN_DATA, run_data_record
from ripple_flwr.app.server.roster.own_data import LocalData
from ripple_flwr.data import Federation, ImageDataset, fold_labels
from ripple_flwr.data.base import classes_hash
from ripple_flwr.data.cache import cached_federation
from ripple_flwr.data.local import LocalDataError, class_names_of, local_dataset
from ripple_flwr.settings import ConfigError, RunSettings


@dataclass(frozen=True)
class RunData:
    """What the server knows of the run's data before any node answers."""

    source: str  # "benchmark" | "local"
    name: str
    image_shape: tuple[int, int, int]
    class_names: tuple[str, ...]
    num_components: int
    label_kind: str
    federation: Federation | None = None
    aux: ImageDataset | None = None  # the server's own files (aux-data)

    @classmethod
    def of_federation(
        cls, settings: RunSettings, fed: Federation, aux: ImageDataset | None = None
    ) -> RunData:
        """A benchmark run's data: its federation (and the server's own D_aux, if any)."""
        ds = fed.dataset
        return cls(
            "benchmark",
            ds.name,
            ds.image_shape,
            ds.classes,
            settings.embedding.num_components,
            settings.data.label_kind,
            federation=fed,
            aux=aux,
        )

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def classes_hash(self) -> str:
        return classes_hash(self.class_names)

    @property
    def true_mixtures(self) -> np.ndarray | None:
        """pi* of every client (benchmark partitions only: the server cannot see a silo's)."""
        return None if self.federation is None else self.federation.mixtures

    @property
    def true_concepts(self) -> np.ndarray | None:
        """Each client's true concept proportions where the benchmark has concept shift (for
        scoring a concept step; never routed on)."""
        return None if self.federation is None else self.federation.concept_mixtures()

    @property
    def true_label_mixtures(self) -> np.ndarray | None:
        """Each client's unfolded class (or domain) proportions; benchmark partitions only."""
        return None if self.federation is None else self.federation.label_mixtures()

    def aux_data(self) -> tuple[np.ndarray, np.ndarray]:
        """D_aux: float images and cluster labels folded to K (the server's files first)."""
        if self.aux is not None:
            cluster, _ = self.aux.cluster_labels(self.label_kind)
            return self.aux.rows(slice(None)), fold_labels(cluster, self.num_components)
        if self.federation is None:
            raise ConfigError("this run has no D_aux: set aux-data to the server's labelled files")
        return self.federation.aux_data()

    def local(self, settings: RunSettings) -> LocalData | None:
        """What nodes with their own data must report (None for benchmark runs)."""
        if self.source != "local":
            return None
        return LocalData(self.classes_hash, self.image_shape, settings.data.num_partitions)

    def partition_sizes(self) -> dict[int, tuple[int, int]] | None:
        """Each benchmark partition's (train, test) split sizes; ``None`` for nodes' own data."""
        if self.federation is None:
            return None
        fed = self.federation
        return {
            pid: (len(fed.train_indices[pid]), len(fed.test_indices[pid]))
            for pid in range(fed.num_partitions)
        }

    def query_records(self) -> dict[str, Any]:
        """Records sent with every query: the run's classes and shape, for local nodes."""
        if self.source != "local":
            return {}
        return {RUN_DATA: run_data_record(self.class_names, self.image_shape)}

    def record(self) -> dict[str, Any]:
        """For the results file."""
        return {
            "source": self.source,
            "dataset": self.name,
            "image_shape": list(self.image_shape),
            "num_classes": self.num_classes,
            "classes_hash": self.classes_hash,
            "aux_data": None if self.aux is None else self.aux.name,
            "true_mixtures": self.true_mixtures,
            "true_label_mixtures": self.true_label_mixtures,
            "true_concepts": self.true_concepts,
        }


def _aux(settings: RunSettings, classes: tuple[str, ...] | None, channels: int, size: int):
    try:
        return local_dataset(
            settings.data.aux_data,
            class_names=classes or None,
            channels=channels,
            size=size,
            image_column=settings.data.image_column,
            label_column=settings.data.label_column,
        )
    except LocalDataError as err:
        raise ConfigError(f"aux-data: {err}") from err


def resolve_run_data(settings: RunSettings) -> RunData:
    """The run's data as the server sees it; a ``ConfigError`` before any round if it cannot."""
    common = {
        "num_components": settings.embedding.num_components,
        "label_kind": settings.data.label_kind,
    }
    if settings.data.client_data == "benchmark":
        fed = cached_federation(settings)
        ds = fed.dataset
        aux = None
        if settings.data.aux_data:
            aux = _aux(settings, ds.classes, ds.image_shape[0], ds.image_shape[1])
        return RunData.of_federation(settings, fed, aux)
    classes = settings.data.class_list
    if settings.data.aux_data:
        if not classes:
            try:
                classes = class_names_of(
                    settings.data.aux_data, label_column=settings.data.label_column
                )
            except LocalDataError as err:
                raise ConfigError(f"aux-data: {err}") from err
        aux = _aux(settings, classes, settings.data.channels, settings.data.image_size)
        return RunData("local", aux.name, aux.image_shape, classes, aux=aux, **common)
    missing = [
        key
        for key, value in (
            ("class-names", classes),
            ("image-size", settings.data.image_size),
            ("channels", settings.data.channels),
        )
        if not value
    ]
    if missing:
        raise ConfigError(
            "client-data='local' needs the run's classes and image shape: set aux-data to the "
            f"server's labelled files, or set {', '.join(missing)}"
        )
    shape = (settings.data.channels, settings.data.image_size, settings.data.image_size)
    return RunData("local", "local", shape, classes, **common)
