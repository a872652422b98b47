"""The one in-memory form every dataset of the registry returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class ImageDataset:
    """Images in [0, 1] as float32 ``(n, C, H, W)`` with integer labels.

    ``labels`` are the class labels. ``domains`` is an optional alternative
    label (e.g. the rotation of the ``rotated`` wrapper); ``cluster_labels``
    returns whichever one the clusters are meant to follow.
    """

    name: str
    images: np.ndarray
    labels: np.ndarray
    num_classes: int
    domains: np.ndarray | None = None
    num_domains: int = 0
    test_images: np.ndarray | None = field(default=None, repr=False)
    test_labels: np.ndarray | None = field(default=None, repr=False)
    test_domains: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.images.ndim != 4:
            raise ValueError(
                f"{self.name}: images must be (n, C, H, W), got shape {self.images.shape}"
            )
        if len(self.images) != len(self.labels):
            raise ValueError(
                f"{self.name}: {len(self.images)} images but {len(self.labels)} labels"
            )

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(int(s) for s in self.images.shape[1:])  # type: ignore[return-value]

    def cluster_labels(self, label_kind: str = "class") -> tuple[np.ndarray, int]:
        """Labels the clusters follow: ``"class"`` or ``"domain"``, with their count."""
        if label_kind == "class":
            return self.labels, self.num_classes
        if label_kind == "domain":
            if self.domains is None:
                raise ValueError(
                    f"dataset {self.name!r} has no domain label; use label-kind='class' "
                    "or wrap it as 'rotated-<name>'"
                )
            return self.domains, self.num_domains
        raise ValueError(f"unknown label kind {label_kind!r}; choose 'class' or 'domain'")
