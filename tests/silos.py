"""Silos for the own-data tests: ImageFolders of MNIST digits with chosen class mixtures.

Each silo is ``<root>/<class>/<i>.png`` written from mnist-5k rows that no other
silo (and not the server's auxiliary folder) uses, so the tests see what a real
cross-silo deployment sees: separate files, no shared benchmark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

CLASSES = ("0", "1", "2", "3")


class DigitPool:
    """mnist-5k's rows by class, handed out without replacement."""

    def __init__(self, seed: int = 0) -> None:
        from ripple_flwr.data import load_dataset

        ds = load_dataset("mnist-5k")
        self.images = np.rint(ds.images[:, 0] * 255).astype(np.uint8)
        rng = np.random.default_rng(seed)
        self.rows = {c: list(rng.permutation(np.flatnonzero(ds.labels == int(c)))) for c in CLASSES}

    def take(self, label: str, n: int) -> np.ndarray:
        if n == 0:
            return np.zeros((0, 28, 28), dtype=np.uint8)
        rows, self.rows[label] = self.rows[label][:n], self.rows[label][n:]
        assert len(rows) == n, f"pool ran out of class {label}"
        return self.images[rows]


def write_silo(pool: DigitPool, root: Path, counts: Mapping[str, int]) -> Path:
    """An ImageFolder with ``counts[c]`` PNGs of class ``c``."""
    from PIL import Image

    for label, n in counts.items():
        folder = root / label
        folder.mkdir(parents=True, exist_ok=True)
        for i, img in enumerate(pool.take(label, n)):
            Image.fromarray(img, mode="L").save(folder / f"{i:04d}.png")
    return root


def mixture(counts: Mapping[str, int], classes: Sequence[str] = CLASSES) -> np.ndarray:
    total = sum(counts.values())
    return np.array([counts.get(c, 0) / total for c in classes])


# Four silos with sharply different mixtures over the four classes (K = 4).
SILO_COUNTS = {
    "silo-a": {"0": 54, "1": 6},
    "silo-b": {"1": 54, "2": 6},
    "silo-c": {"2": 48, "3": 12},
    "silo-d": {"2": 50, "0": 10},  # held out: onboarded zero-shot (classes the silos train)
}


def write_federation(root: Path, aux_per_class: int = 60, seed: int = 0) -> dict[str, Path]:
    """The server's aux folder and the four silos, from disjoint digits."""
    pool = DigitPool(seed)
    paths = {"aux": write_silo(pool, root / "server-aux", dict.fromkeys(CLASSES, aux_per_class))}
    for name, counts in SILO_COUNTS.items():
        paths[name] = write_silo(pool, root / name, counts)
    return paths
