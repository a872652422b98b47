"""The file layouts a node's own data may come in, read without decoding any image.

Each reader returns a :class:`RawData`: where the pixels are (image files, encoded
bytes, or an in-memory array) and the labels as stored. :mod:`ripple_flwr.data.local`
maps the labels to the run's classes and decodes. See that module for the rules.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ripple_flwr.data.images import open_image

IMAGE_EXTENSIONS = frozenset(
    (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")
)
FORMATS = ("imagefolder", "npz", "hf-disk", "parquet")
ACCEPTED = (
    "an ImageFolder (<class>/<image> subfolders), an .npz file with arrays 'images' and "
    "'labels', a Hugging Face save_to_disk folder, or .parquet file(s)"
)
DOMAIN_COLUMN = "domain"


class LocalDataError(ValueError):
    """A node's own data cannot be used: one line naming the path, the problem and the fix."""


@dataclass(frozen=True)
class RawLabels:
    """Labels as stored: ints indexing ``names`` (folders, ClassLabel, npz class_names),
    plain ints (``names`` None), or strings (``values`` of dtype str, ``names`` None)."""

    values: np.ndarray
    names: tuple[str, ...] | None = None


@dataclass(frozen=True)
class RawData:
    """One layout's rows before decoding: ``open(i)`` gives row ``i`` as a PIL image,
    ``name(i)`` names it in messages; npz sets ``array`` (uint8 ``(n, C, H, W)``) instead."""

    n: int
    labels: RawLabels
    open: Callable[[int], Any] | None = None
    name: Callable[[int], str] | None = None
    array: np.ndarray | None = None
    domains: RawLabels | None = None


def _walk(root: Path) -> list[Path]:
    """Every non-hidden file below ``root``, sorted by relative path (hidden folders skipped)."""
    found = []
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found.extend(Path(top) / f for f in files if not f.startswith("."))
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def _is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_EXTENSIONS and not path.name.startswith(".")


def detect_format(path: str | os.PathLike[str]) -> str:
    """``"imagefolder"``, ``"npz"``, ``"hf-disk"`` or ``"parquet"``: the layout at ``path``.

    A folder with ``dataset_info.json`` + ``state.json`` (a ``Dataset``) or
    ``dataset_dict.json`` (a ``DatasetDict``) is ``hf-disk``; a ``.parquet`` file
    or a folder with ``*.parquet`` anywhere below it is ``parquet``; a folder of
    subfolders is an ImageFolder; a ``.npz`` file is ``npz``.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise LocalDataError(f"{p}: no such file or folder; point the node's data at {ACCEPTED}")
    if p.is_file():
        if p.suffix.lower() in (".npz", ".parquet"):
            return p.suffix.lower()[1:]
        raise LocalDataError(f"{p}: not a data file (expected .npz or .parquet); use {ACCEPTED}")
    if (p / "dataset_dict.json").is_file() or (
        (p / "dataset_info.json").is_file() and (p / "state.json").is_file()
    ):
        return "hf-disk"
    entries = [e for e in p.iterdir() if not e.name.startswith(".")]
    if not entries:
        raise LocalDataError(f"{p}: the folder is empty; put {ACCEPTED} there")
    files = _walk(p)
    if any(f.suffix.lower() == ".parquet" for f in files):
        return "parquet"
    if any(e.is_dir() for e in entries):
        return "imagefolder"
    if any(_is_image(f) for f in files):
        raise LocalDataError(
            f"{p}: images lie directly in the folder; move them into one subfolder per class "
            "(<folder>/<class>/<image>)"
        )
    raise LocalDataError(f"{p}: unknown layout (no class folders, .npz or parquet); use {ACCEPTED}")


def fingerprint(path: str | os.PathLike[str]) -> str:
    """Hash of the names, sizes and modification times of the files at ``path`` (no reading).

    Changes when a file is added, removed, renamed or rewritten: a key for a
    cache of the decoded arrays. Hidden files and folders are ignored.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise LocalDataError(f"{p}: no such file or folder; point the node's data at {ACCEPTED}")
    files = [p] if p.is_file() else _walk(p)
    digest = hashlib.sha256()
    for f in files:
        st = f.stat()
        rel = f.name if f == p else f.relative_to(p).as_posix()
        digest.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:24]


# -- ImageFolder ------------------------------------------------------------------------


def read_imagefolder(root: Path) -> RawData:
    """Class folders sorted by name, each one's images sorted by relative path."""
    classes = sorted(e.name for e in root.iterdir() if e.is_dir() and not e.name.startswith("."))
    files: list[Path] = []
    labels: list[int] = []
    for k, cls in enumerate(classes):
        found = [f for f in _walk(root / cls) if _is_image(f)]
        if not found:
            exts = " ".join(sorted(IMAGE_EXTENSIONS))
            raise LocalDataError(
                f"{root}: class folder {cls!r} has no images ({exts}); add images to it or "
                "remove it"
            )
        files.extend(found)
        labels.extend([k] * len(found))
    return RawData(
        n=len(files),
        labels=RawLabels(np.asarray(labels, dtype=np.int64), tuple(classes)),
        open=lambda i: open_image(str(files[i])),
        name=lambda i: str(files[i]),
    )


# -- npz --------------------------------------------------------------------------------


def _npz_layout(images: np.ndarray, path: Path) -> np.ndarray:
    """``(n,H,W)``, ``(n,C,H,W)`` or ``(n,H,W,C)`` -> ``(n,C,H,W)`` (a view).

    Axis 1 of size 1 or 3 means NCHW; otherwise axis 3 of size 1 or 3 means NHWC.
    """
    if images.ndim == 3:
        return images[:, None]
    if images.ndim == 4 and images.shape[1] in (1, 3):
        return images
    if images.ndim == 4 and images.shape[3] in (1, 3):
        return images.transpose(0, 3, 1, 2)
    raise LocalDataError(
        f"{path}: 'images' has shape {images.shape}; expected (n, H, W), (n, C, H, W) or "
        "(n, H, W, C) with C = 1 or 3; save the array in one of those layouts"
    )


def _npz_pixels(images: np.ndarray, path: Path) -> np.ndarray:
    if images.dtype == np.uint8:
        return images
    if np.issubdtype(images.dtype, np.floating):
        if not np.all(np.isfinite(images)):
            raise LocalDataError(f"{path}: 'images' contains NaN or Inf; fix or drop those rows")
        lo, hi = float(images.min(initial=0.0)), float(images.max(initial=0.0))
        if lo < 0.0 or hi > 1.0:
            raise LocalDataError(
                f"{path}: float 'images' range over [{lo:g}, {hi:g}], not [0, 1]; divide by 255 "
                "or save them as uint8"
            )
        return np.rint(images * 255.0).astype(np.uint8)
    raise LocalDataError(
        f"{path}: 'images' has dtype {images.dtype}; save uint8 (0..255) or floats in [0, 1]"
    )


def read_npz(path: Path, *, labels_only: bool = False) -> RawData:
    """Arrays ``images`` and ``labels`` (ints or strings), optional ``class_names``."""
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files if k in ("labels", "class_names")}
            if "images" in f.files and not labels_only:
                arrays["images"] = f["images"]
            keys = list(f.files)
    except (OSError, ValueError, EOFError) as err:
        raise LocalDataError(
            f"{path}: cannot read the .npz ({err}); save it with numpy.savez of plain (not "
            "object) arrays"
        ) from err
    missing = [k for k in ("images", "labels") if k not in keys]
    if missing:
        raise LocalDataError(
            f"{path}: no array {' or '.join(map(repr, missing))} (found {keys}); save the "
            "pixels as 'images' and the labels as 'labels'"
        )
    labels = np.asarray(arrays["labels"]).reshape(-1)
    names = arrays.get("class_names")
    if labels.dtype.kind not in "iuU":
        raise LocalDataError(f"{path}: 'labels' has dtype {labels.dtype}; save ints or strings")
    if labels.dtype.kind == "U" and names is not None:
        raise LocalDataError(f"{path}: string 'labels' need no 'class_names'; drop one of them")
    raw = RawLabels(labels, None if names is None else tuple(str(s) for s in names.reshape(-1)))
    if labels_only:
        return RawData(n=len(labels), labels=raw)
    images = _npz_pixels(_npz_layout(np.asarray(arrays["images"]), path), path)
    if len(images) != len(labels):
        raise LocalDataError(
            f"{path}: {len(images)} images but {len(labels)} labels; save one label per image"
        )
    return RawData(n=len(labels), labels=raw, array=images, name=lambda i: f"{path} row {i}")


# -- Hugging Face (save_to_disk, parquet) -------------------------------------------------


def _parquet_files(path: Path) -> list[Path]:
    return [path] if path.is_file() else [f for f in _walk(path) if f.suffix == ".parquet"]


def _read_arrow(path: Path, fmt: str, columns: list[str]) -> tuple[Any, Any]:
    """``(table, features)``: the present ``columns`` of the data, and its features.

    ``hf-disk``: ``datasets.load_from_disk`` (memory-mapped); a ``DatasetDict``
    gives its ``train`` split, else all splits concatenated in their saved order.
    ``parquet``: the files (sorted by path) read with pyarrow, the features from the
    ``datasets`` metadata they carry (``Features.from_arrow_schema``). Neither
    touches the network or the ``datasets`` cache.
    """
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if fmt == "hf-disk":
            ds = datasets.load_from_disk(str(path))
            if isinstance(ds, datasets.DatasetDict):
                splits = [ds["train"]] if "train" in ds else list(ds.values())
                ds = datasets.concatenate_datasets(splits) if len(splits) > 1 else splits[0]
            present = [c for c in columns if c in ds.column_names]
            return ds.with_format("arrow").select_columns(present)[:], ds.features
        files = _parquet_files(path)
        schema = pq.read_schema(files[0])
        present = [c for c in columns if c in schema.names]
        tables = [pq.read_table(f, columns=present) for f in files]
        return pa.concat_tables(tables), datasets.Features.from_arrow_schema(schema)
    except (OSError, ValueError, pa.ArrowException) as err:
        raise LocalDataError(
            f"{path}: cannot read the {fmt} data ({err}); re-save it with datasets"
        ) from err


def _column_labels(table: Any, feature: Any, column: str, where: Path) -> RawLabels:
    import datasets
    import pyarrow as pa

    col = table.column(column)
    if col.null_count:
        raise LocalDataError(f"{where}: column {column!r} has {col.null_count} empty value(s)")
    if isinstance(feature, datasets.ClassLabel):
        return RawLabels(np.asarray(col.to_numpy(), dtype=np.int64), tuple(feature.names))
    if pa.types.is_dictionary(col.type):
        col = col.cast(pa.string())
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        return RawLabels(np.asarray(col.to_pylist(), dtype=str))
    if pa.types.is_integer(col.type):
        return RawLabels(np.asarray(col.to_numpy(), dtype=np.int64))
    raise LocalDataError(
        f"{where}: column {column!r} has type {col.type}; labels must be a ClassLabel, "
        "strings or integers"
    )


def _image_bytes(table: Any, column: str, where: Path) -> tuple[Any, list]:
    """Encoded bytes (an Arrow array, read row by row: no copy of the whole column) and
    paths of an ``Image`` (or binary, or path string) column."""
    import pyarrow as pa

    col = table.column(column)
    kind = col.type
    none = [None] * len(col)
    if pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0:
        data = pa.chunked_array([c.field("bytes") for c in col.chunks], kind.field("bytes").type)
        if kind.get_field_index("path") < 0:
            return data, none
        return data, pa.chunked_array([c.field("path") for c in col.chunks]).to_pylist()
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return col, none
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return pa.nulls(len(col), pa.binary()), col.to_pylist()
    raise LocalDataError(
        f"{where}: column {column!r} has type {col.type}, not an image; set image-column to "
        "the column of encoded images"
    )


def _open_encoded(data: bytes | None, path: str | None, base: Path, where: str) -> Any:
    from PIL import Image, UnidentifiedImageError

    source: Any = io.BytesIO(data) if data is not None else None
    if source is None and path:
        source = path if os.path.isabs(path) else str(base / path)
    if source is None:
        raise LocalDataError(f"{where}: the image is empty; fix or drop that row")
    try:
        with Image.open(source) as img:
            img.load()
            return img.copy() if img.mode != "P" else img.convert("RGBA")
    except (OSError, UnidentifiedImageError, SyntaxError) as err:
        raise LocalDataError(f"{where}: cannot read image ({err}); fix or drop that row") from err


def read_table(
    path: Path, fmt: str, image_column: str, label_column: str, *, labels_only: bool = False
) -> RawData:
    """A ``hf-disk`` or ``parquet`` dataset: label, image and (if any) ``domain`` columns."""
    wanted = [label_column, DOMAIN_COLUMN] + ([] if labels_only else [image_column])
    table, features = _read_arrow(path, fmt, wanted)
    for column, setting in ((label_column, "label-column"), (image_column, "image-column")):
        if column not in table.column_names and (column == label_column or not labels_only):
            raise LocalDataError(
                f"{path}: no column {column!r} (columns: {', '.join(features)}); set {setting} "
                "to one of them"
            )
    labels = _column_labels(table, features[label_column], label_column, path)
    domains = None
    if DOMAIN_COLUMN in table.column_names and DOMAIN_COLUMN != label_column:
        domains = _column_labels(table, features[DOMAIN_COLUMN], DOMAIN_COLUMN, path)
    if labels_only:
        return RawData(n=table.num_rows, labels=labels, domains=domains)
    data, paths = _image_bytes(table, image_column, path)
    base = path if path.is_dir() else path.parent

    def name(i: int) -> str:
        return f"{path} row {i}" + (f" ({paths[i]})" if paths[i] else "")

    return RawData(
        n=table.num_rows,
        labels=labels,
        open=lambda i: _open_encoded(data[i].as_py(), paths[i], base, name(i)),
        name=name,
        domains=domains,
    )


def read_raw(
    path: Path, fmt: str, image_column: str, label_column: str, *, labels_only: bool = False
) -> RawData:
    """The rows at ``path`` in layout ``fmt`` (see :func:`detect_format`), not decoded."""
    if fmt == "imagefolder":
        return read_imagefolder(path)
    if fmt == "npz":
        return read_npz(path, labels_only=labels_only)
    return read_table(path, fmt, image_column, label_column, labels_only=labels_only)
