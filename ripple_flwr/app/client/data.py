"""What one node trains and is scored on: a benchmark partition, or the node's own files.

``client-data = "benchmark"``: the node's ``partition-id`` of the run's shared
federation (simulation, tests, a deployment whose silos hold copies of one
benchmark). ``client-data = "local"``: the node's own files, named by its node
config ``data=<path>`` (an ImageFolder, a ``.npz`` or a Hugging Face dataset;
:mod:`ripple_flwr.data.local`), split into train/test with its own seed
(node config ``data-seed``, ``test-fraction``), converted to the run's classes
and image shape, which the server sends with the one-shot query and the node
keeps in its state for the run. A run never mixes the two: a node whose
config does not fit the run's mode answers with an error that says so.

Decoded local images are cached per process and on disk (under the cache
folder, keyed by the files' fingerprint and the run's classes and shape), so
a deployment's fresh ``flwr-clientapp`` per message does not decode again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, RecordDict

from ripple_flwr.app.client.runtime import RUNTIME
from ripple_flwr.app.protocol.messages import NAME_LIMIT, RUN_DATA, decode_run_data
from ripple_flwr.data.base import classes_hash
from ripple_flwr.data.cache import cached_federation
from ripple_flwr.data.images import to_unit_float
from ripple_flwr.data.local import LocalDataError, fingerprint, read_local_images, split_rows
from ripple_flwr.settings import RunSettings

log = logging.getLogger("flwr.ripple")

LOCAL_CACHE_VERSION = 1


class ClientDataError(ValueError):
    """A node whose configuration does not fit the run's data mode (one line, with the fix)."""


@dataclass(frozen=True)
class ClientData:
    """A node's train and test splits (float32 images in [0, 1], class labels)."""

    source: str  # "benchmark" | "local"
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    image_shape: tuple[int, int, int]
    num_classes: int
    pid: int | None = None
    name: str = ""
    classes: str = ""  # classes_hash of the class list the labels index

    @property
    def images(self) -> np.ndarray:
        """Every image of the node (train + test): the input of its embedding Phi."""
        return np.concatenate([self.x_train, self.x_test])


def node_name(node_config: Mapping[str, Any]) -> str:
    """The node's ``name`` from its node config: printable, at most 64 characters."""
    raw = str(node_config.get("name", ""))
    return "".join(ch for ch in raw if ch.isprintable())[:NAME_LIMIT]


def check_mode(settings: RunSettings, node_config: Mapping[str, Any]) -> None:
    """Refuse a node whose config belongs to the other data mode."""
    has_data = bool(str(node_config.get("data", "")).strip())
    if settings.data.client_data == "benchmark" and has_data:
        raise ClientDataError(
            f"node holds its own data (node config data={node_config['data']!r}) but the run "
            "uses benchmark partitions (client-data='benchmark'); run with "
            "client-data='local', or start the node without data="
        )
    if settings.data.client_data == "local" and not has_data:
        raise ClientDataError(
            "the run trains on each node's own files (client-data='local') but this node has "
            "no data; start it with --node-config \"data='<path>'\" (an ImageFolder, a .npz or "
            "a Hugging Face dataset; docs/own-data.md)"
        )


def benchmark_data(settings: RunSettings, pid: int) -> ClientData:
    """Partition ``pid`` of the run's shared federation."""
    fed = cached_federation(settings)
    x, y, xt, yt = fed.client_data(pid)
    return ClientData(
        "benchmark", x, y, xt, yt, fed.dataset.image_shape, fed.dataset.num_classes, pid=pid
    )


# -- the run's classes and shape, as the server sent them -----------------------------------
def remember_run_data(state: RecordDict, content: RecordDict) -> None:
    """Keep the query's class list and shape in the node's state for this run's later messages."""
    record = content.config_records.get(RUN_DATA)
    if record is not None:
        state[RUN_DATA] = ConfigRecord(dict(record))


def _run_data(settings: RunSettings, state: RecordDict) -> tuple[list[str], tuple[int, int, int]]:
    record = state.config_records.get(RUN_DATA)
    if record is None:
        raise ClientDataError(
            "this node has not answered the run's query round (its state lacks the run's "
            "classes and image shape; a restarted SuperNode joins as a new node)"
        )
    return decode_run_data(record)


# -- the node's own files -------------------------------------------------------------------
def local_data(
    settings: RunSettings, node_config: Mapping[str, Any], state: RecordDict
) -> ClientData:
    """The node's own files as the run's classes and shape, split with the node's own seed."""
    classes, shape = _run_data(settings, state)
    path = str(node_config["data"]).strip()
    seed = int(node_config.get("data-seed", 0))
    test_fraction = float(node_config.get("test-fraction", settings.data.test_fraction))
    if not 0.0 < test_fraction < 1.0:
        raise ClientDataError(f"node config test-fraction must be in (0, 1), got {test_fraction}")
    image_column = str(node_config.get("image-column", settings.data.image_column))
    label_column = str(node_config.get("label-column", settings.data.label_column))
    meta = {
        "version": LOCAL_CACHE_VERSION,
        "path": str(Path(path).expanduser().resolve()),
        "files": fingerprint(path),
        "classes": classes_hash(classes),
        "shape": list(shape),
        "columns": [image_column, label_column],
    }
    key = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:24]
    # The name too: the same folder under another name is another node (it reports that name).
    split_key = f"{key}-{seed}-{test_fraction!r}-{node_name(node_config)}"

    def build() -> ClientData:  # the slot drops the previous node's data first (memory)
        images, labels = _decoded(settings, key, path, classes, shape, image_column, label_column)
        train, test = split_rows(len(labels), test_fraction, seed, path)
        return ClientData(
            "local",
            to_unit_float(images[train]),
            labels[train],
            to_unit_float(images[test]),
            labels[test],
            shape,
            len(classes),
            name=node_name(node_config),
            classes=classes_hash(classes),
        )

    return RUNTIME.local_data.get(split_key, build)


def _decoded(
    settings: RunSettings,
    key: str,
    path: str,
    classes: list[str],
    shape: tuple[int, int, int],
    image_column: str,
    label_column: str,
) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images and labels: from the disk cache, else decoded (and cached)."""
    cache = settings.outputs.cache_root() / "local-data" / f"{key}.npz"
    if cache.is_file():
        try:
            with np.load(cache, allow_pickle=False) as f:
                return f["images"], f["labels"]
        except (OSError, ValueError, KeyError) as err:
            log.warning("ignoring unreadable local-data cache %s (%s)", cache, err)
    local = read_local_images(
        path,
        class_names=classes,
        channels=shape[0],
        size=shape[1] if shape[1] == shape[2] else 0,
        image_column=image_column,
        label_column=label_column,
    )
    if tuple(local.images.shape[1:]) != tuple(shape):
        raise LocalDataError(
            f"{path}: images are {tuple(local.images.shape[1:])} after conversion, the run "
            f"uses {tuple(shape)}; set image-size to a square side"
        )
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f"{cache.stem}.{os.getpid()}.tmp.npz")
        np.savez(tmp, images=local.images, labels=local.labels)
        os.replace(tmp, cache)
    except OSError as err:  # a read-only home must not stop the node
        log.warning("could not cache the node's decoded data at %s: %s", cache, err)
    return local.images, local.labels


__all__ = [
    "ClientData",
    "ClientDataError",
    "benchmark_data",
    "check_mode",
    "classes_hash",
    "local_data",
    "node_name",
    "remember_run_data",
]
