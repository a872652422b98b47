"""The one in-memory form every dataset of the registry returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ripple_flwr.data.images import to_unit_float
from ripple_flwr.io.classes import classes_hash as classes_hash  # importable from here too


@dataclass(frozen=True)
class ImageDataset:
    """Images ``(n, C, H, W)`` with integer labels.

    ``images`` is uint8 (0..255), float32 in [0, 1], or a lazily decoded
    :class:`~ripple_flwr.data.images.LazyImages`; :meth:`rows` returns any rows
    as float32 in [0, 1], whatever the storage. ``labels`` are the class
    labels. ``domains`` is an optional alternative label (e.g. the rotation of
    the ``rotated`` wrapper); ``cluster_labels`` returns whichever one the
    clusters are meant to follow. ``groups`` is a natural client id per row
    (GLDv2's photographers; -1: the server's rows), ``class_names`` the
    classes' names in label order.
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
    groups: np.ndarray | None = field(default=None, repr=False)
    class_names: tuple[str, ...] = ()
    # The domain label is a concept (what the labels mean: permuted-<name>), not a look.
    domains_are_concepts: bool = False

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
    def classes(self) -> tuple[str, ...]:
        """The class names in label order (``"0" .. "C-1"`` when the data names none)."""
        return self.class_names or tuple(str(c) for c in range(self.num_classes))

    def rows(self, index: Any) -> np.ndarray:
        """Images at ``index`` as float32 in [0, 1] (decoded and converted on demand)."""
        return to_unit_float(self.images[index])

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(int(s) for s in self.images.shape[1:])  # type: ignore[return-value]

    def cluster_labels(self, label_kind: str = "class") -> tuple[np.ndarray, int]:
        """Labels the clusters follow, with their count.

        Parameters
        ----------
        label_kind
            ``"class"``: the class labels. ``"domain"``: the domain label (the
            rotation of ``rotated-*``). ``"joint"``: the (domain, class) pair,
            ``domain * num_classes + class``, so a client can be skewed in its
            classes and its domains together (``num_domains * num_classes``
            labels; folding by ``num_classes`` gives the class back).
        """
        if label_kind == "class":
            return self.labels, self.num_classes
        if label_kind not in ("domain", "joint"):
            raise ValueError(
                f"unknown label kind {label_kind!r}; choose 'class', 'domain' or 'joint'"
            )
        if self.domains is None:
            raise ValueError(
                f"dataset {self.name!r} has no domain label; use label-kind='class' "
                "or wrap it as 'rotated-<name>' or 'permuted-<name>'"
            )
        if label_kind == "domain":
            return self.domains, self.num_domains
        joint = np.asarray(self.domains, dtype=np.int64) * self.num_classes + self.labels
        return joint, self.num_domains * self.num_classes
