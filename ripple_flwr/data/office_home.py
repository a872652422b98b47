"""Office-Home (Venkateswara et al., 2017): 65 object classes in 4 visual domains.

The paper's domain-shift benchmark: the clusters follow the domain
(Art, Clipart, Product, Real World; ``label_kind="domain"``), the model
classifies the 65 objects. Two published forms are read, both lazily (only
the rows a process touches are decoded, so a client that reads its 130 rows
decodes 130 of 15,588 and the set never sits in memory as pixels):

* the Hugging Face copy ``flwrlabs/office-home``: ``data/train-*.parquet``
  with columns ``image`` (encoded bytes), ``domain`` (string) and ``label``
  (ClassLabel). Labels, domains and class names come from the Arrow columns
  and the schema's feature metadata; an image is read from its row group
  (the few most recent row groups are kept, so sorted rows read each group once);
* the original release, an ImageFolder tree ``<domain>/<class>/*.jpg``
  (directly under the root, or under its one ``OfficeHomeDataset_10072016``-like
  folder).

Domains are numbered in sorted order of their names; classes follow the
ClassLabel names (parquet) or the sorted class folder names (tree), which are
the same 65 names in the same order. Every image is converted to RGB and
resized to ``size x size`` (see :mod:`ripple_flwr.data.images`).
"""

from __future__ import annotations

import bisect
import io
import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from ripple_flwr.data.base import ImageDataset
from ripple_flwr.data.images import (
    FileRows,
    ImageFormatError,
    LazyImages,
    convert_image,
    open_image,
)
from ripple_flwr.data.loaders import default_data_root
from ripple_flwr.settings import Environment

OFFICE_HOME_NAME = "office-home"
OFFICE_HOME_REPO = "flwrlabs/office-home"
OFFICE_HOME_SIZE = 224  # the paper's ResNet-18 input
OFFICE_HOME_SUBDIR = "office-home"  # under default_data_root() when no root is given
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"})
_CHANNELS = 3
# Row groups kept decoded-as-bytes per reader (datasets writes 100 images a group).
_CACHED_ROW_GROUPS = 4


def _check_size(size: int) -> int:
    if isinstance(size, bool) or int(size) != size or size < 1:
        raise ValueError(f"image size must be a positive integer, got {size!r}")
    return int(size)


def _directory(root: str | None) -> Path:
    if root:
        return Path(root).expanduser()
    return default_data_root() / OFFICE_HOME_SUBDIR


def _missing_message(directory: Path, why: str = "") -> str:
    reason = f" ({why})" if why else ""
    return (
        f"Office-Home not found under {directory}{reason}: put {OFFICE_HOME_REPO}'s "
        f"data/train-0000{{0,1,2}}-of-00003.parquet there (`huggingface-cli download "
        f"{OFFICE_HOME_REPO} --repo-type dataset --local-dir {directory}`), or the original "
        "release's <domain>/<class>/*.jpg tree (Art, Clipart, Product, Real World); "
        "set the directory with data-root."
    )


def _is_image_file(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_EXTENSIONS and path.is_file()


def _visible_dirs(directory: Path) -> list[Path]:
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return []
    return [p for p in entries if p.is_dir() and not p.name.startswith(".")]


def _parquet_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(
        p
        for p in directory.rglob("*.parquet")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(directory).parts)
    )


# --------------------------------------------------------------------------- parquet


def _decode_bytes(data: bytes, where: str) -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            return img.copy() if img.mode != "P" else img.convert("RGBA")
    except (OSError, UnidentifiedImageError, SyntaxError) as err:
        raise ImageFormatError(f"cannot decode image {where}: {err}") from err


class ParquetImages:
    """Row ``i``'s image of parquet files, read one row group at a time.

    Only the metadata is read up front. A row's image comes from its row
    group's ``image`` column (struct of ``bytes`` and ``path``, the Hugging
    Face ``Image`` feature); the last few groups stay in memory as encoded
    bytes, so reading sorted rows reads each group once. Picklable: the open
    files and the cache are not part of the state.
    """

    def __init__(self, files: list[Path], size: int, column: str = "image"):
        import pyarrow.parquet as pq

        self.files = [str(f) for f in files]
        self.size = int(size)
        self.column = column
        self._groups: list[tuple[int, int]] = []  # (file index, row group)
        self._starts: list[int] = []  # first row of each group
        total = 0
        for fi, path in enumerate(self.files):
            meta = pq.ParquetFile(path).metadata
            for g in range(meta.num_row_groups):
                rows = meta.row_group(g).num_rows
                if rows:
                    self._groups.append((fi, g))
                    self._starts.append(total)
                    total += rows
        self.num_rows = total
        self._reset()

    def _reset(self) -> None:
        self._handles: dict[int, Any] = {}
        self._cache: OrderedDict[int, tuple[list[Any], list[Any]]] = OrderedDict()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key in ("_handles", "_cache", "_lock"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def _group(self, gi: int) -> tuple[list[Any], list[Any]]:
        cached = self._cache.get(gi)
        if cached is not None:
            self._cache.move_to_end(gi)
            return cached
        import pyarrow.parquet as pq

        fi, g = self._groups[gi]
        handle = self._handles.get(fi)
        if handle is None:
            handle = self._handles[fi] = pq.ParquetFile(self.files[fi])
        col = handle.read_row_group(g, columns=[self.column]).column(self.column).combine_chunks()
        cached = (col.field("bytes").to_pylist(), col.field("path").to_pylist())
        self._cache[gi] = cached
        while len(self._cache) > _CACHED_ROW_GROUPS:
            self._cache.popitem(last=False)
        return cached

    def image(self, i: int) -> Any:
        """Row ``i`` as a PIL image (not yet converted)."""
        gi = bisect.bisect_right(self._starts, i) - 1
        with self._lock:
            data, paths = self._group(gi)
        j = i - self._starts[gi]
        fi = self._groups[gi][0]
        where = f"row {i} ({self.files[fi]})"
        if data[j] is not None:
            return _decode_bytes(data[j], where)
        if paths[j]:  # an Image feature that points at a file instead of embedding it
            path = Path(paths[j])
            path = path if path.is_absolute() else Path(self.files[fi]).parent / path
            return open_image(str(path))
        raise ImageFormatError(f"image {where} has neither bytes nor a path")

    def __call__(self, i: int) -> np.ndarray:
        return convert_image(self.image(int(i)), _CHANNELS, self.size, allow_channel_change=True)


def _feature_names(schema: Any, column: str) -> list[str] | None:
    """ClassLabel names of ``column`` from the Hugging Face schema metadata, if any."""
    raw = (schema.metadata or {}).get(b"huggingface")
    if not raw:
        return None
    try:
        info = json.loads(raw)
        feature = info.get("info", {}).get("features", {}).get(column, {})
    except (ValueError, AttributeError):
        return None
    names = feature.get("names") if isinstance(feature, dict) else None
    return [str(n) for n in names] if names else None


def _encode_column(
    values: list[Any], names: list[str] | None, what: str
) -> tuple[np.ndarray, list[str]]:
    """Strings -> ids in sorted name order; ints -> themselves, named by ``names``."""
    if not values:
        return np.zeros(0, dtype=np.int64), list(names or [])
    if any(v is None for v in values):
        raise ValueError(f"Office-Home: the {what} column has missing values")
    if isinstance(values[0], str):
        known = names if names and set(values) <= set(names) else sorted(set(values))
        index = {name: k for k, name in enumerate(known)}
        return np.array([index[v] for v in values], dtype=np.int64), list(known)
    ids = np.asarray(values, dtype=np.int64)
    if ids.min() < 0:
        raise ValueError(f"Office-Home: negative {what} id {int(ids.min())}")
    if names is None:
        names = [str(k) for k in range(int(ids.max()) + 1)]
    elif ids.max() >= len(names):
        raise ValueError(
            f"Office-Home: {what} id {int(ids.max())} but only {len(names)} {what} names"
        )
    return ids, list(names)


def _from_parquet(files: list[Path], size: int) -> ImageDataset:
    import pyarrow.parquet as pq

    labels: list[Any] = []
    domains: list[Any] = []
    label_names: list[str] | None = None
    domain_names: list[str] | None = None
    for path in files:
        schema = pq.read_schema(path)
        missing = [c for c in ("image", "domain", "label") if c not in schema.names]
        if missing:
            raise ValueError(
                f"{path} is not an Office-Home parquet file: no column(s) {', '.join(missing)} "
                f"(has {', '.join(schema.names)}; {OFFICE_HOME_REPO} has image, domain, label)"
            )
        table = pq.read_table(path, columns=["label", "domain"])
        labels += table.column("label").to_pylist()
        domains += table.column("domain").to_pylist()
        label_names = label_names or _feature_names(schema, "label")
        domain_names = domain_names or _feature_names(schema, "domain")
    reader = ParquetImages(files, size)
    if reader.num_rows != len(labels):
        raise ValueError(f"Office-Home parquet: {reader.num_rows} images but {len(labels)} labels")
    label_ids, class_names = _encode_column(labels, label_names, "label")
    domain_ids, domain_list = _encode_column(domains, domain_names, "domain")
    return _dataset(reader, label_ids, class_names, domain_ids, len(domain_list), size)


# --------------------------------------------------------------------------- ImageFolder tree


def _class_dirs_with_images(domain_dir: Path) -> list[Path]:
    return [c for c in _visible_dirs(domain_dir) if any(_is_image_file(f) for f in c.iterdir())]


def _find_tree(directory: Path) -> Path | None:
    """``directory`` if it holds ``<domain>/<class>/<image>``, else its one subfolder that does."""

    def is_tree(d: Path) -> bool:
        return any(_class_dirs_with_images(domain) for domain in _visible_dirs(d))

    if not directory.is_dir():
        return None
    if is_tree(directory):
        return directory
    nested = [d for d in _visible_dirs(directory) if is_tree(d)]
    return nested[0] if len(nested) == 1 else None


def _from_tree(tree: Path, size: int) -> ImageDataset:
    per_domain = {d.name: _class_dirs_with_images(d) for d in _visible_dirs(tree)}
    per_domain = {name: classes for name, classes in per_domain.items() if classes}
    domain_names = sorted(per_domain)
    class_names = sorted({c.name for classes in per_domain.values() for c in classes})
    class_id = {name: k for k, name in enumerate(class_names)}
    paths: list[str] = []
    labels: list[int] = []
    domains: list[int] = []
    for d, name in enumerate(domain_names):
        for class_dir in sorted(per_domain[name]):
            files = sorted(f for f in class_dir.iterdir() if _is_image_file(f))
            paths += [str(f) for f in files]
            labels += [class_id[class_dir.name]] * len(files)
            domains += [d] * len(files)
    return _dataset(
        FileRows(paths, size, _CHANNELS),
        np.array(labels, dtype=np.int64),
        class_names,
        np.array(domains, dtype=np.int64),
        len(domain_names),
        size,
    )


# --------------------------------------------------------------------------- public


def _dataset(
    decode: Any,
    labels: np.ndarray,
    class_names: list[str],
    domains: np.ndarray,
    num_domains: int,
    size: int,
) -> ImageDataset:
    return ImageDataset(
        name=OFFICE_HOME_NAME,
        images=LazyImages(decode, len(labels), (_CHANNELS, size, size)),  # type: ignore[arg-type]
        labels=labels,
        num_classes=len(class_names),
        domains=domains,
        num_domains=int(num_domains),
        class_names=tuple(class_names),
    )


def _download(directory: Path) -> None:
    """Fetch the Hugging Face parquet files into ``directory`` (fails fast offline)."""
    from huggingface_hub import snapshot_download

    snapshot_download(
        repo_id=OFFICE_HOME_REPO,
        repo_type="dataset",
        local_dir=str(directory),
        allow_patterns=["data/*.parquet"],
    )


def load_office_home(root: str | None = None, *, size: int = OFFICE_HOME_SIZE) -> ImageDataset:
    """Office-Home from ``root`` (default ``$RIPPLE_DATA_ROOT/office-home``), decoded lazily.

    Looks for parquet files (``**/*.parquet``, the Hugging Face copy), then for
    a ``<domain>/<class>/*.jpg`` tree; with neither, downloads
    ``flwrlabs/office-home``'s parquet files into that directory, and if that
    fails (offline) raises ``FileNotFoundError`` saying what to put where.
    Images are RGB ``(3, size, size)`` uint8, decoded on first use.
    """
    size = _check_size(size)
    directory = _directory(root)
    files = _parquet_files(directory)
    if files:
        return _from_parquet(files, size)
    tree = _find_tree(directory)
    if tree is not None:
        return _from_tree(tree, size)
    if Environment.read().hf_offline:
        raise FileNotFoundError(_missing_message(directory, "HF_HUB_OFFLINE is set"))
    try:
        _download(directory)
    except Exception as err:  # noqa: BLE001 - any network / hub failure means "not here"
        raise FileNotFoundError(
            _missing_message(directory, f"downloading failed: {type(err).__name__}")
        ) from err
    files = _parquet_files(directory)
    if not files:
        raise FileNotFoundError(_missing_message(directory, "the download held no parquet files"))
    return _from_parquet(files, size)
