"""The paper's photo benchmarks: Office-Home (parquet or ImageFolder) and GLDv2 (CSV + JPEG).

Everything is offline: tiny copies of both published layouts are written here, and
Office-Home's download is replaced by a failure.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ripple_flwr.data import (
    available_datasets,
    build_federation,
    embed_size_of,
    has_natural_split,
    image_shape_of,
    load_dataset,
    load_gldv2,
    load_office_home,
)
from ripple_flwr.data import images as images_module
from ripple_flwr.data import office_home as office_home_module
from ripple_flwr.data.images import LazyImages

DOMAINS = ["Real World", "Art", "Product", "Clipart"]  # not sorted: ids follow sorted names
CLASSES = ["Bike", "Alarm_Clock", "Chair"]  # ClassLabel order, kept as the parquet says
PER_CELL = 5  # images per (domain, class)


def _value(d: int, c: int, k: int) -> int:
    """The grey level of image k of (domain d, class c): every image is told apart."""
    return 10 + 60 * d + 15 * c + 2 * k


def _solid(value: int, side: int = 32, mode: str = "RGB") -> Image.Image:
    if mode == "L":
        return Image.new("L", (side, side), value)
    return Image.new("RGB", (side, side), (value, value // 2, 255 - value))


@pytest.fixture(autouse=True)
def _no_download(monkeypatch):
    def offline(directory):
        raise OSError("offline (test)")

    monkeypatch.setattr(office_home_module, "_download", offline)


# --------------------------------------------------------------------------- Office-Home


def _office_rows():
    """(image, domain name, class index, value) in the order written."""
    rows = []
    for d, domain in enumerate(DOMAINS):
        for c in range(len(CLASSES)):
            for k in range(PER_CELL):
                value = _value(d, c, k)
                mode = "L" if (d, c, k) == (1, 2, 0) else "RGB"  # one grey photo
                rows.append((_solid(value, mode=mode), domain, c, value))
    return rows


@pytest.fixture(scope="module")
def office_parquet(tmp_path_factory) -> Path:
    """flwrlabs/office-home's layout: data/train-*.parquet, two files."""
    import datasets
    import pyarrow.parquet as pq
    from datasets import ClassLabel, Features, Value
    from datasets import Image as ImageFeature

    root = tmp_path_factory.mktemp("office-home-parquet")
    (root / "data").mkdir()
    rows = _office_rows()
    features = Features(
        {"image": ImageFeature(), "domain": Value("string"), "label": ClassLabel(names=CLASSES)}
    )
    half = len(rows) // 2
    for i, part in enumerate((rows[:half], rows[half:])):
        path = root / "data" / f"train-0000{i}-of-00002.parquet"
        ds = datasets.Dataset.from_dict(
            {
                "image": [r[0] for r in part],
                "domain": [r[1] for r in part],
                "label": [r[2] for r in part],
            },
            features=features,
        )
        ds.to_parquet(str(path))
        # Small row groups, so reading a row means finding its group.
        pq.write_table(pq.read_table(path), path, row_group_size=7)
    return root


@pytest.fixture(scope="module")
def office_tree(tmp_path_factory) -> Path:
    """The original release: OfficeHomeDataset_10072016/<domain>/<class>/*.jpg."""
    root = tmp_path_factory.mktemp("office-home-tree")
    tree = root / "OfficeHomeDataset_10072016"
    for d, domain in enumerate(DOMAINS):
        for c, name in enumerate(CLASSES):
            folder = tree / domain / name
            folder.mkdir(parents=True)
            for k in range(PER_CELL):
                _solid(_value(d, c, k)).save(folder / f"{k:05d}.jpg", quality=95)
    (tree / "Art" / "readme.txt").write_text("not an image")
    return root


def _expected_office_labels():
    rows = _office_rows()
    domain_id = {name: i for i, name in enumerate(sorted(DOMAINS))}
    return (
        np.array([r[2] for r in rows]),
        np.array([domain_id[r[1]] for r in rows]),
        np.array([r[3] for r in rows]),
    )


def test_office_home_parquet_labels_without_decoding(office_parquet, monkeypatch):
    decoded = []
    real = office_home_module._decode_bytes
    monkeypatch.setattr(
        office_home_module,
        "_decode_bytes",
        lambda data, where: decoded.append(where) or real(data, where),
    )
    ds = load_office_home(str(office_parquet), size=32)
    labels, domains, _ = _expected_office_labels()
    assert ds.name == "office-home" and ds.class_names == tuple(CLASSES)
    assert ds.num_classes == 3 and ds.num_domains == 4
    np.testing.assert_array_equal(ds.labels, labels)
    np.testing.assert_array_equal(ds.domains, domains)
    assert ds.labels.dtype == np.int64 and ds.domains.dtype == np.int64
    assert isinstance(ds.images, LazyImages) and ds.images.shape == (60, 3, 32, 32)
    assert decoded == []  # labels, domains and names came from the columns alone


def test_office_home_parquet_decodes_only_requested_rows(office_parquet, monkeypatch):
    decoded = []
    real = office_home_module._decode_bytes
    monkeypatch.setattr(
        office_home_module,
        "_decode_bytes",
        lambda data, where: decoded.append(where) or real(data, where),
    )
    ds = load_office_home(str(office_parquet), size=32)
    _, _, values = _expected_office_labels()
    reader = ds.images._decode
    assert len(reader.files) == 2 and len(reader._starts) == 10  # 2 files x 5 groups of <= 7
    rows = [3, 31, 59, 30]  # both files, several row groups
    images = ds.images[rows]
    assert images.dtype == np.uint8 and images.shape == (4, 3, 32, 32)
    for img, value in zip(images, values[rows], strict=True):
        np.testing.assert_array_equal(img[0], value)  # PNG: lossless
        np.testing.assert_array_equal(img[2], 255 - value)
    assert len(decoded) == 4 and sorted(ds.images._rows) == sorted(rows)
    ds.images[rows]  # decoded rows are kept
    assert len(decoded) == 4
    floats = ds.rows([3])
    assert floats.dtype == np.float32 and floats.max() <= 1.0


def test_office_home_grey_photo_becomes_rgb(office_parquet):
    ds = load_office_home(str(office_parquet), size=8)
    _, domains, values = _expected_office_labels()
    # (domain 1 = "Art", class 2, k 0) was written grey: three equal channels.
    grey = next(i for i, r in enumerate(_office_rows()) if r[0].mode == "L")
    img = ds.images[grey]
    assert img.shape == (3, 8, 8)
    np.testing.assert_array_equal(img[0], values[grey])
    np.testing.assert_array_equal(img[1], values[grey])


def test_office_home_size_resizes(office_parquet):
    ds = load_office_home(str(office_parquet), size=12)
    assert ds.image_shape == (3, 12, 12) and ds.images[0].shape == (3, 12, 12)
    default = load_office_home(str(office_parquet))
    assert default.image_shape == (3, 224, 224)
    with pytest.raises(ValueError, match="positive integer"):
        load_office_home(str(office_parquet), size=0)


def test_office_home_dataset_pickles(office_parquet):
    ds = load_office_home(str(office_parquet), size=16)
    ds.images[5]
    again = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(again.images[[5, 40]], ds.images[[5, 40]])


def test_office_home_image_folder_tree(office_tree, monkeypatch):
    opened = []
    real = images_module.open_image  # the files' decoder (FileRows) reads through it
    monkeypatch.setattr(images_module, "open_image", lambda path: opened.append(path) or real(path))
    ds = load_office_home(str(office_tree), size=16)
    # Rows: sorted domains, then sorted classes, then sorted files.
    domain_names, class_names = sorted(DOMAINS), sorted(CLASSES)
    assert ds.class_names == tuple(class_names) and ds.num_classes == 3 and ds.num_domains == 4
    assert ds.images.shape == (60, 3, 16, 16) and opened == []
    expected = [
        (d, c, _value(DOMAINS.index(dn), CLASSES.index(cn), k))
        for d, dn in enumerate(domain_names)
        for c, cn in enumerate(class_names)
        for k in range(PER_CELL)
    ]
    np.testing.assert_array_equal(ds.domains, [e[0] for e in expected])
    np.testing.assert_array_equal(ds.labels, [e[1] for e in expected])
    img = ds.images[[17]]
    assert len(opened) == 1 and opened[0].endswith(".jpg")
    assert abs(int(img[0, 0].mean()) - expected[17][2]) <= 3  # JPEG: nearly exact


def test_office_home_missing_names_what_to_put_where(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        load_office_home(str(tmp_path))
    message = str(err.value)
    assert str(tmp_path) in message
    assert "data/train-0000{0,1,2}-of-00003.parquet" in message
    assert "huggingface-cli download flwrlabs/office-home --repo-type dataset" in message
    assert "<domain>/<class>/*.jpg" in message
    assert message.count("Office-Home not found") == 1


def test_office_home_wrong_parquet_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"img": [b"x"], "y": [0]}), tmp_path / "other.parquet")
    with pytest.raises(ValueError, match="no column.*image, domain, label"):
        load_office_home(str(tmp_path))


def test_office_home_dirichlet_over_domains(office_parquet):
    ds = load_dataset("office-home", str(office_parquet), image_size=16)
    assert ds.image_shape == (3, 16, 16)
    fed = build_federation(
        ds,
        label_kind="domain",
        num_partitions=4,
        partition_size=10,
        alpha=0.1,
        aux_size=8,
        num_components=4,
        seed=3,
    )
    assert fed.num_partitions == 4 and fed.mixtures.shape == (4, 4)
    np.testing.assert_array_equal(np.bincount(ds.domains[fed.aux_indices], minlength=4), [2] * 4)
    np.testing.assert_allclose(fed.mixtures.sum(1), 1.0)
    everything = np.concatenate([fed.aux_indices, *fed.train_indices, *fed.test_indices])
    assert len(np.unique(everything)) == len(everything) == 48
    # One client's data decodes that client's rows only.
    x_train, y_train, x_test, _ = fed.client_data(1)
    assert x_train.dtype == np.float32 and x_train.shape[1:] == (3, 16, 16)
    assert sorted(ds.images._rows) == sorted(fed.client_indices(1).tolist())
    np.testing.assert_array_equal(y_train, ds.labels[fed.train_indices[1]])
    _, aux_labels = fed.aux_data()
    np.testing.assert_array_equal(np.bincount(aux_labels), [2] * 4)


# --------------------------------------------------------------------------- registry


def test_registry_knows_the_photo_sets(office_parquet):
    names = available_datasets()
    assert "office-home" in names and "gldv2-23k" in names
    assert "rotated-office-home" not in names and "rotated-gldv2-23k" not in names
    assert "rotated-cifar10" in names
    assert image_shape_of("office-home") == (3, 224, 224)
    assert image_shape_of("gldv2-23k") == (3, 64, 64)
    assert image_shape_of("office-home", 96) == (3, 96, 96)
    assert image_shape_of("cifar10", 96) == (3, 32, 32)
    assert embed_size_of("office-home") == embed_size_of("GLDv2-23k") == 64
    assert embed_size_of("mnist") is None
    assert has_natural_split("gldv2-23k") and not has_natural_split("office-home")
    with pytest.raises(ValueError, match="rotated-<name> needs the images in memory.*label-kind"):
        load_dataset("rotated-office-home", str(office_parquet))
    with pytest.raises(ValueError, match="image-size applies to gldv2-23k, office-home and local"):
        load_dataset("fashion-mnist", "/nonexistent", image_size=64)
    with pytest.raises(ValueError, match="cifar10 is 32x32"):
        load_dataset("rotated-cifar10", "/nonexistent", image_size=64)
    with pytest.raises(ValueError, match="image_size must be an integer >= 0"):
        load_dataset("office-home", str(office_parquet), image_size=-1)
    ds = load_dataset(" Office-Home ", str(office_parquet))
    assert ds.image_shape == (3, 224, 224)


def test_cached_dataset_passes_the_image_size(office_parquet):
    from ripple_flwr.data.cache import cached_dataset
    from ripple_flwr.settings import RunSettings

    settings = RunSettings.of(dataset="office-home", data_root=str(office_parquet), image_size=20)
    assert cached_dataset(settings).image_shape == (3, 20, 20)
    settings = RunSettings.of(dataset="office-home", data_root=str(office_parquet))
    assert cached_dataset(settings).image_shape == (3, 224, 224)


# --------------------------------------------------------------------------- GLDv2

# user_id -> its (image ids, classes); ids sort numerically: 3 < 7 < 12 < 40 < 41 < 100.
USERS = {
    "12": ["104", "5", "5"],
    "3": ["27", "27", "9", "63"],
    "100": ["5", "9"],
    "7": ["63", "63", "63", "104", "9"],
    "41": ["27", "5", "104"],
    "40": ["9", "9", "27", "5", "63", "104"],
}
TEST_CLASSES = ["5", "9", "27", "63", "104", "5", "9", "27", "63", "104"]
CLASS_IDS = ["5", "9", "27", "63", "104"]  # numeric order
USER_ORDER = ["3", "7", "12", "40", "41", "100"]


def _image_id(n: int) -> str:
    return f"{(n * 2654435761) % 16**16:016x}"


def _write_gldv2(root: Path, *, layout: str = "images"):
    train_rows, test_rows, n = [], [], 0
    for user, classes in USERS.items():
        for cls in classes:
            train_rows.append((user, _image_id(n), cls))
            n += 1
    for cls in TEST_CLASSES:
        test_rows.append((_image_id(n), cls))
        n += 1
    train_name, test_name = "mini_gld_train_split.csv", "mini_gld_test.csv"
    (root / train_name).write_text(
        "user_id,image_id,class\n" + "".join(f"{u},{i},{c}\n" for u, i, c in train_rows)
    )
    (root / test_name).write_text("image_id,class\n" + "".join(f"{i},{c}\n" for i, c in test_rows))
    for k, image_id in enumerate([r[1] for r in train_rows] + [r[0] for r in test_rows]):
        if layout == "images":
            path = root / "images" / f"{image_id}.jpg"
        else:
            path = root / "train" / image_id[0] / image_id[1] / image_id[2] / f"{image_id}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        _solid(8 * k + 4, side=20).save(path, quality=95)
    return train_rows, test_rows


@pytest.fixture(scope="module")
def gld_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gldv2")
    _write_gldv2(root)
    return root


def test_gldv2_rows_labels_and_users(gld_root, monkeypatch):
    opened = []
    real = images_module.open_image  # the files' decoder (FileRows) reads through it
    monkeypatch.setattr(images_module, "open_image", lambda p: opened.append(p) or real(p))
    ds = load_gldv2(str(gld_root))
    n_train = sum(len(v) for v in USERS.values())
    assert ds.name == "gldv2-23k" and ds.class_names == tuple(CLASS_IDS)
    assert ds.num_classes == 5 and ds.domains is None
    assert ds.images.shape == (n_train + len(TEST_CLASSES), 3, 64, 64) and opened == []
    expected_labels = [CLASS_IDS.index(c) for cs in USERS.values() for c in cs]
    expected_labels += [CLASS_IDS.index(c) for c in TEST_CLASSES]
    np.testing.assert_array_equal(ds.labels, expected_labels)
    expected_groups = [USER_ORDER.index(u) for u, cs in USERS.items() for _ in cs]
    np.testing.assert_array_equal(ds.groups, expected_groups + [-1] * len(TEST_CLASSES))
    img = ds.images[[2]]
    assert img.shape == (1, 3, 64, 64) and len(opened) == 1
    assert abs(int(img[0, 0].mean()) - (8 * 2 + 4)) <= 3
    small = load_dataset("gldv2-23k", str(gld_root), image_size=16)
    assert small.image_shape == (3, 16, 16) and small.images[0].shape == (3, 16, 16)


def test_gldv2_nested_layout(tmp_path):
    _write_gldv2(tmp_path, layout="nested")
    ds = load_gldv2(str(tmp_path), size=8)
    assert ds.images[[0, len(ds.labels) - 1]].shape == (2, 3, 8, 8)


def test_gldv2_natural_federation(gld_root):
    ds = load_gldv2(str(gld_root), size=8)
    kwargs = dict(
        num_partitions=4,
        new_partitions=2,
        partition_size=999,  # ignored: the users are the clients
        alpha=0.1,
        aux_size=5,
        num_components=5,
        test_fraction=0.25,
        seed=1,
    )
    fed = build_federation(ds, **kwargs)
    assert fed.num_partitions == 6 and fed.num_train_partitions == 4
    assert fed.settings["split"] == "natural" and fed.settings["num_groups"] == 6
    for pid in range(6):
        rows = np.sort(fed.client_indices(pid))
        np.testing.assert_array_equal(rows, np.flatnonzero(ds.groups == pid))
        assert len(fed.train_indices[pid]) >= 1 and len(fed.test_indices[pid]) >= 1
    # D_aux: the server's test rows only, one per class.
    assert np.all(ds.groups[fed.aux_indices] == -1)
    np.testing.assert_array_equal(np.bincount(ds.labels[fed.aux_indices]), [1] * 5)
    np.testing.assert_allclose(fed.mixtures.sum(1), 1.0)
    np.testing.assert_allclose(
        fed.mixtures[1], np.bincount(ds.labels[ds.groups == 1], minlength=5) / 5
    )
    again = build_federation(ds, **kwargs)
    for a, b in zip(fed.train_indices, again.train_indices, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(fed.aux_indices, again.aux_indices)
    # Every server row as D_aux is allowed; fewer users than asked for is not.
    assert len(build_federation(ds, **{**kwargs, "aux_size": 10}).aux_indices) == 10
    with pytest.raises(ValueError, match=r"has 6 natural clients \(users\), but num_partitions=5 "):
        build_federation(ds, **{**kwargs, "num_partitions": 5})
    with pytest.raises(ValueError, match=r"aux_size must be in \[5, 10\].*natural split"):
        build_federation(ds, **{**kwargs, "aux_size": 11})


def test_natural_split_refuses_a_one_image_user(gld_root):
    import dataclasses

    ds = load_gldv2(str(gld_root), size=8)
    groups = ds.groups.copy()
    groups[np.flatnonzero(groups == 2)[1:]] = 5  # user 2 keeps one image
    lonely = dataclasses.replace(ds, groups=groups)
    with pytest.raises(ValueError, match=r"user 2 of 'gldv2-23k' \(client 2\) has 1 image"):
        build_federation(
            lonely, num_partitions=3, partition_size=2, alpha=1.0, aux_size=5, num_components=5
        )


def test_gldv2_missing_files_say_what_to_put_where(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        load_gldv2(str(tmp_path))
    message = str(err.value)
    assert str(tmp_path) in message and "mini_gld_train_split.csv" in message
    assert "mini_gld_test.csv" in message and f"{tmp_path}/images/<image_id>.jpg" in message
    (tmp_path / "mini_gld_train_split.csv").write_text("user_id,image_id,class\n1,abc,5\n")
    with pytest.raises(FileNotFoundError, match="missing .*mini_gld_test.csv"):
        load_gldv2(str(tmp_path))
    (tmp_path / "mini_gld_test.csv").write_text("image_id,class\nabd,5\n")
    with pytest.raises(FileNotFoundError, match=r"image abc.jpg is in none of"):
        load_gldv2(str(tmp_path))
    (tmp_path / "images").mkdir()
    _solid(3, side=4).save(tmp_path / "images" / "abc.jpg")
    with pytest.raises(FileNotFoundError, match=r"1 of 2 images .* missing .*abd.jpg"):
        load_gldv2(str(tmp_path))
    (tmp_path / "mini_gld_test.csv").write_text("image,label\nabd,5\n")
    with pytest.raises(ValueError, match="no column.*image_id, class"):
        load_gldv2(str(tmp_path))


def test_gldv2_160k_file_names(tmp_path):
    sub = tmp_path / "landmarks-user-160k"
    sub.mkdir()
    (sub / "federated_train.csv").write_text("user_id,image_id,class\n2,aaa,1\n2,aab,0\n")
    (sub / "test.csv").write_text("image_id,class\naac,1\n")
    for i in ("aaa", "aab", "aac"):
        _solid(50, side=4).save(tmp_path / f"{i}.jpg")  # images straight in the root
    ds = load_gldv2(str(tmp_path), size=4)
    assert ds.name == "gldv2-160k" and ds.class_names == ("0", "1")
    np.testing.assert_array_equal(ds.labels, [1, 0, 1])
    np.testing.assert_array_equal(ds.groups, [0, 0, -1])
