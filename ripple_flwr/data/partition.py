"""Client partitions: Dirichlet mixtures, D_aux, train/test splits and the true mixtures pi*."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def largest_remainder_counts(proportions: np.ndarray, total: int) -> np.ndarray:
    """Integer counts summing to ``total`` that follow ``proportions`` as closely as possible.

    Works on one vector ``(K,)`` or a batch ``(B, K)``. Exact counts (instead
    of a multinomial draw) keep a synthetic client's real mixture equal to the
    target it is trained on, up to 1/total per component.
    """
    p = np.asarray(proportions, dtype=np.float64)
    single = p.ndim == 1
    p = np.atleast_2d(p)
    if np.any(p < 0) or not np.all(np.isfinite(p)):
        raise ValueError("proportions must be finite and non-negative")
    sums = p.sum(axis=1, keepdims=True)
    if np.any(sums <= 0):
        raise ValueError("each proportion vector needs a positive sum")
    raw = p / sums * total
    counts = np.floor(raw).astype(np.int64)
    short = total - counts.sum(axis=1)
    # Give the missing units to the largest remainders (ties: lowest index, stable).
    order = np.argsort(-(raw - counts), axis=1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(p.shape[1])[None, :].repeat(len(p), 0), axis=1)
    counts += ranks < short[:, None]
    return counts[0] if single else counts


def fold_labels(labels: np.ndarray, num_components: int) -> np.ndarray:
    """Class c belongs to component c mod K (spec section 3, class folding)."""
    if num_components < 1:
        raise ValueError(f"number of components must be >= 1, got {num_components}")
    return np.asarray(labels, dtype=np.int64) % num_components


def mixture_of(labels: np.ndarray, num_components: int) -> np.ndarray:
    """The folded label proportions (K,) of one client's labels."""
    folded = fold_labels(labels, num_components)
    counts = np.bincount(folded, minlength=num_components).astype(np.float64)
    return counts / max(counts.sum(), 1.0)


def _check_labels(labels: np.ndarray) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, got shape {arr.shape}")
    if len(arr) and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"labels must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


# Attempts (with seeds derived from the caller's) before dirichlet_partition gives up:
# see the comment in that function.
_PARTITION_ATTEMPTS = 8


def spread_sizes(num_partitions: int, partition_size: int, spread: float, seed: int) -> list[int]:
    """Client sizes varying by about ``spread`` times (quantity skew), ``partition_size`` mean.

    Each client's share is ``spread ** (u - 1/2)`` with ``u`` uniform in [0, 1)
    (log-uniform between ``1/sqrt(spread)`` and ``sqrt(spread)``), seeded; the
    sizes are rounded (largest remainder) to add up to ``num_partitions x
    partition_size``, so the federation holds the rows it would hold with equal
    sizes, and none is below 2 (a train and a test row). ``spread = 1`` gives
    ``partition_size`` for every client.
    """
    if not spread >= 1:
        raise ValueError(f"the size spread must be >= 1, got {spread}")
    total = num_partitions * partition_size
    if spread == 1:
        return [partition_size] * num_partitions
    u = np.random.default_rng(derived_seed(seed, 0x51E)).random(num_partitions)
    shares = float(spread) ** (u - 0.5)
    floor = 2 * num_partitions
    if total < floor:
        raise ValueError(f"{num_partitions} clients need {floor} rows at least, got {total}")
    sizes = 2 + largest_remainder_counts(shares / shares.sum(), total - floor)
    return [int(s) for s in sizes]


def dirichlet_partition(
    labels: np.ndarray,
    num_partitions: int,
    partition_size: int,
    alpha: float,
    seed: int,
    sizes: Sequence[int] | None = None,
) -> list[np.ndarray]:
    """Disjoint clients of ``partition_size`` rows whose label mixture follows Dir(alpha).

    The draws of flwr-datasets' ``InnerDirichletPartitioner`` (the FedDyn scheme
    the paper's fixed-size clients follow), in linear time
    (:func:`inner_dirichlet_rows`). ``sizes`` (one per client, e.g. from
    :func:`spread_sizes`) replaces the equal ``partition_size``.
    Returns each client's row indices into ``labels`` (sorted int64); the same
    arguments give the same partitions in every process.
    """
    labels = _check_labels(labels)
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    if partition_size < 2:
        raise ValueError(
            f"partition_size must be >= 2 (a train and a test row), got {partition_size}"
        )
    if not alpha > 0:
        raise ValueError(f"Dirichlet alpha must be > 0, got {alpha}")
    sizes = [partition_size] * num_partitions if sizes is None else [int(s) for s in sizes]
    if len(sizes) != num_partitions or min(sizes) < 2:
        raise ValueError(f"{num_partitions} client sizes of at least 2 rows needed, got {sizes}")
    needed = sum(sizes)
    if needed > len(labels):
        raise ValueError(
            f"{num_partitions} partitions of {partition_size} rows need {needed} rows, "
            f"but only {len(labels)} are available"
        )

    # The rows go in a seeded random order (which images a client gets is random too),
    # relabelled to contiguous class ids; each client's rows map back through ``order``.
    _, dense = np.unique(labels, return_inverse=True)
    order = np.random.default_rng(seed).permutation(len(labels))
    targets = dense[order]

    # With small alpha the Dirichlet draw can be exactly one-hot (float underflow);
    # when that class runs out, the renormalised row is all zeros and the draw
    # fails with "Probabilities contain NaN". Retry with derived seeds, then say why.
    last_error: Exception | None = None
    for attempt in range(_PARTITION_ATTEMPTS):
        attempt_seed = seed if attempt == 0 else derived_seed(seed, 0x0D1, attempt)
        try:
            with np.errstate(invalid="ignore", divide="ignore"):
                rows = inner_dirichlet_rows(targets, sizes, float(alpha), attempt_seed)
            return [np.sort(order[r]) for r in rows]
        except ValueError as error:
            if "NaN" not in str(error):
                raise
            last_error = error
    raise ValueError(
        f"Dir({alpha}) partitioning of {needed} of {len(labels)} rows failed {_PARTITION_ATTEMPTS} "
        "times: some clients want only labels that ran out (very small alpha makes clients "
        "one-label). Use a larger pool, fewer or smaller partitions, or a larger alpha."
    ) from last_error


def inner_dirichlet_rows(
    targets: np.ndarray, partition_sizes: Sequence[int], alpha: float, seed: int
) -> list[np.ndarray]:
    """flwr-datasets 0.6.1's ``InnerDirichletPartitioner`` (shuffle on), draw for draw.

    ``targets`` are class ids 0..C-1 (every id present). Returns each
    partition's row indices into ``targets``, in the order the partitioner's
    ``load_partition`` gives them: the same ``numpy`` calls on the same
    generator, so the same partitions. The partitioner converts its list of
    unfilled partitions to an array for every one of its draws and sums every
    partition's remaining room to test for the end: quadratic in the clients
    (125 s for 10,000 clients of 6 rows here); this keeps both as counters
    (``tests/data/test_partition.py`` compares the two).
    """
    rng = np.random.default_rng(seed=seed)
    num_classes = int(targets.max()) + 1 if len(targets) else 0
    class_priors = rng.dirichlet(alpha=np.full(num_classes, alpha), size=len(partition_sizes))
    class_rows = [np.flatnonzero(targets == c) for c in range(num_classes)]
    class_left = [len(r) for r in class_rows]
    left = [int(n) for n in partition_sizes]
    rows = [np.zeros(n, dtype=np.int64) for n in left]
    remaining = sum(left)
    not_full = list(range(len(left)))
    while remaining:
        # rng.choice(a) for a sequence draws integers(0, len(a)), as rng.choice(len(a)) does
        pid = not_full[rng.choice(len(not_full))]
        if left[pid] == 0:
            not_full.remove(pid)
            continue
        left[pid] -= 1
        remaining -= 1
        probabilities = class_priors[pid]
        while True:
            c = int(rng.choice(num_classes, p=probabilities))
            if class_left[c] == 0:  # that class ran out: no partition draws it again
                class_priors[:, c] = 0
                class_priors = class_priors / class_priors.sum(axis=1, keepdims=True)
                probabilities = class_priors[pid]
                continue
            class_left[c] -= 1
            rows[pid][left[pid]] = class_rows[c][class_left[c]]
            break
    out = []
    for r in rows:
        shuffled = r.tolist()
        rng.shuffle(shuffled)  # the partitioner shuffles Python lists, one per partition
        out.append(np.asarray(shuffled, dtype=np.int64))
    return out


def derived_seed(seed: int, *keys: int) -> int:
    """A seed for a sub-task, independent of the parent's stream and of the other keys."""
    return int(np.random.SeedSequence([int(seed), *map(int, keys)]).generate_state(1)[0])


def _capped_counts(p: np.ndarray, total: int, available: np.ndarray) -> np.ndarray:
    """Largest-remainder counts of ``total`` after ``p``, never above ``available``.

    What a full label cannot give goes to the labels with room left, in
    proportion to ``p`` (uniformly over them if ``p`` gives them no mass).
    """
    counts = np.minimum(largest_remainder_counts(p, total), available)
    while (short := total - int(counts.sum())) > 0:
        room = available - counts
        weights = np.where(room > 0, p, 0.0)
        if weights.sum() <= 0:
            weights = (room > 0).astype(np.float64)
        counts = np.minimum(counts + largest_remainder_counts(weights, short), available)
    return counts


def sample_dirichlet_clients(
    labels: np.ndarray,
    num_clients: int,
    client_size: int,
    alpha: float,
    rng: np.random.Generator,
    num_components: int | None = None,
) -> list[np.ndarray]:
    """Many independent clients from a small pool, each with a Dir(alpha) label mixture.

    For evaluating routing on more clients than a disjoint split allows:
    clients may share rows with each other, never within one client. Each
    client's first draw from ``rng`` is p ~ Dir(alpha 1) over the label values
    present (over the K folded components when ``num_components`` is given);
    exact per-label counts come from :func:`largest_remainder_counts`, capped
    at what each label has (the excess goes to the other labels in proportion).
    """
    labels = _check_labels(labels)
    if num_clients < 0:
        raise ValueError(f"num_clients must be >= 0, got {num_clients}")
    if not 1 <= client_size <= len(labels):
        raise ValueError(f"client_size must be in [1, {len(labels)}] (the pool), got {client_size}")
    if not alpha > 0:
        raise ValueError(f"Dirichlet alpha must be > 0, got {alpha}")
    groups = fold_labels(labels, num_components) if num_components is not None else labels
    values, dense = np.unique(groups, return_inverse=True)
    rows_of = [np.flatnonzero(dense == v) for v in range(len(values))]
    available = np.array([len(r) for r in rows_of], dtype=np.int64)
    concentration = np.full(len(values), float(alpha))
    clients = []
    for _ in range(num_clients):
        p = rng.dirichlet(concentration)
        counts = _capped_counts(p, client_size, available)
        parts = [
            rng.choice(rows_of[v], size=int(c), replace=False)
            for v, c in enumerate(counts)
            if c > 0
        ]
        clients.append(np.sort(np.concatenate(parts)).astype(np.int64))
    return clients


def server_aux_split(labels: np.ndarray, aux_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Class-balanced D_aux for the server, and the disjoint pool left for the clients.

    Every label gets ``aux_size // L`` rows (the remainder goes to seeded random
    labels; a label with too few rows gives all it has and the others make up
    for it), so synthetic clients can be drawn with any mixture. Returns sorted
    ``(aux_indices, pool_indices)``.
    """
    labels = _check_labels(labels)
    values, dense = np.unique(labels, return_inverse=True)
    if not len(values) <= aux_size < len(labels):
        raise ValueError(
            f"aux_size must be in [{len(values)}, {len(labels)}) (at least one row per label, "
            f"and rows left for the clients), got {aux_size}"
        )
    rng = np.random.default_rng(seed)
    available = np.bincount(dense, minlength=len(values))
    # Water-filling: equal shares, capped by what each label has; ties broken by a
    # seeded label order so the remainder does not always favour label 0.
    tie_order = rng.permutation(len(values))
    counts = np.zeros(len(values), dtype=np.int64)
    left = aux_size
    while left > 0:
        open_labels = tie_order[counts[tie_order] < available[tie_order]]
        share, extra = divmod(left, len(open_labels))
        add = np.full(len(open_labels), share, dtype=np.int64)
        add[:extra] += 1
        add = np.minimum(add, available[open_labels] - counts[open_labels])
        counts[open_labels] += add
        left -= int(add.sum())
    aux = np.concatenate(
        [rng.permutation(np.flatnonzero(dense == v))[:c] for v, c in enumerate(counts)]
    )
    aux = np.sort(aux).astype(np.int64)
    pool = np.setdiff1d(np.arange(len(labels), dtype=np.int64), aux, assume_unique=True)
    return aux, pool


def train_test_split_indices(
    indices: np.ndarray, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """A client's seeded train/test split: ``round(n * test_fraction)`` test rows, at least one
    of each.

    Returns sorted ``(train, test)`` subsets of ``indices``.
    """
    indices = np.asarray(indices, dtype=np.int64)
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    n = len(indices)
    if n < 2:
        raise ValueError(f"a client needs >= 2 rows to have a train and a test row, got {n}")
    n_test = min(max(int(round(n * test_fraction)), 1), n - 1)
    shuffled = np.random.default_rng(seed).permutation(indices)
    return np.sort(shuffled[n_test:]), np.sort(shuffled[:n_test])


def true_mixtures(
    partitions: list[np.ndarray], labels: np.ndarray, num_components: int
) -> np.ndarray:
    """pi*: each client's folded label proportions, shape ``(N, K)``; what routing should find."""
    labels = np.asarray(labels)
    if not partitions:
        return np.zeros((0, num_components), dtype=np.float64)
    return np.stack([mixture_of(labels[np.asarray(p)], num_components) for p in partitions])
