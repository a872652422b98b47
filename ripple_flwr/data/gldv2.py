"""GLDv2-23k (TensorFlow Federated's ``gld23k``): landmark photos split by photographer.

The paper's natural-split benchmark: 233 users (each a client), 203 landmark
classes, 23,080 training images, plus a test CSV that the server holds. Files:

* ``mini_gld_train_split.csv`` (``user_id,image_id,class``) and
  ``mini_gld_test.csv`` (``image_id,class``), or the larger set's
  ``federated_train.csv`` and ``test.csv`` (same columns), in the root or in
  one of its ``landmarks-user-160k``/``datasets`` folders;
* the images ``<image_id>.jpg`` in ``<root>/images/``, in ``<root>/``, or in
  GLDv2's own ``<root>/train/<a>/<b>/<c>/`` layout (``a, b, c`` the id's first
  three characters).

Rows are the training rows (CSV order) then the test rows. ``labels`` number
the class ids in their sorted order (``class_names`` are the ids),
``groups`` the users in sorted ``user_id`` order, ``-1`` for the test rows
(the server's). Images are RGB ``(3, size, size)`` uint8, decoded on first use.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ripple_flwr.data.base import ImageDataset
from ripple_flwr.data.images import FileRows, LazyImages
from ripple_flwr.data.loaders import default_data_root

GLDV2_SIZE = 64  # the paper's image side
GLDV2_SUBDIR = "gldv2"  # under default_data_root() when no root is given
# (train CSV, test CSV, dataset name), most specific first.
GLDV2_SPLITS = (
    ("mini_gld_train_split.csv", "mini_gld_test.csv", "gldv2-23k"),
    ("federated_train.csv", "test.csv", "gldv2-160k"),
)
_CSV_DIRS = ("", "landmarks-user-160k", "datasets")
_TRAIN_COLUMNS = ("user_id", "image_id", "class")
_TEST_COLUMNS = ("image_id", "class")
_MINI_GLD_URL = "https://storage.googleapis.com/tff-datasets-public"
_CHANNELS = 3


def _layouts(root: Path) -> dict[str, Callable[[str], Path]]:
    """Where ``<image_id>.jpg`` may live: a description -> a function of the id."""
    return {
        f"{root}/images/<image_id>.jpg": lambda i: root / "images" / f"{i}.jpg",
        f"{root}/<image_id>.jpg": lambda i: root / f"{i}.jpg",
        f"{root}/train/<a>/<b>/<c>/<image_id>.jpg": lambda i: (
            root / "train" / i[0] / i[1] / i[2] / f"{i}.jpg"
        ),
        f"{root}/images/<a>/<b>/<c>/<image_id>.jpg": lambda i: (
            root / "images" / i[0] / i[1] / i[2] / f"{i}.jpg"
        ),
    }


def _missing_message(root: Path, what: str) -> str:
    return (
        f"GLDv2-23k not found under {root} ({what}): put mini_gld_train_split.csv "
        f"(user_id,image_id,class) and mini_gld_test.csv (image_id,class) there (from "
        f"{_MINI_GLD_URL}/, or landmarks-user-160k/federated_train.csv and test.csv), and the "
        f"images as {root}/images/<image_id>.jpg (or {root}/train/<a>/<b>/<c>/<image_id>.jpg, "
        "GLDv2's layout); set the directory with data-root."
    )


def _find_csvs(root: Path) -> tuple[Path, Path, str]:
    for train_name, test_name, name in GLDV2_SPLITS:
        for sub in _CSV_DIRS:
            train, test = root / sub / train_name, root / sub / test_name
            if train.is_file() and test.is_file():
                return train, test, name
            if train.is_file() or test.is_file():
                missing = test if train.is_file() else train
                raise FileNotFoundError(_missing_message(root, f"missing {missing}"))
    raise FileNotFoundError(_missing_message(root, "no split CSV files"))


def _read_csv(path: Path, columns: tuple[str, ...]) -> list[tuple[str, ...]]:
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in columns if c not in header]
        if missing:
            raise ValueError(
                f"{path}: no column(s) {', '.join(missing)} in the header {header} "
                f"(expected {','.join(columns)})"
            )
        at = [header.index(c) for c in columns]
        rows = []
        for line, row in enumerate(reader, start=2):
            if not row or not any(cell.strip() for cell in row):
                continue
            if len(row) < len(header):
                raise ValueError(f"{path}:{line}: {len(row)} fields, header has {len(header)}")
            rows.append(tuple(row[k].strip() for k in at))
    if not rows:
        raise ValueError(f"{path} has no rows")
    return rows


def _sorted_ids(values: set[str]) -> list[str]:
    """Numeric order when every id is an integer (GLDv2's are), else string order."""
    try:
        return sorted(values, key=lambda v: (int(v), v))
    except ValueError:
        return sorted(values)


def _image_paths(root: Path, image_ids: list[str]) -> list[str]:
    layouts = _layouts(root)
    first = image_ids[0]
    found = [where for where, path_of in layouts.items() if path_of(first).is_file()]
    if not found:
        raise FileNotFoundError(
            _missing_message(root, f"image {first}.jpg is in none of: {'; '.join(layouts)}")
        )
    where = found[0]
    path_of = layouts[where]
    paths = [str(path_of(i)) for i in image_ids]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(
            f"GLDv2: {len(missing)} of {len(paths)} images listed in the CSV files are missing "
            f"from {where} (e.g. {', '.join(missing[:3])})"
        )
    return paths


def load_gldv2(root: str | None = None, *, size: int = GLDV2_SIZE) -> ImageDataset:
    """GLDv2-23k (or the 160k set) from ``root`` (default ``$RIPPLE_DATA_ROOT/gldv2``).

    The users are the natural clients (``groups``), the test CSV's rows the
    server's (``groups == -1``); see the module docstring for the layout.
    """
    if isinstance(size, bool) or int(size) != size or size < 1:
        raise ValueError(f"image size must be a positive integer, got {size!r}")
    size = int(size)
    directory = Path(root).expanduser() if root else default_data_root() / GLDV2_SUBDIR
    train_csv, test_csv, name = _find_csvs(directory)
    train = _read_csv(train_csv, _TRAIN_COLUMNS)
    test = _read_csv(test_csv, _TEST_COLUMNS)
    image_ids = [r[1] for r in train] + [r[0] for r in test]
    classes = [r[2] for r in train] + [r[1] for r in test]
    class_names = _sorted_ids(set(classes))
    class_id = {c: k for k, c in enumerate(class_names)}
    users = _sorted_ids({r[0] for r in train})
    user_id = {u: k for k, u in enumerate(users)}
    groups = np.array([user_id[r[0]] for r in train] + [-1] * len(test), dtype=np.int64)
    paths = _image_paths(directory, image_ids)
    return ImageDataset(
        name=name,
        images=LazyImages(FileRows(paths, size, _CHANNELS), len(paths), (_CHANNELS, size, size)),  # type: ignore[arg-type]
        labels=np.array([class_id[c] for c in classes], dtype=np.int64),
        num_classes=len(class_names),
        groups=groups,
        class_names=tuple(class_names),
    )
