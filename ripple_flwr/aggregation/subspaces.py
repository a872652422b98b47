"""PACFL's data subspaces (Vahidian et al., AAAI 2023), as the authors' code computes them.

Following ``MMorafah/PACFL`` (``main_pacfl.py`` and ``src/clustering/hierarchical_clustering.py``):

- **A client's subspaces.** For every class it holds, the matrix of that class's training
  images (flattened, one column per image, neither centred nor normalised) goes through a
  thin SVD, and the first ``p`` left singular vectors are kept (fewer if the class has fewer
  images), each turned so that its largest entry is positive (:func:`canonical_signs`; the
  authors' code keeps LAPACK's sign). They are laid out in a fixed ``(num_classes, p, d)``
  block, a class the client lacks left as zeros, so that every reply has the same checked
  length.
- **Budget under a Dirichlet split** (:func:`dirichlet_budget`, :func:`budget_subspaces`).
  For ``noniid-labeldir`` the authors' ``main_pacfl.py`` gives each class held a number of
  vectors out of a budget of 20 instead of ``p``: a class whose share is at least
  ``1/(classes held) + 0.05`` weighs its raw image count, any other its share (a fraction),
  the weights are scaled to sum to the budget and rounded by their ``round_to``
  (``src/clustering/hierarchical_clustering.py``). The dominant classes take nearly the
  whole budget; a class rounded to 0 sends nothing. Only the vectors are sent (classes in
  ascending order), so the reply's length varies, at most ``budget x d`` floats.
- **Proximity.** ``A[i, j]`` is the smallest angle, in degrees, between any column of
  client i's basis and any column of client j's: ``min arccos(clip(U_i^T U_j, -1, 1))``.
  This is the authors' measure (not the smallest principal angle, which would need an SVD
  of ``U_i^T U_j`` over orthonormal bases); their thresholds are in its units.
- **Clusters.** Agglomerative clustering of ``A`` cut at distance ``beta`` (merge while the
  linkage distance is <= beta). The authors' ``average`` linkage averages the two merged
  rows without weighting them by size (WPGMA), which is SciPy's ``weighted`` method;
  ``maximum`` and ``minimum`` are SciPy's ``complete`` and ``single``.
"""

from __future__ import annotations

import numpy as np

# The authors' linkage names -> SciPy's methods (their "average" is WPGMA).
LINKAGES = {"average": "weighted", "maximum": "complete", "minimum": "single"}


def subspace_size(num_classes: int, p: int, d: int) -> int:
    """The length of one client's flattened ``(num_classes, p, d)`` subspace block."""
    return int(num_classes) * int(p) * int(d)


def class_subspaces(images: np.ndarray, labels: np.ndarray, num_classes: int, p: int) -> np.ndarray:
    """The first ``p`` left singular vectors of each class's image matrix, ``(C, p, d)`` float32.

    ``images`` are ``(n, ...)`` (flattened here, one column per image), ``labels`` their
    classes in ``[0, num_classes)``. A class with no image keeps zero rows, and one with
    ``m < p`` images keeps ``m`` vectors.
    """
    x = np.asarray(images, dtype=np.float64).reshape(len(images), -1)
    y = np.asarray(labels, dtype=np.int64)
    if len(x) != len(y):
        raise ValueError(f"{len(x)} images but {len(y)} labels")
    if len(y) and not 0 <= y.min() <= y.max() < num_classes:
        raise ValueError(f"labels outside [0, {num_classes})")
    if p < 1:
        raise ValueError(f"p must be >= 1, got {p}")
    out = np.zeros((num_classes, p, x.shape[1]), dtype=np.float32)
    for c in np.unique(y):
        u, _, _ = np.linalg.svd(x[y == c].T, full_matrices=False)
        keep = u[:, :p].T  # (m, d), m <= p
        out[c, : len(keep)] = canonical_signs(keep).astype(np.float32)
    return out


def dirichlet_budget(counts: np.ndarray, budget: int) -> np.ndarray:
    """Vectors per class under the authors' Dirichlet rule (``main_pacfl.py``, ``budget = 20``).

    ``counts`` are the client's training images per class (length ``num_classes``); the
    classes with none are not held and get 0. Transcribed step by step, in the authors'
    order of operations (classes ascending, Python sums), so the counts are theirs.
    """
    counts = np.asarray(counts, dtype=np.int64)
    held = [int(c) for c in np.flatnonzero(counts > 0)]
    out = np.zeros(len(counts), dtype=np.int64)
    if not held:
        return out
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    total = sum(int(counts[c]) for c in held)
    base = 1 / len(held)
    weight = {}
    for c in held:
        share = int(counts[c]) / total
        # The quirk: a dominant class weighs its raw count, the others their share.
        weight[c] = float(counts[c]) if share >= base + 0.05 else share
    scale = sum(weight.values())
    scaled = [(weight[c] / scale) * budget for c in held]
    for c, k in zip(held, _round_to(scaled, budget), strict=True):
        out[c] = k
    return out


def _round_to(percents: list[float], budget: int) -> list[int]:
    """The authors' ``round_to``: floors, then +1 where it adds the least squared error."""
    if not np.isclose(sum(percents), budget):
        raise ValueError(f"the shares sum to {sum(percents)}, not {budget}")
    rounded = [int(x) for x in percents]
    up = budget - sum(rounded)
    pairs = enumerate(zip(percents, rounded, strict=True))
    errors = sorted((_error(x, r + 1) - _error(x, r), i) for i, (x, r) in pairs)
    for _, i in errors[:up]:
        rounded[i] += 1
    return rounded


def _error(actual: float, rounded: int) -> float:
    """The authors' ``error_gen``."""
    return abs(rounded - actual) ** 2 / np.sqrt(1.0 if actual < 1.0 else actual)


def budget_subspaces(
    images: np.ndarray, labels: np.ndarray, num_classes: int, budget: int
) -> np.ndarray:
    """The vectors of :func:`dirichlet_budget`, ``(k, d)`` float32 with ``k <= budget``.

    Class ``c`` sends its first ``dirichlet_budget(...)[c]`` left singular vectors (fewer
    if it has fewer images, as the authors' ``u[:, 0:K]``), classes in ascending order,
    each vector's sign as :func:`canonical_signs` turns it.
    """
    y = np.asarray(labels, dtype=np.int64)
    if len(y) and not 0 <= y.min() <= y.max() < num_classes:
        raise ValueError(f"labels outside [0, {num_classes})")
    per_class = dirichlet_budget(np.bincount(y, minlength=num_classes), budget)
    most = int(per_class.max()) if len(per_class) else 0
    if most == 0:
        return np.zeros((0, int(np.prod(np.shape(images)[1:]))), dtype=np.float32)
    blocks = class_subspaces(images, labels, num_classes, most)
    rows = [blocks[c, : min(int(k), int((y == c).sum()))] for c, k in enumerate(per_class)]
    return np.concatenate(rows).astype(np.float32, copy=False)


def canonical_signs(vectors: np.ndarray) -> np.ndarray:
    """Each vector turned so that its entry of largest magnitude is positive.

    A singular vector's sign is LAPACK's choice, and the authors' angle (no ``abs``) reads
    it: the same data could give 0 or 180 degrees on two machines. This convention makes
    the summary a function of the data alone.
    """
    v = np.asarray(vectors, dtype=np.float64)
    if not v.size:
        return v
    top = v[np.arange(len(v)), np.abs(v).argmax(axis=1)]
    return v * np.where(top < 0, -1.0, 1.0)[:, None]


def basis_of(flat: np.ndarray, d: int) -> np.ndarray:
    """One client's sent block as its basis: the non-zero rows, each scaled to unit norm.

    The authors' code re-normalises the columns too. Whatever a client sends, the angles
    below see unit vectors (or none), so no reply can stretch anyone's proximities.
    """
    rows = np.asarray(flat, dtype=np.float64).reshape(-1, d)
    norms = np.linalg.norm(rows, axis=1)
    keep = norms > 0
    return rows[keep] / norms[keep, None]


def smallest_angles(bases_a: list[np.ndarray], bases_b: list[np.ndarray]) -> np.ndarray:
    """``A[i, j]``: the smallest angle in degrees between any vector of ``a_i`` and of ``b_j``.

    A client with no vector is 90 degrees from everyone (orthogonal to all).
    """
    out = np.full((len(bases_a), len(bases_b)), 90.0)
    ia = [i for i, b in enumerate(bases_a) if len(b)]
    ib = [j for j, b in enumerate(bases_b) if len(b)]
    if not ia or not ib:
        return out
    # One matrix product over every vector of every client, then the max per client pair
    # (each client's vectors are contiguous: reduce over its segment).
    ua = np.concatenate([bases_a[i] for i in ia])
    ub = np.concatenate([bases_b[j] for j in ib])
    starts_a = np.cumsum([0] + [len(bases_a[i]) for i in ia[:-1]])
    starts_b = np.cumsum([0] + [len(bases_b[j]) for j in ib[:-1]])
    cos = np.clip(ua @ ub.T, -1.0, 1.0)
    best = np.maximum.reduceat(np.maximum.reduceat(cos, starts_a, axis=0), starts_b, axis=1)
    out[np.ix_(ia, ib)] = np.degrees(np.arccos(best))
    return out


def cluster_by_angles(a: np.ndarray, beta: float, linkage: str = "average") -> np.ndarray:
    """Cluster labels ``0..K-1`` (in order of first appearance) of ``A`` cut at ``beta``.

    One client is one cluster; two or more go through SciPy's agglomerative clustering
    with the authors' linkage (:data:`LINKAGES`), merging while the distance is <= beta.
    """
    from scipy.cluster.hierarchy import fcluster
    from scipy.cluster.hierarchy import linkage as scipy_linkage
    from scipy.spatial.distance import squareform

    if linkage not in LINKAGES:
        raise ValueError(f"unknown linkage {linkage!r}; choose {', '.join(LINKAGES)}")
    n = len(a)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if n == 1:
        return np.zeros(1, dtype=np.int64)
    sym = np.asarray(a, dtype=np.float64)
    sym = (sym + sym.T) / 2
    np.fill_diagonal(sym, 0.0)
    z = scipy_linkage(squareform(sym, checks=False), method=LINKAGES[linkage])
    raw = fcluster(z, t=beta, criterion="distance")
    _, first = np.unique(raw, return_index=True)
    order = {label: i for i, label in enumerate(raw[np.sort(first)])}
    return np.array([order[label] for label in raw], dtype=np.int64)


def nearest_cluster(angles: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Each new client's cluster: that of the training client at the smallest angle.

    ``angles`` is ``(new, training)`` (:func:`smallest_angles`); ties go to the lower row.
    """
    if angles.shape[1] != len(labels):
        raise ValueError(f"{angles.shape[1]} training columns but {len(labels)} labels")
    if not angles.shape[1]:
        return np.zeros(len(angles), dtype=np.int64)
    return np.asarray(labels, dtype=np.int64)[np.argmin(angles, axis=1)]
