"""Node-local data: a SuperNode that trains on its own image files.

Accepted layouts (:func:`detect_format`):

- ``imagefolder``: a folder of ``<class>/<image>`` subfolders (images may sit in
  nested folders of a class). Class names are the folder names, sorted; files
  whose extension is not an image's (``.png .jpg .jpeg .bmp .gif .tif .tiff
  .webp .ppm .pgm``, any case) and hidden files are skipped, as are files
  directly in the top folder.
- ``npz``: a ``.npz`` with ``images`` (uint8, or floats in [0, 1] rounded to
  uint8) and ``labels`` (ints or strings), optional ``class_names`` (the
  names of the int labels). ``images`` may be ``(n, H, W)``, ``(n, C, H, W)``
  or ``(n, H, W, C)``: C in {1, 3} at axis 1 means NCHW, else at axis 3 NHWC.
- ``hf-disk``: a Hugging Face ``save_to_disk`` folder; of a ``DatasetDict``
  the ``train`` split if it has one, else all its splits concatenated.
- ``parquet``: a ``.parquet`` file, or a folder with ``*.parquet`` files anywhere
  below it (e.g. ``data/train-00000-of-00003.parquet``, as the Hub publishes
  them), read in sorted path order.

For the last two the ``image-column`` is an ``Image`` feature (bytes decoded
here with PIL, in parallel), the ``label-column`` a ``ClassLabel``, strings or
ints, and a ``domain`` column, if any, fills ``domains``.

Labels: each row's label *name* (its folder, ``ClassLabel`` or ``class_names``
entry, or the string itself) is looked up in the run's ``class_names``; a name
the run does not know is an error. Plain int labels (no names) are indices
into the run's classes and must lie in ``[0, len(class_names))``. Without
``class_names`` the data's own names are used (:func:`class_names_of`).

Memory: the images are held once, as uint8 ``(n, C, H, W)``, decoded straight
into that array by a thread pool (PIL releases the GIL while it decodes).
Resizing (``size > 0``) goes through :func:`ripple_flwr.data.images.convert_image`:
PIL ``BILINEAR`` to ``size x size``, no crop (see :mod:`ripple_flwr.data.images`).
Every problem raises :class:`LocalDataError`, one line with the path, the
problem and the fix.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ripple_flwr.data.base import ImageDataset
from ripple_flwr.data.images import ImageFormatError, channels_of, convert_image
from ripple_flwr.data.local_formats import (
    IMAGE_EXTENSIONS,
    LocalDataError,
    RawData,
    RawLabels,
    detect_format,
    fingerprint,
    read_raw,
)
from ripple_flwr.data.partition import train_test_split_indices

__all__ = [
    "IMAGE_EXTENSIONS",
    "LocalDataError",
    "LocalImages",
    "class_names_of",
    "default_workers",
    "detect_format",
    "fingerprint",
    "local_dataset",
    "read_local_images",
    "split_local",
]

_PREVIEW = 8  # class names quoted in a message


@dataclass(frozen=True, eq=False)
class LocalImages:
    """A node's images, uint8 ``(n, C, H, W)``, with labels indexing ``class_names``."""

    images: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]
    format: str
    path: str
    domains: np.ndarray | None = None
    domain_names: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.labels)


def default_workers() -> int:
    """Decoding threads when none are asked for: ``min(8, os.cpu_count())``."""
    return max(1, min(8, os.cpu_count() or 1))


def _preview(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_PREVIEW])
    return shown + (f", ... ({len(names) - _PREVIEW} more)" if len(names) > _PREVIEW else "")


def _run_classes(class_names: Sequence[str] | None) -> tuple[str, ...] | None:
    if class_names is None:
        return None
    names = tuple(str(c).strip() for c in class_names)
    if not names or any(not c for c in names) or len(set(names)) != len(names):
        raise LocalDataError(
            f"class names {list(names)} must be distinct and non-empty; fix class-names"
        )
    return names


def _lookup(
    own: Sequence[str], run: tuple[str, ...], counts: np.ndarray, where: str, noun: str
) -> np.ndarray:
    """Run index of each ``own`` name; error on the first one in use the run lacks."""
    index = {c: k for k, c in enumerate(run)}
    table = np.full(len(own), -1, dtype=np.int64)
    for j, name in enumerate(own):
        if counts[j] == 0:
            continue
        if name not in index:
            rows = "" if noun == "class folder" else f" ({counts[j]} rows)"
            fix = "remove it" if noun == "class folder" else "remove those rows"
            raise LocalDataError(
                f"{where}: {noun} {name!r}{rows} is not among the run's {len(run)} classes "
                f"({_preview(run)}); {fix} or add it to class-names"
            )
        table[j] = index[name]
    return table


def _resolve_labels(
    raw: RawLabels, run: tuple[str, ...] | None, where: str, noun: str = "label"
) -> tuple[np.ndarray, tuple[str, ...]]:
    """``(labels, class_names)``: labels as int64 indices into the names (see the module)."""
    values = raw.values
    if raw.names is not None:
        own, codes = raw.names, values.astype(np.int64)
        bad = (codes < 0) | (codes >= len(own))
        if bad.any():
            raise LocalDataError(
                f"{where}: {noun} {int(codes[bad][0])} is outside its {len(own)} class names "
                f"({_preview(own)}); fix the labels or the class names"
            )
    elif values.dtype.kind == "U":
        uniq, codes = np.unique(values, return_inverse=True)
        own = tuple(str(u) for u in uniq)
    elif run is None:
        uniq, codes = np.unique(values, return_inverse=True)
        own = tuple(str(int(u)) for u in uniq)
    else:
        codes = values.astype(np.int64)
        bad = (codes < 0) | (codes >= len(run))
        if bad.any():
            raise LocalDataError(
                f"{where}: integer {noun} {int(codes[bad][0])} is out of range for the run's "
                f"{len(run)} classes ({_preview(run)}): unnamed labels are indices "
                f"0..{len(run) - 1}; fix the labels or store their class names"
            )
        return codes, run
    codes = np.asarray(codes, dtype=np.int64).reshape(-1)
    if run is None:
        return codes, tuple(own)
    counts = np.bincount(codes, minlength=len(own))
    return _lookup(own, run, counts, where, noun)[codes], run


def class_names_of(path: str | os.PathLike[str], *, label_column: str = "label") -> tuple[str, ...]:
    """The data's own class names, decoding no image.

    ImageFolder: its sorted folder names; npz: its ``class_names``, else the sorted
    unique string labels, else the sorted unique int labels as strings; Hugging
    Face: the ``ClassLabel`` names, else sorted unique strings, else sorted ints.
    """
    p, fmt = Path(path).expanduser(), detect_format(path)
    raw = read_raw(p, fmt, "image", label_column, labels_only=True)
    return _resolve_labels(raw.labels, None, str(p))[1]


def _check_args(channels: int, size: int, workers: int | None) -> int:
    if channels not in (0, 1, 3):
        raise LocalDataError(f"channels must be 0 (the data's own), 1 or 3, got {channels}")
    if size < 0:
        raise LocalDataError(f"image size must be >= 0 (0 = the data's own), got {size}")
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise LocalDataError(f"workers must be >= 1, got {workers}")
    return workers


def _parallel(fn: Callable[[int], None], items: Iterable[int], workers: int) -> None:
    """``fn(i)`` for every item on ``workers`` threads; the first error (in item order) is
    raised, and what was not started yet is cancelled."""
    if workers == 1:
        for i in items:
            fn(i)
        return
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ripple-decode")
    try:
        for _ in pool.map(fn, items):
            pass
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _channel_fix(name: str, err: object) -> LocalDataError:
    return LocalDataError(
        f"{name}: {err}; set channels to the data's own count (or 0), convert the files, or "
        "pass allow_channel_change=True"
    )


def _decode(
    raw: RawData, where: str, channels: int, size: int, allow: bool, workers: int
) -> np.ndarray:
    """Every row of ``raw`` as uint8 ``(n, C, H, W)``, written in place by a thread pool.

    The first image fixes C (``channels`` 0) and H, W (``size`` 0); a later one
    that differs is an error naming both.
    """
    assert raw.open is not None and raw.name is not None
    opener, name = raw.open, raw.name

    def load(i: int) -> Any:
        try:
            return opener(i)
        except ImageFormatError as err:
            cause = err.__cause__ or err
            raise LocalDataError(
                f"{name(i)}: unreadable or truncated image ({cause}); replace or remove the file"
            ) from err

    first = load(0)
    c = channels or channels_of(first)
    h, w = (size, size) if size else (first.height, first.width)
    out = np.empty((raw.n, c, h, w), dtype=np.uint8)

    def one(i: int, img: Any = None) -> None:
        img = load(i) if img is None else img
        if not channels and channels_of(img) != c:
            raise LocalDataError(
                f"{where}: mixed grey and colour images ({name(0)} has {c} channel(s), "
                f"{name(i)} has {channels_of(img)}); set channels to 1 or 3 (with "
                "allow_channel_change=True) or convert the files"
            )
        if not size and (img.height, img.width) != (h, w):
            raise LocalDataError(
                f"{where}: images differ in size ({name(0)} is {w}x{h}, {name(i)} is "
                f"{img.width}x{img.height}); set image-size to resize them all"
            )
        try:
            out[i] = convert_image(img, c, size or None, allow_channel_change=allow)
        except ImageFormatError as err:
            raise _channel_fix(name(i), err) from err

    one(0, first)
    _parallel(one, range(1, raw.n), workers)
    return out


def _array_rows(
    raw: RawData, where: str, channels: int, size: int, allow: bool, workers: int
) -> np.ndarray:
    """npz pixels: copied as they are when they fit, else row by row through PIL."""
    arr = raw.array
    assert arr is not None
    c, h, w = arr.shape[1:]
    if (not channels or channels == c) and (not size or (h, w) == (size, size)):
        return np.ascontiguousarray(arr)
    if channels and channels != c and not allow:
        raise _channel_fix(where, f"images have {c} channel(s) but the run uses {channels}")
    from PIL import Image

    def open_row(i: int) -> Any:
        return Image.fromarray(arr[i, 0] if c == 1 else arr[i].transpose(1, 2, 0))

    rows = RawData(n=raw.n, labels=raw.labels, open=open_row, name=raw.name)
    return _decode(rows, where, channels, size, allow, workers)


def read_local_images(
    path: str | os.PathLike[str],
    *,
    class_names: Sequence[str] | None = None,
    channels: int = 0,
    size: int = 0,
    image_column: str = "image",
    label_column: str = "label",
    allow_channel_change: bool = False,
    workers: int | None = None,
) -> LocalImages:
    """Read and decode a node's own data (see the module docstring for the rules).

    ``class_names``: the run's classes (labels are mapped through them); None:
    the data's own. ``channels``/``size``: 0 keeps the data's own (then uniform
    across images); else 1 or 3 channels and a ``size x size`` resize.
    ``workers``: decoding threads (default :func:`default_workers`).
    """
    workers = _check_args(channels, size, workers)
    run = _run_classes(class_names)
    p, fmt = Path(path).expanduser(), detect_format(path)
    where = str(p)
    raw = read_raw(p, fmt, image_column, label_column)
    if raw.n == 0:
        raise LocalDataError(f"{where}: the {fmt} data holds no images; add some")
    noun = "class folder" if fmt == "imagefolder" else "label"
    labels, names = _resolve_labels(raw.labels, run, where, noun)
    domains, domain_names = None, ()
    if raw.domains is not None:
        domains, domain_names = _resolve_labels(raw.domains, None, where, "domain")
    decode = _array_rows if raw.array is not None else _decode
    images = decode(raw, where, channels, size, allow_channel_change, workers)
    return LocalImages(
        images=images,
        labels=labels,
        class_names=names,
        format=fmt,
        path=where,
        domains=domains,
        domain_names=domain_names,
    )


def split_local(
    local: LocalImages, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The node's seeded ``(train, test)`` row indices (sorted, disjoint, both non-empty)."""
    return split_rows(len(local.labels), test_fraction, seed, local.path)


def split_rows(
    n: int, test_fraction: float, seed: int, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """``split_local`` for ``n`` rows read from ``where`` (the node's cached arrays)."""
    if n < 2:
        raise LocalDataError(
            f"{where}: {n} image(s); a node needs at least 2 (a train and a test image); add images"
        )
    return train_test_split_indices(np.arange(n), test_fraction, seed)


def local_dataset(path: str | os.PathLike[str], **kwargs: Any) -> ImageDataset:
    """The files at ``path`` as an :class:`ImageDataset` named ``local:<basename>``.

    Takes :func:`read_local_images`'s keyword arguments; the server reads its
    own auxiliary set with it.
    """
    local = read_local_images(path, **kwargs)
    return ImageDataset(
        name=f"local:{Path(local.path).name}",
        images=local.images,
        labels=local.labels,
        num_classes=len(local.class_names),
        domains=local.domains,
        num_domains=len(local.domain_names),
        class_names=local.class_names,
    )
