"""Concepts from class-conditional summaries: per-label mean images, clustered and unmixed.

Under concept shift (P(Y|X) differs between groups of clients) nothing computed from a
client's images alone tells the groups apart. What does is the mean image *of each label*:
two clients whose label 3 means different things hold different images under it. This
module is the arithmetic of Ripple's class-conditional summary (issue 60):

- **The client's block** (:func:`label_block`): for every label it holds at least
  ``min_count`` training images of, the count, the mean over pixels of those images'
  variance and their mean image; rarer labels send zeros (count 0: *masked*, never read as
  a zero mean). Layout: ``C`` counts, ``C`` variances, then ``C x D`` means. Under label DP
  the block is of clipped images and noised before it leaves the client.
- **Reading blocks** (:func:`read_blocks`): every field converted and checked, one reason
  per client that is not usable (NaN, counts that are not whole, a count below the minimum,
  a mean sent for a masked label, counts above the client's own size, a mean or variance
  outside its range, no label kept). An unusable block never reaches the clustering.
- **Concepts** (:func:`find_concepts`): the distance between two clients is the squared
  difference of their means over the labels *both* keep, divided by what sampling (and the
  privacy noise) alone would give (:func:`standardized_distances`); pairs that share no
  label get the shortest path through pairs that do. The number of concepts ``G`` is given,
  or follows Ripple-HDB's rule: HDBSCAN's leaf clusters over those distances, masked
  k-means, then groups merged and split (:func:`settle`) until every pair of templates
  differs by more than :data:`MERGE_Z`, at most :data:`MAX_CONCEPTS`; a federation without
  concept shift gives ``G = 1``. The templates are the count-weighted mean of each label's
  means over a group's clients (:func:`templates`).
- **Unmixing** (:func:`unmix`, :func:`place`): a client's concept weights are the
  non-negative least squares of its kept labels' means on the templates' means of the same
  labels, normalised to sum 1; a client that shares no label with any template gets
  ``1/G``.

Nothing here reads a client's or an image's true concept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

# scipy is imported where it is used: a client imports this module for label_block alone.

# A mean image's entries may exceed the images' range by this much (float rounding).
RANGE_TOL = 1e-3
KMEANS_ITERATIONS = 20


def block_size(num_classes: int, d: int) -> int:
    """Floats in one client's block: ``C`` counts, ``C`` variances, then ``C x D`` means."""
    return int(num_classes) * (2 + int(d))


class BlockRelease(Protocol):
    """A private release of the block (label DP: ``ripple_flwr.privacy.label_means``)."""

    def clip_images(self, images: np.ndarray) -> np.ndarray: ...

    def release(
        self, block: np.ndarray, num_classes: int, rng: np.random.Generator
    ) -> np.ndarray: ...


def label_block(
    images: np.ndarray,
    labels: np.ndarray,
    num_classes: int,
    min_count: int,
    release: BlockRelease | None = None,
) -> np.ndarray:
    """A client's class-conditional summary, flattened (float32): for each label, its count,
    the mean over pixels of its images' variance, then its mean image.

    A label with fewer than ``min_count`` images sends count 0, variance 0 and a zero mean.
    With ``release`` (label DP) the block is of the clipped images and noised with a
    generator from the OS: the noise must stay secret, so no seed the server knows.
    """
    if release is not None:
        clean = label_block(release.clip_images(images), labels, num_classes, min_count)
        return release.release(clean, num_classes, np.random.default_rng())
    x = np.asarray(images, dtype=np.float64).reshape(len(images), -1)
    y = np.asarray(labels, dtype=np.int64).reshape(-1)
    if len(x) != len(y):
        raise ValueError(f"{len(x)} images but {len(y)} labels")
    if len(y) and not 0 <= y.min() <= y.max() < num_classes:
        raise ValueError(f"labels outside [0, {num_classes})")
    counts = np.bincount(y, minlength=num_classes).astype(np.float64)
    sums = np.zeros((num_classes, x.shape[1]))
    np.add.at(sums, y, x)
    means = sums / np.maximum(counts, 1)[:, None]
    sq = np.zeros((num_classes, x.shape[1]))
    np.add.at(sq, y, x**2)
    var = np.maximum(sq / np.maximum(counts, 1)[:, None] - means**2, 0.0).mean(axis=1)
    keep = counts >= max(int(min_count), 1)
    block = [np.where(keep, counts, 0.0), np.where(keep, var, 0.0)]
    block.append(np.where(keep[:, None], means, 0.0).reshape(-1))
    return np.concatenate(block).astype(np.float32)


@dataclass
class LabelStacks:
    """Clients' checked blocks: ``counts`` (N, C), ``variances`` (N, C), ``means`` (N, C, D),
    and ``noise`` (N, C): the variance of the privacy noise on each mean's pixels (0 without
    label DP; known to the server from the public mechanism and the counts)."""

    counts: np.ndarray
    variances: np.ndarray
    means: np.ndarray
    noise: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.noise is None:
            self.noise = np.zeros_like(np.asarray(self.counts, dtype=np.float64))

    def errors(self) -> np.ndarray:
        """(N, C): each kept mean's expected squared error per pixel, sampling plus noise."""
        v = np.maximum(self.variances, MIN_VARIANCE)
        inv = np.where(self.mask, 1.0 / np.maximum(self.counts, 1.0), 0.0)
        return (v * inv + self.noise) * self.mask

    @property
    def mask(self) -> np.ndarray:
        """(N, C): the labels each client keeps."""
        return self.counts > 0

    def __len__(self) -> int:
        return len(self.counts)

    def select(self, rows: np.ndarray) -> LabelStacks:
        return LabelStacks(*(getattr(self, f)[rows] for f in self.FIELDS))

    FIELDS = ("counts", "variances", "means", "noise")


def read_blocks(
    blocks: np.ndarray,
    num_classes: int,
    d: int,
    min_count: int,
    sizes: np.ndarray | None = None,
    value_range: tuple[float, float] = (0.0, 1.0),
    noise_sd: NoiseSD | None = None,
) -> tuple[LabelStacks, list[str | None]]:
    """Clients' blocks as :class:`LabelStacks`, and why each unusable one is (``None``: usable).

    ``sizes`` are the clients' own reported numbers of images (0: not reported); a block
    whose counts add up to more is refused. An unusable block is zeroed, so it takes part
    in nothing. ``noise_sd`` (label DP): counts -> the standard deviations of the noise on
    each mean's pixels and on each variance; the ranges widen by :data:`NOISE_RANGE` of them
    and the mean's noise is kept (:attr:`LabelStacks.noise`).
    """
    b = np.asarray(blocks, dtype=np.float64)
    n, c = len(b), int(num_classes)
    if b.ndim != 2 or b.shape[1] != block_size(c, d):
        raise ValueError(f"blocks must be (N, {block_size(c, d)}), got {b.shape}")
    stacks = LabelStacks(b[:, :c].copy(), b[:, c : 2 * c].copy(), b[:, 2 * c :].reshape(n, c, d))
    stacks.means = stacks.means.copy()
    reasons: list[str | None] = []
    mean_sd = var_sd = np.zeros((n, c))
    if noise_sd is not None:
        counts = np.where(np.isfinite(stacks.counts), np.maximum(stacks.counts, 0), 0)
        mean_sd, var_sd = noise_sd(counts)
    for i in range(n):
        slack = (NOISE_RANGE * mean_sd[i], NOISE_RANGE * var_sd[i])
        reasons.append(_block_reason(stacks, i, min_count, sizes, value_range, slack))
        if reasons[-1] is not None:
            for f in LabelStacks.FIELDS:
                getattr(stacks, f)[i] = 0.0
    stacks.noise = np.where(stacks.mask, mean_sd**2, 0.0)
    stacks.variances = np.where(stacks.mask, np.maximum(stacks.variances, MIN_VARIANCE), 0.0)
    return stacks, reasons


# Label DP: counts (N, C) -> (the noise's sd on each mean's pixels, on each variance), (N, C).
NoiseSD = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
NOISE_RANGE = 10.0  # a noisy mean or variance may leave its range by this many noise sds


def _block_reason(
    stacks: LabelStacks,
    i: int,
    min_count: int,
    sizes: np.ndarray | None,
    value_range: tuple[float, float],
    slack: tuple[np.ndarray, np.ndarray],
) -> str | None:
    """Why one client's block is unusable, or ``None``. ``slack``: how far each kept label's
    mean and variance may leave their ranges (label DP's noise)."""
    counts, var, means = stacks.counts[i], stacks.variances[i], stacks.means[i]
    lo, hi = value_range
    what = "class-conditional summary"
    if not all(np.all(np.isfinite(a)) for a in (counts, var, means)):
        return f"{what} holds NaN or Inf"
    if np.any(counts < 0) or np.any(counts != np.round(counts)):
        return f"{what}'s counts are not whole numbers >= 0"
    kept = counts > 0
    if np.any(counts[kept] < min_count):
        return f"{what} sends a label with fewer than {min_count} images (the run's minimum)"
    if np.any(means[~kept] != 0) or np.any(var[~kept] != 0):
        return f"{what} sends a mean for a label it does not keep"
    if sizes is not None and sizes[i] > 0 and counts.sum() > sizes[i]:
        return f"{what} counts {int(counts.sum())} images, the client reported {int(sizes[i])}"
    if not kept.any():
        return f"{what} keeps no label (none has {min_count} images or more)"
    tol = RANGE_TOL + slack[0][kept]
    if np.any(means[kept].min(axis=1) < lo - tol) or np.any(means[kept].max(axis=1) > hi + tol):
        return f"{what} has a mean outside the images' range [{lo:g}, {hi:g}]"
    top, tol = (hi - lo) ** 2 / 4, RANGE_TOL + slack[1][kept]
    if np.any(var[kept] < -tol) or np.any(var[kept] > top + tol):
        return f"{what} has a variance outside [0, {top:g}]"
    return None


# A variance this small is read as this (a label of identical images would divide by 0).
MIN_VARIANCE = 1e-6


def standardized_distances(stacks: LabelStacks) -> np.ndarray:
    """(N, N) squared distance of two clients' means over the labels both keep, divided by
    what sampling (and the privacy noise) alone would give (each mean's ``v / n + noise``,
    summed over those labels); about 1 for two clients of one concept, NaN where they share
    no label."""
    mask = stacks.mask.astype(np.float64)
    m = stacks.means
    d = m.shape[2]
    sq = (m**2).sum(axis=2) * mask  # (N, C)
    cross = np.einsum("icd,jcd->ij", m, m)
    num = (sq @ mask.T + mask @ sq.T - 2.0 * cross) / d
    # sum over the labels both keep of the two means' expected squared errors per pixel
    e = stacks.errors()
    den = e @ mask.T + mask @ e.T
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.maximum(num, 0.0) / den
    out[(mask @ mask.T) == 0] = np.nan
    np.fill_diagonal(out, 0.0)
    return out


def completed_distances(dist: np.ndarray) -> np.ndarray:
    """Pairs that share no label: the shortest path through pairs that do; still apart:
    twice the largest distance."""
    from scipy.sparse.csgraph import shortest_path

    graph = np.where(np.isfinite(dist), dist, 0.0)
    np.fill_diagonal(graph, 0.0)
    full = shortest_path(graph, method="D", directed=False)
    finite = full[np.isfinite(full)]
    far = 2.0 * float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    return np.where(np.isfinite(full), full, far)


def templates(stacks: LabelStacks, groups: np.ndarray, g: int) -> LabelStacks:
    """The ``g`` groups' templates, as a stack of ``g`` rows: each label's count-weighted mean
    and pooled variance over the group's clients that keep it, and the group's count (0 where
    none keeps it: the template leaves that label undefined)."""
    onehot = np.zeros((len(stacks), g))
    onehot[np.arange(len(stacks)), groups] = 1.0
    weight = onehot.T @ stacks.counts  # (G, C)
    safe = np.maximum(weight, 1e-12)
    means = np.einsum("ng,nc,ncd->gcd", onehot, stacks.counts, stacks.means) / safe[..., None]
    var = (onehot.T @ (stacks.counts * stacks.variances)) / safe
    noise = (onehot.T @ (stacks.counts**2 * stacks.noise)) / safe**2
    return LabelStacks(weight, np.where(weight > 0, var, 0.0), means, noise)


def template_distances(stacks: LabelStacks, t: LabelStacks) -> np.ndarray:
    """(N, G) count-weighted mean squared pixel difference of each client to each template
    over the labels both keep; inf where they share none."""
    # ||m - t||^2 per (client, template, label), without an (N, G, C, D) array
    d = stacks.means.shape[2]
    own = (stacks.means**2).sum(axis=2)[:, None, :]  # (N, 1, C)
    theirs = (t.means**2).sum(axis=2)[None]  # (1, G, C)
    cross = np.einsum("ncd,gcd->ngc", stacks.means, t.means)
    sq = np.maximum(own + theirs - 2.0 * cross, 0.0) / d  # (N, G, C)
    both = stacks.counts[:, None, :] * t.mask[None].astype(np.float64)  # (N, G, C)
    mass = both.sum(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (sq * both).sum(axis=2) / mass
    return np.where(mass > 0, out, np.inf)


def _kmeans(stacks: LabelStacks, groups: np.ndarray) -> np.ndarray:
    """Masked k-means from ``groups``: templates, then each client to its nearest, until
    fixed; groups that lose every client go."""
    for _ in range(KMEANS_ITERATIONS):
        groups = _renumber(groups)
        d = template_distances(stacks, templates(stacks, groups, int(groups.max()) + 1))
        new = np.where(np.isfinite(d).any(axis=1), np.argmin(d, axis=1), groups)
        if np.array_equal(new, groups):
            break
        groups = new
    return _renumber(groups)


def _renumber(groups: np.ndarray) -> np.ndarray:
    return np.searchsorted(np.unique(groups), groups).astype(np.int64)


def _seeded_groups(dist: np.ndarray, g: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding on the completed distances: ``g`` seed clients, each client to the
    nearest seed."""
    n = len(dist)
    seeds = [int(rng.integers(n))]
    for _ in range(1, g):
        near = dist[:, seeds].min(axis=1)
        p = near / near.sum() if near.sum() > 0 else np.full(n, 1.0 / n)
        seeds.append(int(rng.choice(n, p=p)))
    return np.argmin(dist[:, seeds], axis=1)


# Two templates are one concept when their means differ by at most this many times what
# sampling alone gives (standardized as :func:`standardized_distances`), or share no label.
# Chosen on the development seeds 42, 7, 123 (benchmarks/concepts.py, docs/results/
# concepts.json): templates of one concept reach about 4 under label skew and FedRC's cell,
# of two concepts 9 and more; under Dir(0.1) over four concepts, groups of mixed clients
# overlap that gap (up to about 12), which costs that cell's training clients some ARI.
MERGE_Z = 8.0


def merge_alike(stacks: LabelStacks, groups: np.ndarray) -> np.ndarray:
    """Groups whose templates are one concept by :data:`MERGE_Z`, joined (single linkage)."""
    g = int(groups.max()) + 1
    t = templates(stacks, groups, g)
    z = standardized_distances(t)
    join = ~(z > MERGE_Z)  # NaN (no shared label) joins too
    parent = list(range(g))

    def root(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for a in range(g):
        for b in range(a + 1, g):
            if join[a, b]:
                parent[root(b)] = root(a)
    return _renumber(np.array([root(int(x)) for x in groups]))


SETTLE_ROUNDS = 10  # merge-and-split passes at most (each stops when nothing changes)
# The most concepts Ripple-HDB's rule keeps: each concept multiplies the cluster models
# (G x K), so clients sending crafted blocks (each unlike every other) must not be able to
# make the server hold hundreds; the largest groups are kept, the others' clients join the
# nearest. A given ``concepts`` is its own bound.
MAX_CONCEPTS = 10


def _at_most(stacks: LabelStacks, groups: np.ndarray, cap: int) -> np.ndarray:
    """The ``cap`` largest groups (by clients), every other client to the nearest of them."""
    sizes = np.bincount(groups)
    if len(sizes) <= cap:
        return groups
    keep = np.sort(np.argsort(-sizes, kind="stable")[:cap])
    t = templates(stacks, groups, len(sizes)).select(keep)
    d = template_distances(stacks, t)
    near = np.where(np.isfinite(d).any(axis=1), np.argmin(d, axis=1), 0)
    kept_index = {int(g): i for i, g in enumerate(keep)}
    start = np.array([kept_index.get(int(g), int(n)) for g, n in zip(groups, near, strict=True)])
    return _kmeans(stacks, start)


def _best_kmeans(
    stacks: LabelStacks,
    dist: np.ndarray,
    g: int,
    rng: np.random.Generator,
    restarts: int,
    min_size: int = 0,
) -> np.ndarray | None:
    """Masked k-means from ``restarts`` k-means++ seedings into ``g`` groups: the one of least
    total distance of each client to its template. With ``min_size``, a result with fewer
    than two groups or a group below it does not count (``None``: none did)."""
    best, best_cost = None, np.inf
    for _ in range(restarts):
        cand = _kmeans(stacks, _seeded_groups(dist, g, rng))
        if min_size and (cand.max() < 1 or np.bincount(cand).min() < min_size):
            continue
        d = template_distances(stacks, templates(stacks, cand, int(cand.max()) + 1))
        own = d[np.arange(len(cand)), cand]
        cost = float(own[np.isfinite(own)].sum())
        if cost < best_cost:
            best, best_cost = cand, cost
    return best


def split_distinct(
    stacks: LabelStacks,
    groups: np.ndarray,
    dist: np.ndarray,
    min_cluster_size: int,
    rng: np.random.Generator,
    restarts: int = 5,
) -> np.ndarray:
    """Each group cut in two by masked 2-means where both halves hold ``min_cluster_size``
    clients or more and their templates differ by more than :data:`MERGE_Z` (two concepts
    HDBSCAN or k-means had joined)."""
    out = groups.copy()
    for g in np.unique(groups):
        rows = np.flatnonzero(groups == g)
        if len(rows) < 2 * min_cluster_size:
            continue
        sub = stacks.select(rows)
        best = _best_kmeans(sub, dist[np.ix_(rows, rows)], 2, rng, restarts, min_cluster_size)
        if best is None:
            continue
        z = standardized_distances(templates(sub, best, 2))[0, 1]
        if z > MERGE_Z:
            out[rows[best == 1]] = out.max() + 1
    return _renumber(out)


def settle(
    stacks: LabelStacks,
    groups: np.ndarray,
    dist: np.ndarray,
    min_cluster_size: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Groups alike merged, groups of two concepts split, k-means between, until nothing
    changes: every pair of final templates differs by more than :data:`MERGE_Z`."""
    for _ in range(SETTLE_ROUNDS):
        before = groups
        groups = _kmeans(stacks, merge_alike(stacks, groups))
        groups = _kmeans(stacks, split_distinct(stacks, groups, dist, min_cluster_size, rng))
        if len(np.unique(groups)) == len(np.unique(before)) and np.array_equal(groups, before):
            break
    return _kmeans(stacks, merge_alike(stacks, groups))


@dataclass
class Concepts:
    """What the server keeps of the concept step: templates and how they were found."""

    templates: LabelStacks  # G rows
    groups: np.ndarray  # (N,) each training client's concept group
    rule: str  # "given" or "hdbscan"
    hdbscan_clusters: int | None = None

    @property
    def num_concepts(self) -> int:
        return len(self.templates)


def find_concepts(
    stacks: LabelStacks,
    g: int | None,
    min_cluster_size: int,
    rng: np.random.Generator,
    restarts: int = 5,
) -> Concepts:
    """The federation's concepts from the clients' checked blocks (unusable ones, with no
    label kept, take no part).

    ``g`` given: masked k-means from ``restarts`` k-means++ seedings, the lowest total
    distance kept. ``g`` None (Ripple-HDB's rule): HDBSCAN over the completed standardized
    distances, its noise clients to the nearest cluster, masked k-means, then templates that
    sampling alone could tell apart no better than :data:`MERGE_Z` merged; a federation
    without concept shift gives ``G = 1``.
    """
    usable = np.flatnonzero(stacks.mask.any(axis=1))
    if not len(usable):
        raise ValueError("no client sent a usable class-conditional summary")
    part = stacks.select(usable)
    n = len(part)
    dist = completed_distances(standardized_distances(part))
    found: int | None = None
    if g is None:
        groups, found = _hdbscan_groups(dist, min_cluster_size)
        groups = settle(part, _kmeans(part, groups), dist, min_cluster_size, rng)
        groups = _at_most(part, groups, MAX_CONCEPTS)
        rule = "hdbscan"
    else:
        g = max(1, min(int(g), n))
        groups = _best_kmeans(part, dist, g, rng, restarts if g > 1 else 1)
        rule = "given"
    groups_all = np.zeros(len(stacks), dtype=np.int64)
    groups_all[usable] = groups
    return Concepts(templates(part, groups, int(groups.max()) + 1), groups_all, rule, found)


def _hdbscan_groups(dist: np.ndarray, min_cluster_size: int) -> tuple[np.ndarray, int]:
    """HDBSCAN's clusters over the completed distances, noise clients to the cluster of least
    mean distance; all noise, or too few clients, is one group."""
    n = len(dist)
    if n < max(2, min_cluster_size):
        return np.zeros(n, dtype=np.int64), 0
    import hdbscan  # heavy import, only needed here

    labels = hdbscan.HDBSCAN(
        metric="precomputed",
        min_cluster_size=min_cluster_size,
        allow_single_cluster=False,
        cluster_selection_method="leaf",
    ).fit_predict(dist.astype(np.float64))
    found = int(labels.max()) + 1
    if found == 0:
        return np.zeros(n, dtype=np.int64), 0
    noise = labels < 0
    if noise.any():
        mean_to = np.stack([dist[:, labels == c].mean(axis=1) for c in range(found)], axis=1)
        labels = np.where(noise, np.argmin(mean_to, axis=1), labels)
    return labels.astype(np.int64), found


def unmix(stacks: LabelStacks, concepts: Concepts) -> tuple[np.ndarray, list[str | None]]:
    """(N, G) concept weights by NNLS on the templates, and why a client got ``1/G``.

    The candidates are the templates that define one of the client's labels at least; the
    labels read are those the client keeps and every candidate defines (with none, the
    client goes wholly to its nearest template). A client that keeps no label, or whose
    NNLS weights are all 0, gets ``1/G``.
    """
    from scipy.optimize import nnls

    g = concepts.num_concepts
    n = len(stacks)
    reasons: list[str | None] = [None] * n
    if g == 1:
        return np.ones((n, 1)), reasons
    w = np.full((n, g), 1.0 / g)
    t = concepts.templates
    nearest = template_distances(stacks, t)
    for i in range(n):
        kept = stacks.mask[i]
        cand = np.flatnonzero((t.mask & kept).any(axis=1))
        if not len(cand):
            reasons[i] = "class-conditional summary shares no label with any concept: weights 1/G"
            continue
        use = kept & t.mask[cand].all(axis=0)
        if not use.any():
            w[i] = np.eye(g)[int(np.argmin(nearest[i]))]
            continue
        basis = t.means[cand][:, use].reshape(len(cand), -1).T  # (L*D, candidates)
        x, _ = nnls(basis, stacks.means[i, use].reshape(-1))
        if x.sum() <= 0:
            reasons[i] = "class-conditional summary is no non-negative mix of the concepts"
            continue
        w[i] = 0.0
        w[i, cand] = x / x.sum()
    return w, reasons


def place(
    blocks: np.ndarray,
    concepts: Concepts | None,
    num_classes: int,
    d: int,
    min_count: int,
    sizes: np.ndarray | None = None,
    noise_sd: NoiseSD | None = None,
) -> tuple[np.ndarray, list[str | None]]:
    """(N, G) concept weights of clients' blocks (:func:`read_blocks`, then :func:`unmix`),
    and why a client got ``1/G`` (its block unusable, or no mix of the concepts); without
    concepts, every client's weight is 1 on the one concept."""
    stacks, reasons = read_blocks(blocks, num_classes, d, min_count, sizes, noise_sd=noise_sd)
    if concepts is None:
        return np.ones((len(stacks), 1)), reasons
    w, why = unmix(stacks, concepts)
    out = [r if r is not None else y for r, y in zip(reasons, why, strict=True)]
    w[[i for i, r in enumerate(out) if r is not None]] = 1.0 / concepts.num_concepts
    return w, out


def combine(concept_w: np.ndarray, label_free_w: np.ndarray) -> np.ndarray:
    """(N, G x K) weights over (concept, component) pairs: the product of the two."""
    cw, lw = np.asarray(concept_w, float), np.asarray(label_free_w, float)
    return (cw[:, :, None] * lw[:, None, :]).reshape(len(cw), -1)
