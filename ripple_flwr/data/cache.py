"""The run's dataset and federation, cached per process and on disk.

In simulation a Ray actor serves many messages, so an in-process cache
suffices. In deployment every message starts a fresh ``flwr-clientapp``
process; rebuilding the Dirichlet partition there costs seconds (3.4 s for
10,000 clients of Fashion-MNIST), so the federation's index arrays are
also saved once under the cache folder, keyed by a hash of the settings that
define them, and checked against the dataset's labels when read back.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import numpy as np

from ripple_flwr.data import Federation, ImageDataset, build_federation, load_dataset
from ripple_flwr.data.registry import is_resizable
from ripple_flwr.settings import RunSettings

log = logging.getLogger("flwr.ripple")

FORMAT_VERSION = 1


class DataCache:
    """The process's one dataset and one federation, each kept for the key it was built for.

    One of each at a time (memory): another run's settings replace them.
    :meth:`clear` forgets both (the client runtime clears it with its own slots).
    """

    def __init__(self) -> None:
        self.dataset_key: tuple[str, str, int] | None = None
        self.dataset: ImageDataset | None = None
        self.federation_key: str | None = None
        self.federation: Federation | None = None

    def clear(self) -> None:
        self.dataset_key = self.dataset = self.federation_key = self.federation = None


PROCESS_DATA = DataCache()
"""What this process keeps of the run's data (:func:`cached_dataset`, :func:`cached_federation`)."""


def _image_size(settings: RunSettings) -> int:
    """``image-size`` for the sets that resize their photos (office-home, gldv2-23k), else 0."""
    return int(settings.data.image_size) if is_resizable(settings.data.base_dataset) else 0


def cached_dataset(settings: RunSettings) -> ImageDataset:
    """The run's dataset, loaded once per process."""
    image_size = _image_size(settings)
    key = (settings.data.dataset, settings.data.data_root, image_size)
    cache = PROCESS_DATA
    if cache.dataset is None or cache.dataset_key != key:
        cache.clear()  # one dataset per process at a time (memory); its federation goes too
        cache.dataset = load_dataset(
            settings.data.dataset, settings.data.data_root_or_none, image_size=image_size
        )
        cache.dataset_key = key
    return cache.dataset


def federation_key(settings: RunSettings) -> str:
    """Hash of everything the federation's partition depends on."""
    meta = {
        "version": FORMAT_VERSION,
        "dataset": settings.data.dataset.strip().lower(),
        "data_root": settings.data.data_root,
        **settings.federation_kwargs(),
    }
    return hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:24]


def _labels_digest(dataset: ImageDataset) -> str:
    labels = np.ascontiguousarray(dataset.labels, dtype=np.int64)
    return hashlib.sha256(labels.tobytes()).hexdigest()[:16] + f"-{len(labels)}"


def cached_federation(settings: RunSettings, *, use_disk: bool = True) -> Federation:
    """The run's federation: from this process, else from disk, else built (and saved)."""
    key = federation_key(settings)
    dataset = cached_dataset(settings)
    cache = PROCESS_DATA
    if cache.federation_key == key and cache.federation.dataset is dataset:  # same rows, pixels
        return cache.federation
    path = settings.outputs.cache_root() / "federations" / f"federation-{key}.npz"
    federation = _load(path, dataset) if use_disk else None
    if federation is None:
        federation = build_federation(dataset, **settings.federation_kwargs())
        if use_disk:
            _save(path, federation, dataset)
    cache.federation, cache.federation_key = federation, key
    return federation


def _save(path: Path, fed: Federation, dataset: ImageDataset) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
        np.savez(
            tmp,
            aux=fed.aux_indices,
            train=np.concatenate(fed.train_indices),
            train_sizes=np.array([len(t) for t in fed.train_indices], dtype=np.int64),
            test=np.concatenate(fed.test_indices),
            test_sizes=np.array([len(t) for t in fed.test_indices], dtype=np.int64),
            mixtures=fed.mixtures,
            num_train=np.array(fed.num_train_partitions),
            **(
                {}
                if fed.concepts is None
                else {"concepts": fed.concepts, "concept_maps": fed.concept_maps}
            ),
            meta=np.array(
                json.dumps({"settings": fed.settings, "labels": _labels_digest(dataset)})
            ),
        )
        os.replace(tmp, path)
    except OSError as err:  # a read-only home must not stop the run
        log.warning("could not cache the federation at %s: %s", path, err)


def _load(path: Path, dataset: ImageDataset) -> Federation | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as f:
            meta = json.loads(str(f["meta"]))
            if meta["labels"] != _labels_digest(dataset):
                log.warning("federation cache %s was built on other data; rebuilding", path)
                return None
            train = np.split(f["train"], np.cumsum(f["train_sizes"])[:-1])
            test = np.split(f["test"], np.cumsum(f["test_sizes"])[:-1])
            fed = Federation(
                dataset=dataset,
                aux_indices=f["aux"],
                train_indices=list(train),
                test_indices=list(test),
                mixtures=f["mixtures"],
                num_train_partitions=int(f["num_train"]),
                settings=meta["settings"],
                concepts=f["concepts"] if "concepts" in f.files else None,
                concept_maps=f["concept_maps"] if "concept_maps" in f.files else None,
            )
    except (OSError, ValueError, KeyError) as err:
        log.warning("ignoring unreadable federation cache %s (%s)", path, err)
        return None
    return fed
