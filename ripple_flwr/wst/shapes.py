"""The embedding's shapes: what the scattering sees, how long an embedding is, the resize.

Checked before any work starts (:func:`validate_scattering`): the run config and
``pretrain_vae.py`` call it with the dataset's image shape.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

__all__ = [
    "embed_shape",
    "embedding_dim",
    "resize_images",
    "scattering_channels",
    "validate_scattering",
]


def scattering_channels(J: int, L: int) -> int:
    """Scattering maps per input channel for order 2: 1 + JL + L^2 J(J-1)/2."""
    return 1 + J * L + L * L * J * (J - 1) // 2


def embed_shape(
    image_shape: tuple[int, int, int], embed_size: int | None = None
) -> tuple[int, int, int]:
    """The ``(C, H', W')`` the scattering sees: ``(C, embed_size, embed_size)`` or the image's.

    ``embed_size`` None (or 0) keeps the images' own size.
    """
    c, h, w = (int(s) for s in image_shape)
    if embed_size is None or embed_size == 0:
        return (c, h, w)
    if int(embed_size) != embed_size or embed_size < 1:
        raise ValueError(f"embed_size must be a positive int (or None), got {embed_size!r}")
    return (c, int(embed_size), int(embed_size))


def resize_images(images: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Images ``(N, C, H, W)`` resized to ``(N, C, *size)`` in float32, all in one call.

    The filter is torch's bilinear interpolation with antialiasing
    (``F.interpolate(mode="bilinear", antialias=True, align_corners=False)``):
    when shrinking, a triangle filter widened by the scale factor (what PIL's
    bilinear resize does), deterministic on a CPU. The input itself is
    returned when it already has ``size``.
    """
    if tuple(images.shape[-2:]) == tuple(size):
        return images
    return F.interpolate(
        images.to(torch.float32), size=size, mode="bilinear", antialias=True, align_corners=False
    )


def embedding_dim(
    image_shape: tuple[int, int, int], J: int, L: int, embed_size: int | None = None
) -> int:
    """Length P of an embedding: C x 217 x (H/2^J) x (W/2^J) for J=3, L=8.

    H and W are ``embed_size`` when given (images are resized to it first):
    41,664 for RGB images embedded at 64x64.
    """
    c, h, w = embed_shape(image_shape, embed_size)
    return c * scattering_channels(J, L) * (h // 2**J) * (w // 2**J)


def validate_scattering(
    image_shape: tuple[int, int, int], J: int, L: int, embed_size: int | None = None
) -> None:
    """Reject settings kymatio would mishandle, before any work starts.

    J is checked against the size the scattering sees (``embed_size`` when given).
    """
    if len(image_shape) != 3:
        raise ValueError(f"image_shape must be (C, H, W), got {image_shape}")
    c, h, w = image_shape
    if c < 1 or h < 1 or w < 1:
        raise ValueError(f"image_shape must be positive, got {image_shape}")
    if J < 1:
        raise ValueError(f"scattering J must be >= 1, got {J}")
    if L < 1:
        raise ValueError(f"scattering L must be >= 1, got {L}")
    _, h, w = embed_shape(image_shape, embed_size)
    if 2**J >= min(h, w):
        largest = int(np.floor(np.log2(min(h, w) - 1))) if min(h, w) > 1 else 0
        resized = f" (embed-size {embed_size})" if (h, w) != tuple(image_shape[1:]) else ""
        raise ValueError(
            f"scattering J={J} is too large for {h}x{w} images{resized}: kymatio needs 2**J < "
            f"min(H, W) = {min(h, w)}; use J <= {largest}"
        )
