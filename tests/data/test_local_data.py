"""Node-local data: every layout a SuperNode's own files may come in, and every way they fail."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ripple_flwr.data.base import ImageDataset
from ripple_flwr.data.images import convert_image
from ripple_flwr.data.local import (
    LocalDataError,
    class_names_of,
    detect_format,
    fingerprint,
    local_dataset,
    read_local_images,
    split_local,
)

RNG_SEED = 1234


def _pixels(rng: np.random.Generator, h: int, w: int, mode: str = "RGB") -> np.ndarray:
    shape = (h, w) if mode == "L" else (h, w, 3)
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def _as_chw(arr: np.ndarray) -> np.ndarray:
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)


def _folder(
    root: Path,
    counts: dict[str, int],
    *,
    size: tuple[int, int] = (8, 6),
    mode: str = "RGB",
    ext: str = ".png",
) -> dict[str, list[np.ndarray]]:
    """An ImageFolder under ``root``: ``counts[cls]`` images per class, pixels returned (CHW)."""
    rng = np.random.default_rng(RNG_SEED)
    written: dict[str, list[np.ndarray]] = {}
    for cls, n in counts.items():
        (root / cls).mkdir(parents=True, exist_ok=True)
        written[cls] = []
        for j in range(n):
            arr = _pixels(rng, size[0], size[1], mode)
            Image.fromarray(arr).save(root / cls / f"img_{j:03d}{ext}")
            written[cls].append(_as_chw(arr))
    return written


def _expected(written: dict[str, list[np.ndarray]]) -> np.ndarray:
    return np.stack([a for cls in sorted(written) for a in written[cls]])


def _hf_rows(n: int, size: int = 8) -> tuple[list[Image.Image], np.ndarray]:
    rng = np.random.default_rng(RNG_SEED)
    arrays = np.stack([_pixels(rng, size, size) for _ in range(n)])
    return [Image.fromarray(a) for a in arrays], arrays.transpose(0, 3, 1, 2)


def _office_home_like(root: Path, names: list[str]) -> tuple[np.ndarray, list, list]:
    """Two parquet shards under ``root/data`` with image/domain/label columns, as on the Hub."""
    from datasets import ClassLabel, Dataset, Features, Value
    from datasets import Image as HFImage

    features = Features(
        {"image": HFImage(), "domain": Value("string"), "label": ClassLabel(names=names)}
    )
    images, pixels = _hf_rows(10)
    domains = ["Art", "Clipart", "Product", "Art", "Real World"] * 2
    labels = [0, 1, 2, 1, 0, 2, 2, 1, 0, 0]
    (root / "data").mkdir(parents=True)
    for shard, rows in enumerate((slice(0, 6), slice(6, 10))):
        part = {"image": images[rows], "domain": domains[rows], "label": labels[rows]}
        path = root / "data" / f"train-{shard:05d}-of-00002.parquet"
        Dataset.from_dict(part, features=features).to_parquet(str(path))
    return pixels, domains, labels


# -- ImageFolder ----------------------------------------------------------------------------


def test_imagefolder_png_round_trips_exactly_in_class_then_name_order(tmp_path: Path) -> None:
    written = _folder(tmp_path / "silo", {"dog": 3, "cat": 2})
    (tmp_path / "silo" / "cat" / "notes.txt").write_text("not an image")
    (tmp_path / "silo" / "dog" / ".hidden.png").write_bytes(b"junk")
    (tmp_path / "silo" / "README.md").write_text("top-level files are ignored")
    local = read_local_images(tmp_path / "silo")
    assert detect_format(tmp_path / "silo") == "imagefolder"
    assert local.format == "imagefolder" and local.class_names == ("cat", "dog")
    assert local.images.dtype == np.uint8 and local.images.flags.c_contiguous
    assert local.images.shape == (5, 3, 8, 6)
    np.testing.assert_array_equal(local.images, _expected(written))
    np.testing.assert_array_equal(local.labels, [0, 0, 1, 1, 1])
    assert local.domains is None and local.domain_names == ()
    assert class_names_of(tmp_path / "silo") == ("cat", "dog")


def test_imagefolder_labels_follow_the_runs_class_order(tmp_path: Path) -> None:
    _folder(tmp_path, {"cat": 2, "dog": 1})
    local = read_local_images(tmp_path, class_names=["fox", "dog", "cat"])
    assert local.class_names == ("fox", "dog", "cat")
    np.testing.assert_array_equal(local.labels, [2, 2, 1])


def test_jpeg_folder_decodes_and_resizes(tmp_path: Path) -> None:
    _folder(tmp_path, {"a": 2, "b": 2}, size=(20, 30), ext=".JPG")
    native = read_local_images(tmp_path)
    assert native.images.shape == (4, 3, 20, 30)
    resized = read_local_images(tmp_path, size=16)
    assert resized.images.shape == (4, 3, 16, 16)
    with Image.open(tmp_path / "a" / "img_000.JPG") as img:
        expected = convert_image(img.copy(), 3, 16)
    np.testing.assert_array_equal(resized.images[0], expected)


def test_decoding_threads_do_not_change_the_result(tmp_path: Path) -> None:
    _folder(tmp_path, {"a": 7, "b": 6})
    one = read_local_images(tmp_path, workers=1, size=5)
    many = read_local_images(tmp_path, workers=4, size=5)
    np.testing.assert_array_equal(one.images, many.images)
    np.testing.assert_array_equal(one.labels, many.labels)


def test_unknown_class_folder_names_it_and_the_runs_classes(tmp_path: Path) -> None:
    _folder(tmp_path, {"cat": 1, "zebra": 1})
    with pytest.raises(LocalDataError, match=r"class folder 'zebra' is not among the run's 3 "):
        read_local_images(tmp_path, class_names=["cat", "dog", "fox"])
    with pytest.raises(LocalDataError, match=r"\(cat, dog, fox\); remove it or add it"):
        read_local_images(tmp_path, class_names=["cat", "dog", "fox"])


def test_empty_folder_and_empty_class_folder(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(LocalDataError, match="folder is empty"):
        read_local_images(tmp_path / "empty")
    _folder(tmp_path / "silo", {"cat": 2})
    (tmp_path / "silo" / "dog").mkdir()
    (tmp_path / "silo" / "dog" / "list.txt").write_text("x")
    with pytest.raises(LocalDataError, match="class folder 'dog' has no images"):
        read_local_images(tmp_path / "silo")


def test_missing_path_and_unknown_layouts(tmp_path: Path) -> None:
    with pytest.raises(LocalDataError, match="no such file or folder.*ImageFolder"):
        detect_format(tmp_path / "nope")
    (tmp_path / "loose").mkdir()
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(tmp_path / "loose" / "a.png")
    with pytest.raises(LocalDataError, match="one subfolder per class"):
        detect_format(tmp_path / "loose")
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "a.txt").write_text("x")
    with pytest.raises(LocalDataError, match="unknown layout"):
        detect_format(tmp_path / "text")
    (tmp_path / "data.csv").write_text("x")
    with pytest.raises(LocalDataError, match="not a data file"):
        detect_format(tmp_path / "data.csv")


def test_truncated_and_unreadable_images_are_named(tmp_path: Path) -> None:
    _folder(tmp_path, {"cat": 3})
    victim = tmp_path / "cat" / "img_001.png"
    victim.write_bytes(victim.read_bytes()[:60])
    with pytest.raises(LocalDataError, match=r"img_001\.png: unreadable or truncated image"):
        read_local_images(tmp_path)
    victim.write_bytes(b"definitely not a png")
    with pytest.raises(LocalDataError, match=r"img_001\.png: .*replace or remove the file"):
        read_local_images(tmp_path)


def test_mixed_sizes_need_an_image_size(tmp_path: Path) -> None:
    _folder(tmp_path, {"a": 2}, size=(8, 8))
    _folder(tmp_path, {"b": 2}, size=(10, 12))
    with pytest.raises(LocalDataError, match="images differ in size.*set image-size"):
        read_local_images(tmp_path)
    assert read_local_images(tmp_path, size=8).images.shape == (4, 3, 8, 8)


def test_grey_folder_for_an_rgb_run(tmp_path: Path) -> None:
    written = _folder(tmp_path, {"a": 2}, mode="L")
    with pytest.raises(LocalDataError, match=r"img_000\.png: image has 1 channel.*uses 3"):
        read_local_images(tmp_path, channels=3)
    local = read_local_images(tmp_path, channels=3, allow_channel_change=True)
    assert local.images.shape == (2, 3, 8, 6)
    np.testing.assert_array_equal(local.images[0, 2], written["a"][0][0])
    grey = read_local_images(tmp_path)
    assert grey.images.shape == (2, 1, 8, 6)


def test_mixed_grey_and_colour_need_channels(tmp_path: Path) -> None:
    _folder(tmp_path, {"a": 1}, mode="L")
    _folder(tmp_path, {"b": 1}, mode="RGB")
    with pytest.raises(LocalDataError, match="mixed grey and colour.*set channels"):
        read_local_images(tmp_path)
    local = read_local_images(tmp_path, channels=1, allow_channel_change=True)
    assert local.images.shape == (2, 1, 8, 6)


# -- npz --------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["nhwc", "nchw", "nhw"])
def test_npz_layouts_round_trip(tmp_path: Path, layout: str) -> None:
    rng = np.random.default_rng(0)
    chw = rng.integers(0, 256, size=(5, 1 if layout == "nhw" else 3, 7, 9), dtype=np.uint8)
    stored = {"nchw": chw, "nhwc": chw.transpose(0, 2, 3, 1), "nhw": chw[:, 0]}[layout]
    np.savez(tmp_path / "d.npz", images=stored, labels=np.array([2, 0, 1, 2, 0]))
    local = read_local_images(tmp_path / "d.npz")
    assert local.format == "npz" and local.images.flags.c_contiguous
    np.testing.assert_array_equal(local.images, chw)
    np.testing.assert_array_equal(local.labels, [2, 0, 1, 2, 0])
    assert local.class_names == ("0", "1", "2")


def test_npz_labels_by_index_name_and_class_names(tmp_path: Path) -> None:
    images = np.zeros((3, 4, 4, 3), np.uint8)
    np.savez(tmp_path / "i.npz", images=images, labels=np.array([0, 2, 1]))
    by_index = read_local_images(tmp_path / "i.npz", class_names=["x", "y", "z"])
    np.testing.assert_array_equal(by_index.labels, [0, 2, 1])
    np.savez(tmp_path / "s.npz", images=images, labels=np.array(["dog", "cat", "dog"]))
    assert class_names_of(tmp_path / "s.npz") == ("cat", "dog")
    named = read_local_images(tmp_path / "s.npz", class_names=["dog", "fox", "cat"])
    np.testing.assert_array_equal(named.labels, [0, 2, 0])
    np.savez(
        tmp_path / "c.npz", images=images, labels=np.array([1, 0, 1]), class_names=["dog", "cat"]
    )
    assert class_names_of(tmp_path / "c.npz") == ("dog", "cat")
    mapped = read_local_images(tmp_path / "c.npz", class_names=["cat", "dog"])
    np.testing.assert_array_equal(mapped.labels, [0, 1, 0])
    with pytest.raises(LocalDataError, match="label 'dog' \\(2 rows\\) is not among"):
        read_local_images(tmp_path / "s.npz", class_names=["cat", "fox"])


def test_npz_label_out_of_range(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", images=np.zeros((2, 1, 4, 4), np.uint8), labels=np.array([0, 3]))
    with pytest.raises(LocalDataError, match="integer label 3 is out of range.*3 classes"):
        read_local_images(tmp_path / "d.npz", class_names=["a", "b", "c"])


def test_npz_floats_resize_and_bad_values(tmp_path: Path) -> None:
    floats = np.linspace(0, 1, 2 * 3 * 6 * 6).reshape(2, 3, 6, 6).astype(np.float32)
    np.savez(tmp_path / "f.npz", images=floats, labels=np.array([0, 1]))
    local = read_local_images(tmp_path / "f.npz")
    np.testing.assert_array_equal(local.images, np.rint(floats * 255).astype(np.uint8))
    assert read_local_images(tmp_path / "f.npz", size=4).images.shape == (2, 3, 4, 4)
    with pytest.raises(LocalDataError, match="images have 3 channel.*uses 1"):
        read_local_images(tmp_path / "f.npz", channels=1)
    np.savez(tmp_path / "g.npz", images=floats * 255, labels=np.array([0, 1]))
    with pytest.raises(LocalDataError, match="not \\[0, 1\\]"):
        read_local_images(tmp_path / "g.npz")
    np.savez(tmp_path / "h.npz", pixels=floats, labels=np.array([0, 1]))
    with pytest.raises(LocalDataError, match="no array 'images'"):
        read_local_images(tmp_path / "h.npz")


# -- Hugging Face -----------------------------------------------------------------------------


def _save_hf(path: Path, n: int = 6, as_dict: bool = False) -> np.ndarray:
    from datasets import ClassLabel, Dataset, DatasetDict, Features
    from datasets import Image as HFImage

    images, pixels = _hf_rows(n)
    features = Features({"image": HFImage(), "label": ClassLabel(names=["cat", "dog"])})
    ds = Dataset.from_dict({"image": images, "label": [i % 2 for i in range(n)]}, features=features)
    if as_dict:
        other = Dataset.from_dict({"image": images[:2], "label": [1, 1]}, features=features)
        DatasetDict({"test": other, "train": ds}).save_to_disk(str(path))
    else:
        ds.save_to_disk(str(path))
    return pixels


@pytest.mark.parametrize("as_dict", [False, True])
def test_hf_save_to_disk_round_trips(tmp_path: Path, as_dict: bool) -> None:
    pixels = _save_hf(tmp_path / "hf", as_dict=as_dict)
    assert detect_format(tmp_path / "hf") == "hf-disk"
    assert class_names_of(tmp_path / "hf") == ("cat", "dog")
    local = read_local_images(tmp_path / "hf", class_names=["dog", "cat"])
    assert local.format == "hf-disk"
    np.testing.assert_array_equal(local.images, pixels)
    np.testing.assert_array_equal(local.labels, [1, 0, 1, 0, 1, 0])


def test_hf_images_stored_as_paths(tmp_path: Path) -> None:
    from datasets import Dataset, Features, Value
    from datasets import Image as HFImage

    _, pixels = _hf_rows(3)
    files = []
    for i, arr in enumerate(pixels):
        files.append(str(tmp_path / f"{i}.png"))
        Image.fromarray(arr.transpose(1, 2, 0)).save(files[-1])
    features = Features({"image": HFImage(), "label": Value("string")})
    ds = Dataset.from_dict({"image": files, "label": ["b", "a", "b"]}, features=features)
    ds.save_to_disk(str(tmp_path / "hf"))
    local = read_local_images(tmp_path / "hf")
    np.testing.assert_array_equal(local.images, pixels)
    assert local.class_names == ("a", "b")
    np.testing.assert_array_equal(local.labels, [1, 0, 1])


def test_hf_missing_column_names_the_columns_and_setting(tmp_path: Path) -> None:
    _save_hf(tmp_path / "hf")
    with pytest.raises(
        LocalDataError, match="no column 'target' \\(columns: image, label\\); set "
    ):
        read_local_images(tmp_path / "hf", label_column="target")
    with pytest.raises(LocalDataError, match="no column 'img'.*set image-column"):
        read_local_images(tmp_path / "hf", image_column="img")


def test_parquet_shards_like_office_home(tmp_path: Path) -> None:
    names = ["Alarm_Clock", "Backpack", "Batteries"]
    pixels, domains, labels = _office_home_like(tmp_path / "oh", names)
    assert detect_format(tmp_path / "oh") == "parquet"
    assert class_names_of(tmp_path / "oh") == tuple(names)
    local = read_local_images(tmp_path / "oh", class_names=["Batteries", "Alarm_Clock", "Backpack"])
    assert local.format == "parquet"
    np.testing.assert_array_equal(local.images, pixels)
    np.testing.assert_array_equal(local.labels, [[1, 2, 0][k] for k in labels])
    assert local.domain_names == ("Art", "Clipart", "Product", "Real World")
    np.testing.assert_array_equal(local.domains, [local.domain_names.index(d) for d in domains])
    one_file = read_local_images(tmp_path / "oh" / "data" / "train-00001-of-00002.parquet")
    np.testing.assert_array_equal(one_file.images, pixels[6:])
    with pytest.raises(LocalDataError, match="label 'Backpack'.*add it to class-names"):
        read_local_images(tmp_path / "oh", class_names=["Alarm_Clock", "Batteries"])


def test_local_dataset_is_an_image_dataset(tmp_path: Path) -> None:
    _office_home_like(tmp_path / "office", ["a", "b", "c"])
    data = local_dataset(tmp_path / "office", size=4)
    assert isinstance(data, ImageDataset)
    assert data.name == "local:office" and data.images.dtype == np.uint8
    assert data.image_shape == (3, 4, 4) and data.num_classes == 3
    assert data.class_names == ("a", "b", "c") and data.num_domains == 4
    assert data.rows([0]).dtype == np.float32


# -- fingerprint, split -----------------------------------------------------------------------


def test_fingerprint_notices_added_and_modified_files(tmp_path: Path) -> None:
    _folder(tmp_path, {"a": 2})
    before = fingerprint(tmp_path)
    assert fingerprint(tmp_path) == before
    Image.fromarray(np.zeros((8, 6, 3), np.uint8)).save(tmp_path / "a" / "new.png")
    added = fingerprint(tmp_path)
    assert added != before
    target = tmp_path / "a" / "img_000.png"
    stat = target.stat()
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert fingerprint(tmp_path) != added
    assert fingerprint(target) != fingerprint(tmp_path / "a" / "img_001.png")


def test_split_local_is_seeded_and_disjoint(tmp_path: Path) -> None:
    _folder(tmp_path, {"a": 6, "b": 4})
    local = read_local_images(tmp_path)
    train, test = split_local(local, 0.3, seed=7)
    again = split_local(local, 0.3, seed=7)
    np.testing.assert_array_equal(train, again[0])
    np.testing.assert_array_equal(test, again[1])
    assert len(test) == 3 and not set(train) & set(test)
    np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(10))
    others = [tuple(split_local(local, 0.3, seed=s)[1]) for s in range(8)]
    assert len(set(others)) > 1
    tiny = tmp_path / "tiny.npz"
    np.savez(tiny, images=np.zeros((1, 4, 4), np.uint8), labels=np.array([0]))
    with pytest.raises(LocalDataError, match="at least 2"):
        split_local(read_local_images(tiny), 0.2, seed=0)
