"""Rotated datasets: four exact rotations as four domain clusters (IFCA's rotated MNIST).

Rotation changes what a client's images look like without changing their
classes, so clusters that follow the rotation (``label_kind="domain"``) are a
real domain shift that needs no extra data.
"""

from __future__ import annotations

import numpy as np

from ripple_flwr.data.base import ImageDataset

NUM_ROTATIONS = 4
# Fixed seeds of the balanced rotation assignment (train, test): every process
# must rotate the same image by the same angle.
ROTATION_SEED = 0
TEST_ROTATION_SEED = 1


def balanced_rotations(n: int, seed: int) -> np.ndarray:
    """Rotation index (0..3) per row: a seeded permutation, rotation = position mod 4.

    Exactly balanced (counts differ by at most one) and independent of the labels.
    """
    rotations = np.empty(n, dtype=np.int64)
    rotations[np.random.default_rng(seed).permutation(n)] = np.arange(n) % NUM_ROTATIONS
    return rotations


def rotate_images(images: np.ndarray, rotations: np.ndarray) -> np.ndarray:
    """Rotate each ``(C, H, W)`` image by ``90 * rotations[i]`` degrees (np.rot90, exact)."""
    if images.shape[-1] != images.shape[-2]:
        raise ValueError(f"rotations need square images, got H x W = {images.shape[-2:]}")
    out = np.empty_like(images)
    for k in range(NUM_ROTATIONS):
        rows = np.flatnonzero(rotations == k)
        if len(rows):
            out[rows] = np.rot90(images[rows], k=k, axes=(2, 3))
    return out


def rotate_dataset(
    dataset: ImageDataset, seed: int = ROTATION_SEED, test_seed: int = TEST_ROTATION_SEED
) -> ImageDataset:
    """``rotated-<name>``: every image turned by 0/90/180/270 degrees, the turn as its domain.

    Class labels stay in ``labels``; the rotation index goes to ``domains``
    (``num_domains=4``). The test split, if any, is rotated the same way with
    its own seed.
    """
    if dataset.domains is not None:
        raise ValueError(f"{dataset.name!r} already has a domain label; cannot rotate it again")
    rotations = balanced_rotations(len(dataset.images), seed)
    test_images = test_domains = None
    if dataset.test_images is not None:
        test_domains = balanced_rotations(len(dataset.test_images), test_seed)
        test_images = rotate_images(dataset.test_images, test_domains)
    return ImageDataset(
        name=f"rotated-{dataset.name}",
        images=rotate_images(dataset.images, rotations),
        labels=dataset.labels,
        num_classes=dataset.num_classes,
        domains=rotations,
        num_domains=NUM_ROTATIONS,
        test_images=test_images,
        test_labels=dataset.test_labels,
        test_domains=test_domains,
    )
