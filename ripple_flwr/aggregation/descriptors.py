"""FLUX's descriptors and their clustering (Fenoglio et al., NeurIPS 2025), without Flower.

Following the official code (``dariofenoglio98/FLUX``: ``public/models.py``
``ModelEvaluator.extract_descriptors``, ``flux/server.py`` cluster method 4,
``DBSCAN_no_outliers``):

- **Projection.** A client's latent features (the input of the model's first
  fully connected layer) are projected to ``k`` dimensions (``k`` = the number
  of classes) by a PCA fitted on 200 points uniform in ``[0, m]^d``, drawn from
  ``np.random.seed(1)``: the same fixed projection on every client.
  ``(x - m mu) V^T = x V^T - m (mu V^T)``, so the clients send ``x V^T``'s
  statistics and the server subtracts ``m (mu V^T)`` once ``m`` is known.
- **Descriptor** (``Px_label_long``, extended): mean and standard deviation of
  the projected features, then the same per class (-1 for a class with fewer
  than two examples): ``2 k (C + 1)`` values. The label-free part used for
  unseen clients is the first ``2 k`` (mean and standard deviation).
- **Scaling.** One min-max scaler per block of ``k`` values, fitted over the
  flattened block of every client (the official ``client_descr_scaling``).
- **Clustering.** ``eps`` = the knee (Kneedle, convex increasing) of the
  sorted distances to each descriptor's nearest neighbour, times a scaling
  (1.0); DBSCAN with ``min_samples = 2``; every noise point its own cluster.
  A cluster's centroid is the mean of its members' scaled descriptors.
- **Assignment** of an unseen client: the nearest centroid (Euclidean) over
  the label-free part.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

PROJECTION_POINTS = 200  # the official code's random points for its PCA
PROJECTION_SEED = 1  # ... drawn after np.random.seed(seed=1)
MISSING = -1.0  # a class with fewer than two examples (the official sentinel)
LATENT_MARGIN = 1.02  # the official MAX_LATENT_SPACE = 1.02 x the largest activation


@dataclass(frozen=True)
class Layout:
    """Where each statistic sits in the flat vector a client sends.

    ``[mean (k), std (k), max-latent (1)]`` and, when labelled, ``[class
    means (C k), class stds (C k), class present (C)]``.
    """

    k: int
    num_classes: int
    labelled: bool

    @property
    def size(self) -> int:
        c, k = self.num_classes, self.k
        return 2 * k + 1 + ((2 * c * k + c) if self.labelled else 0)

    @property
    def descriptor_size(self) -> int:
        """Length of the assembled descriptor: ``2 k (C + 1)``, or ``2 k`` label-free."""
        return 2 * self.k * ((self.num_classes + 1) if self.labelled else 1)

    def split(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        k, c = self.k, self.num_classes
        out = {"mean": flat[:k], "std": flat[k : 2 * k], "max": flat[2 * k : 2 * k + 1]}
        if self.labelled:
            s = 2 * k + 1
            out["class_mean"] = flat[s : s + c * k].reshape(c, k)
            out["class_std"] = flat[s + c * k : s + 2 * c * k].reshape(c, k)
            out["present"] = flat[s + 2 * c * k :]
        return out


@functools.lru_cache(maxsize=4)
def projection(latent_dim: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(V (k, d), mu V^T (k,))`` of the PCA on the unit cube's seeded random points.

    The points are ``np.random.seed(1)``'s ``uniform(0, 1, (200, d))``: the
    official ``uniform(0, m, ...)`` is these times ``m``, which has the same
    components and ``m`` times the mean. This is scikit-learn's full-SVD PCA
    (components signed so that each one's largest entry is positive, as
    ``svd_flip(u_based_decision=False)`` in scikit-learn >= 1.5, the official
    code's 1.5.1), computed with LAPACK's ``gesdd`` on one thread: much faster here than
    ``PCA(svd_solver="full")``, and never the randomised solver that ``auto``
    picks for wide inputs, which would give every client its own projection.
    """
    if not 1 <= k <= min(latent_dim, PROJECTION_POINTS):
        raise ValueError(f"cannot project {latent_dim} latent features to {k} dimensions")
    from scipy.linalg import svd  # FLUX only: other runs' clients never load scipy.linalg

    points = np.random.RandomState(PROJECTION_SEED).uniform(0, 1, (PROJECTION_POINTS, latent_dim))
    mean = points.mean(axis=0)
    with threadpool_limits(limits=1):  # as the official code (and 30x faster on 2 busy cores)
        _, _, vt = svd(points - mean, full_matrices=False, lapack_driver="gesdd")
    components = vt[:k]
    top = np.argmax(np.abs(components), axis=1)
    components = components * np.sign(components[np.arange(k), top])[:, None]
    return components, components @ mean


def client_statistics(
    latent: np.ndarray, labels: np.ndarray | None, num_classes: int, k: int
) -> np.ndarray:
    """What a client sends: the flat vector of :class:`Layout` from its latent features.

    ``labels`` None: the label-free statistics only (an unseen client).
    """
    z = np.asarray(latent, dtype=np.float64)
    if z.ndim != 2 or len(z) == 0:
        raise ValueError(f"latent features must be (n >= 1, d), got {z.shape}")
    v, _ = projection(z.shape[1], k)
    with threadpool_limits(limits=1):
        p = z @ v.T
    parts = [p.mean(axis=0), p.std(axis=0), [float(np.abs(z).max())]]
    if labels is not None:
        y = np.asarray(labels)
        means = np.full((num_classes, k), MISSING)
        stds = np.full((num_classes, k), MISSING)
        present = np.zeros(num_classes)
        for c in range(num_classes):
            rows = p[y == c]
            if len(rows) > 1:  # the official code: latent_subset.shape[0] > 1
                means[c], stds[c], present[c] = rows.mean(axis=0), rows.std(axis=0), 1.0
        parts += [means.ravel(), stds.ravel(), present]
    return np.concatenate([np.asarray(x, dtype=np.float64) for x in parts])


def clip_statistics(
    stats: np.ndarray, layout: Layout, bound: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(n, size)`` statistics with every mean and deviation held to ``[-bound, bound]``.

    Returns the held statistics and which rows changed. The largest activation
    and the presence flags are left as sent (they were checked on receipt).
    """
    stats = np.array(stats, dtype=np.float64)
    keep = np.ones(layout.size, dtype=bool)
    keep[2 * layout.k] = False  # max-latent
    if layout.labelled:
        keep[layout.size - layout.num_classes :] = False  # presence flags
    held = np.clip(stats[:, keep], -bound, bound)
    changed = np.any(held != stats[:, keep], axis=1)
    stats[:, keep] = held
    return stats, changed


def model_dims(state: dict[str, np.ndarray]) -> tuple[int, int]:
    """``(latent d, classes C)``: the first linear layer's inputs, the last one's outputs.

    The first and last 2-D float tensors in state order are the first and the
    last fully connected layers' weights (convolutions are 4-D, norms 1-D).
    """
    mats = [np.shape(v) for v in state.values() if np.ndim(v) == 2]
    if not mats:
        raise ValueError("the model has no fully connected layer to read descriptors at")
    return int(mats[0][1]), int(mats[-1][0])


def assemble(flat: np.ndarray, layout: Layout, offset: np.ndarray) -> np.ndarray:
    """The official descriptor from a client's statistics: the means moved by ``-offset``.

    ``offset`` is ``m mu V^T``; a missing class keeps its -1 sentinels.
    """
    s = layout.split(np.asarray(flat, dtype=np.float64))
    parts = [s["mean"] - offset, s["std"]]
    if layout.labelled:
        present = s["present"][:, None] > 0.5
        parts.append(np.where(present, s["class_mean"] - offset, MISSING).ravel())
        parts.append(np.where(present, s["class_std"], MISSING).ravel())
    return np.concatenate(parts)


def latent_scale(maxima: np.ndarray) -> float:
    """``m`` = 1.02 x the median of the clients' largest activations (the official: the max)."""
    maxima = np.asarray(maxima, dtype=np.float64)
    return LATENT_MARGIN * float(np.median(maxima)) if maxima.size else 0.0


@dataclass
class BlockScaler:
    """Min-max scaling per block of ``k`` values, fitted over the flattened block."""

    k: int
    low: np.ndarray  # (blocks,)
    high: np.ndarray  # (blocks,)

    @classmethod
    def fit(cls, x: np.ndarray, k: int) -> BlockScaler:
        blocks = np.asarray(x, dtype=np.float64).reshape(len(x), -1, k)
        return cls(k, blocks.min(axis=(0, 2)), blocks.max(axis=(0, 2)))

    def transform(self, x: np.ndarray) -> np.ndarray:
        """Scale ``(n, B k)`` descriptors, or their first blocks when ``x`` is shorter."""
        x = np.asarray(x, dtype=np.float64)
        nb = x.shape[1] // self.k
        span = self.high[:nb] - self.low[:nb]
        span = np.where(span == 0, 1.0, span)  # sklearn's _handle_zeros_in_scale
        blocks = (x.reshape(len(x), nb, self.k) - self.low[:nb, None]) / span[:, None]
        return blocks.reshape(len(x), -1)


def knee_index(y: np.ndarray, sensitivity: float = 1.0) -> int | None:
    """Kneedle's knee of an increasing convex curve ``y`` over ``x = 0 .. n - 1``.

    As ``kneed.KneeLocator(range(n), y, curve="convex", direction="increasing")``
    (offline, interp1d) finds it; ``None`` where it finds none.
    """
    y = np.asarray(y, dtype=np.float64)
    n = len(y)
    if n < 3 or y.max() == y.min():
        return None
    x_norm = np.arange(n) / (n - 1)
    y_norm = (y - y.min()) / (y.max() - y.min())
    y_norm = np.flip(y_norm.max() - y_norm)  # convex increasing -> concave increasing
    diff = y_norm - x_norm
    from scipy.signal import argrelextrema  # the server's clustering only: clients skip it

    maxima = argrelextrema(diff, np.greater_equal)[0]
    minima = set(argrelextrema(diff, np.less_equal)[0].tolist())
    if not maxima.size:
        return None
    thresholds = diff[maxima] - sensitivity * np.abs(np.diff(x_norm).mean())
    is_max = set(maxima.tolist())
    seen, threshold, at, active = 0, 0.0, 0, True
    for i in range(int(maxima[0]), n - 1):
        if i in is_max:
            threshold, at, active = thresholds[seen], i, True
            seen += 1
        if i in minima:
            threshold, active = 0.0, False
        if active and diff[i + 1] < threshold:
            return n - 1 - at  # x[-(threshold_index + 1)]
    return None


@dataclass
class Clustering:
    """Labels, centroids and how ``eps`` was found."""

    labels: np.ndarray
    centroids: np.ndarray
    eps: float
    knee: int | None
    dbscan_clusters: int
    outliers: int


def cluster_descriptors(x: np.ndarray, eps_scaling: float = 1.0) -> Clustering:
    """The official ``DBSCAN_no_outliers``: knee eps, DBSCAN(min_samples=2), noise as singletons.

    Where Kneedle finds no knee (the official code would fail), eps is the
    largest nearest-neighbour distance: every point is then a core point.
    Identical descriptors (eps 0) form one cluster each group.
    """
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    if n < 2:
        return Clustering(np.zeros(n, np.int64), x.copy(), 0.0, None, n, 0)
    from sklearn.cluster import DBSCAN  # the server's clustering only: clients skip it
    from sklearn.neighbors import NearestNeighbors

    dist, _ = NearestNeighbors(n_neighbors=2).fit(x).kneighbors(x)
    nearest = np.sort(dist[:, 1])
    knee = knee_index(nearest)
    eps = float((nearest[knee] if knee is not None else nearest[-1]) * eps_scaling)
    eps = max(eps, np.finfo(np.float64).tiny)  # DBSCAN refuses eps = 0
    raw = DBSCAN(eps=eps, min_samples=2).fit_predict(x)
    found = int(raw.max()) + 1 if (raw >= 0).any() else 0
    labels = raw.astype(np.int64)
    noise = np.flatnonzero(labels < 0)
    labels[noise] = found + np.arange(len(noise))
    return Clustering(labels, centroids_of(x, labels), eps, knee, found, len(noise))


def centroids_of(x: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Mean descriptor of each cluster ``0 .. max(labels)``."""
    k = int(labels.max()) + 1
    return np.stack([x[labels == c].mean(axis=0) for c in range(k)])


def nearest_centroid(x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's nearest centroid (Euclidean, over the columns ``x`` has) and its distance."""
    x = np.asarray(x, dtype=np.float64)
    d = np.linalg.norm(x[:, None, :] - centroids[None, :, : x.shape[1]], axis=2)
    return d.argmin(axis=1).astype(np.int64), d.min(axis=1)
