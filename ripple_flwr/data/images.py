"""Image conversion shared by every file format: one channel count, one size, uint8 in memory.

Datasets keep their pixels as uint8 ``(n, C, H, W)`` (a quarter of float32: Office-Home at
224x224 is 2.3 GB as uint8, 9.4 GB as float32) and convert only the rows a client or the
server touches, with :func:`to_unit_float`. Large sets decode lazily: :class:`LazyImages`
holds how to read row ``i`` and decodes a row the first time it is asked for.

Resizing uses PIL's ``BILINEAR`` filter, which antialiases when it shrinks (the filter
torchvision's ``Resize`` applies to PIL images), straight to a square ``size x size``
(no crop: a silo's framing is part of its data).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

RESIZE_FILTER = "bilinear"  # PIL.Image.Resampling.BILINEAR (antialiased when shrinking)


class ImageFormatError(ValueError):
    """An image that cannot become the run's (C, H, W): unreadable, wrong channels or size."""


def to_unit_float(pixels: np.ndarray) -> np.ndarray:
    """uint8 pixels -> float32 in [0, 1]; float pixels -> a float32 copy (already in [0, 1])."""
    arr = np.asarray(pixels)
    if arr.dtype == np.uint8:
        out = arr.astype(np.float32)
        out /= np.float32(255.0)
        return out
    return np.array(arr, dtype=np.float32, order="C", copy=True)


def _mode_for(channels: int) -> str:
    if channels == 1:
        return "L"
    if channels == 3:
        return "RGB"
    raise ImageFormatError(f"channels must be 1 or 3, got {channels}")


def channels_of(image: Any) -> int:
    """1 for a grey PIL image (L, I, F, 1, LA), 3 for a colour one (RGB, RGBA, P, CMYK, ...)."""
    return 1 if image.mode in ("1", "L", "LA", "I", "I;16", "F") else 3


def convert_image(
    image: Any, channels: int, size: int | None, *, allow_channel_change: bool = False
) -> np.ndarray:
    """A PIL image as uint8 ``(channels, size, size)`` (``size`` None: its own size).

    A grey image is refused for an RGB run (and the reverse) unless
    ``allow_channel_change``: a silo that holds the wrong kind of image should
    hear so, not train on a silent conversion.
    """
    from PIL import Image

    have = channels_of(image)
    if have != channels and not allow_channel_change:
        raise ImageFormatError(
            f"image has {have} channel(s) ({image.mode}) but the run uses {channels}"
        )
    img = image.convert(_mode_for(channels))
    if size is not None and img.size != (size, size):
        img = img.resize((size, size), Image.Resampling.BILINEAR)
    arr = np.asarray(img, dtype=np.uint8)
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)


def open_image(path: str) -> Any:
    """A PIL image from a file, fully read (so the file is closed); ``ImageFormatError`` if not."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            img.load()
            return img.copy() if img.mode != "P" else img.convert("RGBA")
    except (OSError, UnidentifiedImageError, SyntaxError) as err:
        raise ImageFormatError(f"cannot read image {path}: {err}") from err


class LazyImages:
    """Rows decoded on first use: ``images[idx]`` -> uint8 ``(len(idx), C, H, W)``.

    ``decode(i)`` returns row ``i`` as uint8 ``(C, H, W)`` of ``shape``. Decoded
    rows are kept (a client reads its rows every round); nothing else is read,
    so a process that touches 130 of 15,588 images decodes 130.
    """

    def __init__(self, decode: Callable[[int], np.ndarray], n: int, shape: Sequence[int]):
        self._decode = decode
        self._n = int(n)
        self._shape = tuple(int(s) for s in shape)
        self._rows: dict[int, np.ndarray] = {}

    @property
    def shape(self) -> tuple[int, ...]:
        return (self._n, *self._shape)

    @property
    def ndim(self) -> int:
        return 4

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.uint8)

    def __len__(self) -> int:
        return self._n

    def _row(self, i: int) -> np.ndarray:
        row = self._rows.get(i)
        if row is None:
            row = np.asarray(self._decode(i), dtype=np.uint8)
            if row.shape != self._shape:
                raise ImageFormatError(f"row {i} decoded to {row.shape}, expected {self._shape}")
            self._rows[i] = row
        return row

    def __getitem__(self, index: Any) -> np.ndarray:
        if isinstance(index, int | np.integer):
            i = int(index)
            if not -self._n <= i < self._n:
                raise IndexError(f"row {i} out of range for {self._n} images")
            return self._row(i % self._n)
        rows = np.arange(self._n)[index]
        out = np.empty((len(rows), *self._shape), dtype=np.uint8)
        for j, i in enumerate(rows):
            out[j] = self._row(int(i))
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self[:]
        return arr if dtype is None else arr.astype(dtype)


class FileRows:
    """Row ``i`` read from ``paths[i]`` as uint8 ``(channels, size, size)`` (picklable).

    The decoder a :class:`LazyImages` over image files uses (Office-Home's
    folder tree, GLDv2's JPEGs): a photo of another channel count is converted.
    """

    def __init__(self, paths: list[str], size: int, channels: int = 3):
        self.paths = paths
        self.size = int(size)
        self.channels = int(channels)

    def __call__(self, i: int) -> np.ndarray:
        image = open_image(self.paths[int(i)])
        return convert_image(image, self.channels, self.size, allow_channel_change=True)
