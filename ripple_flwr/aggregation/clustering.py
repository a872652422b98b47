"""The mathematics of the clustered baselines IFCA, FeSEM and CFL (plain numpy, no Flower).

- IFCA (Ghosh et al., 2020): each cluster model becomes the sample-weighted
  mean of the models trained from it (:func:`cluster_means`); its K
  initialisations are drawn again until every one is some clients' choice
  (:func:`redraw_until_balanced`).
- FeSEM (Long et al., 2023): K-means over (a layer of) the clients' last
  models reassigns them every few rounds (:func:`kmeans_lloyd`); centres
  are the mean of their members' models (:func:`cluster_means` again).
- CFL (Sattler et al., 2020): a cluster is split when its clients have
  reached a stationary point of the joint objective (small mean update)
  while some still move a lot (large largest update) (:func:`cfl_should_split`),
  by complete-linkage clustering of their updates' cosine similarities
  (:func:`cfl_bipartition`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

State = dict[str, np.ndarray]
Draw = TypeVar("Draw")


def float_keys(state: State) -> list[str]:
    """The keys of a state that take part in distances and means (floating point)."""
    return [k for k, v in state.items() if np.issubdtype(np.asarray(v).dtype, np.floating)]


def flatten(states: Sequence[State], keys: Sequence[str]) -> np.ndarray:
    """(len(states), P) float32 matrix of the states' ``keys``, concatenated in order."""
    if not len(states):
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack(
        [np.concatenate([np.asarray(s[k], dtype=np.float32).ravel() for k in keys]) for s in states]
    )


def nearest_centres(models: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Index of the L2-nearest centre of each model row (ties: the lowest index).

    ``models`` (N, P), ``centres`` (K, P); distances through the expansion
    ||m||^2 - 2 m.c + ||c||^2 in float64, one matrix product.
    """
    m = np.asarray(models, dtype=np.float64)
    c = np.asarray(centres, dtype=np.float64)
    if m.ndim != 2 or c.ndim != 2 or m.shape[1] != c.shape[1]:
        raise ValueError(f"models {m.shape} and centres {c.shape} must be (N, P) and (K, P)")
    d2 = (m * m).sum(1)[:, None] - 2.0 * m @ c.T + (c * c).sum(1)[None, :]
    return d2.argmin(axis=1)


def kmeans_lloyd(
    points: np.ndarray, centroids: np.ndarray, iters: int
) -> tuple[np.ndarray, np.ndarray]:
    """``iters`` Lloyd iterations of K-means from ``centroids``: (new centroids, labels).

    scikit-learn's Lloyd K-means started at the given centroids (one run,
    no tolerance: exactly ``iters`` iterations unless it converges first);
    the labels are those of the returned centroids. ``iters = 0`` (or fewer
    points than centroids) only assigns each point to its nearest centroid.
    """
    from sklearn.cluster import KMeans

    x = np.asarray(points, dtype=np.float64)
    c = np.asarray(centroids, dtype=np.float64)
    if x.ndim != 2 or c.ndim != 2 or x.shape[1] != c.shape[1]:
        raise ValueError(f"points {x.shape} and centroids {c.shape} must be (N, D) and (K, D)")
    if iters < 1 or len(x) < len(c):
        return c.copy(), nearest_centres(x, c)
    km = KMeans(len(c), init=c, n_init=1, max_iter=iters, tol=0.0, algorithm="lloyd").fit(x)
    return km.cluster_centers_.astype(np.float64), km.labels_.astype(np.int64)


def cluster_means(
    models: Sequence[State],
    states: Sequence[State],
    labels: Sequence[int],
    weights: Sequence[float],
) -> tuple[list[State], list[int]]:
    """Each cluster model replaced by the weighted mean of the states labelled with it.

    ``models``: the K current cluster models; ``states[i]`` was trained by a
    client of cluster ``labels[i]`` and weighs ``weights[i]`` (its examples).
    A cluster no state belongs to keeps its model. Non-float entries (step
    counters) are taken from the member with the largest weight. Returns the
    new models and the clusters that changed.
    """
    if not len(states) == len(labels) == len(weights):
        raise ValueError("states, labels and weights must have one entry per reply")
    labels = np.asarray(labels, dtype=np.int64)
    w = np.asarray(weights, dtype=np.float64)
    if len(labels) and (labels.min() < 0 or labels.max() >= len(models)):
        raise ValueError(f"labels must be cluster indices in [0, {len(models)})")
    out = list(models)
    changed = []
    for c in range(len(models)):
        idx = np.flatnonzero(labels == c)
        if not len(idx) or w[idx].sum() <= 0:
            continue
        share = w[idx] / w[idx].sum()
        top = int(idx[np.argmax(w[idx])])
        new = {}
        for key, ref in models[c].items():
            ref = np.asarray(ref)
            if np.issubdtype(ref.dtype, np.floating):
                stacked = np.stack([np.asarray(states[i][key], dtype=np.float64) for i in idx])
                new[key] = np.tensordot(share, stacked, axes=1).astype(ref.dtype)
            else:
                new[key] = np.array(states[top][key], dtype=ref.dtype)
        out[c] = new
        changed.append(c)
    return out, changed


def cfl_should_split(
    updates: np.ndarray, weights: Sequence[float], eps1: float, eps2: float
) -> tuple[bool, float, float]:
    """Sattler et al.'s criterion: ||weighted mean update|| < eps1 and max ||update|| > eps2.

    ``updates`` (n, P): this round's updates of one cluster's clients.
    Returns (split?, mean norm, max norm).
    """
    u = np.asarray(updates, dtype=np.float64)
    if u.ndim != 2 or len(u) < 2:
        return False, float("nan"), float("nan")
    w = np.asarray(weights, dtype=np.float64)
    mean_norm = float(np.linalg.norm((w / w.sum()) @ u))
    max_norm = float(np.linalg.norm(u, axis=1).max())
    return (mean_norm < eps1 and max_norm > eps2), mean_norm, max_norm


def cosine_similarity(updates: np.ndarray) -> np.ndarray:
    """(n, n) cosine similarities of the rows (a zero row is similar to nothing: 0)."""
    u = np.asarray(updates, dtype=np.float64)
    norms = np.linalg.norm(u, axis=1)
    unit = u / np.where(norms > 0, norms, 1.0)[:, None]
    return np.clip(unit @ unit.T, -1.0, 1.0)


def cfl_bipartition(updates: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Split clients in two by complete-linkage clustering on 1 - cosine similarity.

    Returns the two index arrays (the larger first) and the largest cosine
    similarity across them (Sattler et al.'s alpha_cross_max).
    """
    from sklearn.cluster import AgglomerativeClustering

    u = np.asarray(updates, dtype=np.float64)
    if len(u) < 2:
        raise ValueError("a split needs at least two clients with an update")
    sim = cosine_similarity(u)
    labels = AgglomerativeClustering(
        n_clusters=2, metric="precomputed", linkage="complete"
    ).fit_predict(1.0 - sim)
    a, b = np.flatnonzero(labels == 0), np.flatnonzero(labels == 1)
    if len(b) > len(a) or (len(b) == len(a) and b[0] < a[0]):
        a, b = b, a
    return a, b, float(sim[np.ix_(a, b)].max())


def smallest_share(counts: Sequence[int]) -> float:
    """The share of the least-chosen model (0 when nobody chose: nothing is balanced)."""
    total = int(np.sum(counts))
    return float(np.min(counts)) / total if total else 0.0


def redraw_until_balanced(
    draw: Callable[[int], Draw],
    choices: Callable[[Draw], Sequence[int]],
    k: int,
    min_share: float,
    max_draws: int,
) -> tuple[int, list[list[int]]]:
    """Draw ``k`` models again until each is chosen by at least ``min_share`` of the choosers.

    IFCA's ``find_good_initializer`` (jichan3751/ifca): ``draw(d)`` gives the
    d-th set of models, ``choices(models)`` the model index each answering
    client picks (its lowest training loss). Draws stop at the first balanced
    one, after ``max_draws``, or at a draw nobody answered (it tells nothing;
    drawing again would only wait again). Returns the kept draw's index (the
    balanced one, else the one whose least-chosen model has the largest share,
    the earliest on ties) and every draw's counts per model.
    """
    if k < 1 or max_draws < 1:
        raise ValueError(f"need k >= 1 and max_draws >= 1, got k={k}, max_draws={max_draws}")
    counts: list[list[int]] = []
    best, best_share = 0, -1.0
    for d in range(max_draws):
        picked = np.asarray(choices(draw(d)), dtype=np.int64)
        if len(picked) and (picked.min() < 0 or picked.max() >= k):
            raise ValueError(f"draw {d}: a choice outside [0, {k})")
        counts.append(np.bincount(picked, minlength=k).tolist())
        share = smallest_share(counts[-1])
        if share > best_share:
            best, best_share = d, share
        if not len(picked) or share >= min_share - 1e-12:
            break
    return best, counts
