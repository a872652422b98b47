"""Label-permuted datasets: four fixed permutations of the classes as four concepts.

Concept shift (P(Y|X) differs, P(X) does not): every image is given one of four groups,
balanced and independent of its class, and its label is replaced by that group's fixed
permutation of the classes (group 0 keeps the identity). Two clients of different groups
hold the same kind of images with different labels, so nothing computed from the images
alone can tell them apart; only their losses or gradients can (CFL's own experiments swap
labels the same way). The group is the domain label (``label_kind="domain"``).
"""

from __future__ import annotations

import numpy as np

from ripple_flwr.data.base import ImageDataset
from ripple_flwr.data.rotated import NUM_ROTATIONS, balanced_rotations

NUM_CONCEPTS = NUM_ROTATIONS  # the groups are drawn as the rotations' balanced draw
# Fixed seeds: every process must give the same image the same group and label.
GROUP_SEED = 2
TEST_GROUP_SEED = 3
PERMUTATION_SEED = 4


def concept_permutations(num_classes: int, seed: int = PERMUTATION_SEED) -> np.ndarray:
    """(NUM_CONCEPTS, num_classes): row g maps a class to its label under concept g.

    Row 0 is the identity; the others are seeded permutations, each moving every class
    (no class keeps its label under two concepts).
    """
    rng = np.random.default_rng(seed)
    rows = [np.arange(num_classes)]
    while len(rows) < NUM_CONCEPTS:
        p = rng.permutation(num_classes)
        if all(np.all(p != r) for r in rows):
            rows.append(p)
    return np.stack(rows)


def permute_dataset(dataset: ImageDataset) -> ImageDataset:
    """``permuted-<name>``: each image's label under its group's permutation, the group as
    its domain. The test split, if any, gets groups of its own seed."""
    if dataset.domains is not None:
        raise ValueError(f"{dataset.name!r} already has a domain label; cannot permute it")
    perms = concept_permutations(dataset.num_classes)
    groups = balanced_rotations(len(dataset.labels), GROUP_SEED)
    labels = perms[groups, np.asarray(dataset.labels, dtype=np.int64)]
    test_labels = test_groups = None
    if dataset.test_labels is not None:
        test_groups = balanced_rotations(len(dataset.test_labels), TEST_GROUP_SEED)
        test_labels = perms[test_groups, np.asarray(dataset.test_labels, dtype=np.int64)]
    return ImageDataset(
        name=f"permuted-{dataset.name}",
        images=dataset.images,
        labels=labels.astype(np.asarray(dataset.labels).dtype),
        num_classes=dataset.num_classes,
        domains=groups,
        num_domains=NUM_CONCEPTS,
        test_images=dataset.test_images,
        test_labels=(
            None if test_labels is None else test_labels.astype(dataset.test_labels.dtype)
        ),
        test_domains=test_groups,
        domains_are_concepts=True,
    )
