"""Server-side mathematics of Ripple, in plain numpy.

The K cluster models live as one ``stacked`` dict: each entry has shape
``(K, *tensor_shape)``, the K models' copies of that tensor stacked on a
leading axis. That layout turns both directions of the federation into one
matrix product per tensor:

- down: client b receives ``theta_b = sum_c w_bc theta_c`` (:func:`mix_models`);
- up: cluster c moves by the w-weighted mean of the deltas (eq. 9,
  :func:`weighted_cluster_update`).

Floating-point tensors are mixed/updated; integer tensors (BatchNorm's
``num_batches_tracked``) are counters, not parameters, and are never averaged.
No torch and no Flower here, so the maths is testable on hand-built arrays.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

__all__ = [
    "STRAT_ORDERS",
    "cluster_mass",
    "mix_model",
    "mix_models",
    "stratified_sample",
    "uniform_sample",
    "weighted_cluster_update",
]

_ROW_SUM_TOL = 1e-4


# Columns per block of a product. The blocks are fixed, so every element is
# computed by the same call whatever the number of workers: the results do not
# depend on the machine's core count.
BLOCK_COLUMNS = 1 << 15


@functools.lru_cache(maxsize=4)
def _pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ripple-mix")


def blocked_matmul(
    a: np.ndarray, b: np.ndarray, add: np.ndarray | None = None, workers: int = 1
) -> np.ndarray:
    """``a @ b`` (+ ``add``), (M, K) x (K, P), in fixed blocks of columns on ``workers`` threads.

    numpy releases the GIL inside each product, so the blocks run in
    parallel; the caller keeps BLAS to one thread per worker. A product
    narrower than a block is one plain ``matmul``.
    """
    out = np.empty((a.shape[0], b.shape[1]), dtype=np.result_type(a, b))

    def block(cols: slice) -> None:
        np.matmul(a, b[:, cols], out=out[:, cols])
        if add is not None:
            np.add(out[:, cols], add[:, cols], out=out[:, cols])

    blocks = [slice(c, c + BLOCK_COLUMNS) for c in range(0, b.shape[1], BLOCK_COLUMNS)]
    if workers <= 1 or len(blocks) == 1:
        for cols in blocks:
            block(cols)
    else:
        list(_pool(workers).map(block, blocks))
    return out


def _is_float(arr: np.ndarray) -> bool:
    return np.issubdtype(arr.dtype, np.inexact)


def _num_clusters(stacked: Mapping[str, np.ndarray]) -> int:
    """The shared leading axis K of every stacked tensor."""
    if not stacked:
        raise ValueError("stacked model is empty")
    sizes = {k: np.shape(v)[0] if np.ndim(v) > 0 else None for k, v in stacked.items()}
    bad = [k for k, s in sizes.items() if s is None]
    if bad:
        raise ValueError(f"stacked tensor {bad[0]!r} has no leading cluster axis")
    distinct = set(sizes.values())
    if len(distinct) != 1:
        raise ValueError(f"stacked tensors disagree on the number of clusters: {sizes}")
    k = distinct.pop()
    if k < 1:
        raise ValueError("stacked model has zero clusters")
    return int(k)


def _check_weights(weights: np.ndarray, num_clusters: int | None, simplex: bool) -> np.ndarray:
    """Validated float64 copy of a (rows, K) weight matrix."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2:
        raise ValueError(f"weights must be 2-D (clients, clusters), got shape {w.shape}")
    if num_clusters is not None and w.shape[1] != num_clusters:
        raise ValueError(
            f"weights have {w.shape[1]} columns but the stacked model has {num_clusters} clusters"
        )
    if not np.all(np.isfinite(w)):
        raise ValueError("weights must be finite")
    if np.any(w < 0):
        raise ValueError("weights must be non-negative")
    if simplex and len(w):
        sums = w.sum(axis=1)
        off = np.flatnonzero(np.abs(sums - 1.0) > _ROW_SUM_TOL)
        if off.size:
            raise ValueError(
                f"each weight row must sum to 1 (tolerance {_ROW_SUM_TOL}); "
                f"row {off[0]} sums to {sums[off[0]]:.6g}"
            )
    return w


def cluster_mass(weights: np.ndarray) -> np.ndarray:
    """Effective participation mass ``sum_k w_kc`` of each cluster, shape (K,).

    It is the denominator of eq. 9 and what the stratified sampler ranks by.
    """
    return _check_weights(weights, None, simplex=False).sum(axis=0)


def _effective_weights(w: np.ndarray, threshold: float) -> np.ndarray:
    """Drop components below ``threshold`` and renormalise each row to sum to 1."""
    eff = np.where(w >= threshold, w, 0.0)
    sums = eff.sum(axis=1, keepdims=True)
    empty = sums[:, 0] <= 0
    if np.any(empty):
        # Only reachable with a threshold above 1/K: keep the dominant component.
        eff[empty] = 0.0
        eff[empty, np.argmax(w[empty], axis=1)] = 1.0
        sums = eff.sum(axis=1, keepdims=True)
    return eff / sums


def mix_stacked(
    weights: np.ndarray,
    stacked: Mapping[str, np.ndarray],
    threshold: float = 1e-4,
    workers: int = 1,
) -> dict[str, np.ndarray]:
    """Personalised models ``theta_b = sum_c w_bc theta_c``, stacked: each tensor is (B, ...).

    ``weights`` is (B, K), rows in the simplex. Components with
    ``w_bc < threshold`` are skipped: set to zero, and the row's remaining
    weights renormalised to sum to 1, so the result stays a convex combination
    (no shrinkage towards zero) and a client with one dominant cluster gets
    that cluster exactly. Integer tensors are copied from ``argmax_c w_bc``
    (ties: lowest index). Each output tensor keeps its input dtype. One
    matrix product per tensor for all B clients, on ``workers`` threads
    (:func:`blocked_matmul`).
    """
    k = _num_clusters(stacked)
    w = _check_weights(weights, k, simplex=True)
    if not (0.0 <= threshold < 1.0):
        raise ValueError(f"threshold must be in [0, 1), got {threshold}")
    eff = _effective_weights(w, threshold)
    top = np.argmax(w, axis=1)
    b = len(w)
    mixed: dict[str, np.ndarray] = {}
    for key, value in stacked.items():
        t = np.asarray(value)
        if _is_float(t):
            flat = blocked_matmul(eff.astype(t.dtype, copy=False), t.reshape(k, -1), None, workers)
            mixed[key] = flat.reshape((b, *t.shape[1:]))
        else:
            mixed[key] = t[top]  # fancy indexing copies
    return mixed


def mix_models(
    weights: np.ndarray,
    stacked: Mapping[str, np.ndarray],
    threshold: float = 1e-4,
) -> list[dict[str, np.ndarray]]:
    """:func:`mix_stacked`, split into one state dict per row of ``weights`` (views, no copy)."""
    return unstack(mix_stacked(weights, stacked, threshold))


def unstack(stacked: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Tensors stacked on a leading axis ``(B, ...)`` -> B state dicts (views, no copy)."""
    b = len(next(iter(stacked.values()))) if stacked else 0
    # arr[i, ...] keeps 0-d tensors as arrays (arr[i] would give numpy scalars).
    return [{key: np.asarray(arr)[i, ...] for key, arr in stacked.items()} for i in range(b)]


def mix_model(
    weights: np.ndarray, stacked: Mapping[str, np.ndarray], threshold: float = 1e-4
) -> dict[str, np.ndarray]:
    """One client's model from its weight vector (K,), e.g. for zero-shot onboarding."""
    w = np.asarray(weights)
    if w.ndim != 1:
        raise ValueError(f"weights must be one vector (K,), got shape {w.shape}")
    return mix_models(w[None, :], stacked, threshold)[0]


def _check_deltas(
    stacked: Mapping[str, np.ndarray], deltas: Sequence[Mapping[str, np.ndarray]]
) -> None:
    for i, delta in enumerate(deltas):
        for key in stacked:
            if key not in delta:
                raise ValueError(f"delta {i} lacks tensor {key!r}")
        for key in delta:
            if key not in stacked:
                raise ValueError(f"delta {i} has unknown tensor {key!r}")
        for key, value in stacked.items():
            d = np.asarray(delta[key])
            if d.shape != np.shape(value)[1:]:
                raise ValueError(
                    f"delta {i} tensor {key!r} has shape {d.shape}, expected {np.shape(value)[1:]}"
                )
            if _is_float(np.asarray(value)) and not np.all(np.isfinite(d)):
                raise ValueError(f"delta {i} tensor {key!r} is not finite")


def weighted_cluster_update(
    stacked: Mapping[str, np.ndarray],
    deltas: Sequence[Mapping[str, np.ndarray]],
    weights: np.ndarray,
    server_lr: float = 1.0,
    eps: float = 1e-8,
) -> dict[str, np.ndarray]:
    """Eq. 9: ``theta_c + eta_s * sum_k w_kc delta_k / (sum_k w_kc + eps)`` for every cluster c.

    ``weights`` is (S, K), one row per delta, in the same order; rows need not
    sum to 1 (the update is a weighted mean). A cluster no client puts mass
    on stays unchanged. Integer tensors (BatchNorm's ``num_batches_tracked``)
    are left unchanged: a counter has no meaningful weighted mean, and the
    clients' copies of it are not parameters. Deltas are validated (keys,
    shapes, finiteness) before anything is computed, and the input is never
    modified; the result is new arrays in ``stacked`` order and dtypes.
    """
    k = _num_clusters(stacked)
    w = _check_weights(weights, k, simplex=False)
    if w.shape[0] != len(deltas):
        raise ValueError(f"{len(deltas)} deltas but {w.shape[0]} weight rows")
    _check_deltas(stacked, deltas)
    delta_stack = {
        key: np.stack([np.asarray(d[key], dtype=np.asarray(t).dtype) for d in deltas])
        for key, t in stacked.items()
        if _is_float(np.asarray(t)) and deltas
    }
    return apply_stacked_deltas(stacked, delta_stack, w, server_lr, eps)


def apply_stacked_deltas(
    stacked: Mapping[str, np.ndarray],
    delta_stack: Mapping[str, np.ndarray],
    weights: np.ndarray,
    server_lr: float = 1.0,
    eps: float = 1e-8,
    workers: int = 1,
) -> dict[str, np.ndarray]:
    """Eq. 9 on deltas already stacked per tensor, ``(S, ...)``, and already validated.

    The fast path of :func:`weighted_cluster_update` for a server that has
    checked every reply: no per-client copies. Tensors missing from
    ``delta_stack`` (integer ones) are copied unchanged.
    """
    k = _num_clusters(stacked)
    w = _check_weights(weights, k, simplex=False)
    if not np.isfinite(server_lr):
        raise ValueError(f"server_lr must be finite, got {server_lr}")
    if not (eps >= 0.0 and np.isfinite(eps)):
        raise ValueError(f"eps must be finite and non-negative, got {eps}")
    mass = w.sum(axis=0)
    denom = mass + eps
    # Zero mass with eps=0 would be 0/0; the numerator is exactly 0 there anyway.
    scale = np.where(denom > 0, server_lr / np.where(denom > 0, denom, 1.0), 0.0)
    # Fold eta_s / (sum_k w_kc + eps) into the weights: one (K, S) @ (S, P) per tensor.
    coef = (w * scale[None, :]).T
    updated: dict[str, np.ndarray] = {}
    for key, value in stacked.items():
        t = np.asarray(value)
        d = delta_stack.get(key)
        if d is None or len(d) == 0:
            updated[key] = t.copy()
            continue
        if d.shape != (len(w), *t.shape[1:]):
            raise ValueError(f"deltas of {key!r} have shape {d.shape}, expected ({len(w)}, ...)")
        coef_t = coef.astype(t.dtype, copy=False)
        flat = blocked_matmul(coef_t, d.reshape(len(w), -1), t.reshape(len(t), -1), workers)
        updated[key] = flat.reshape(t.shape)
    return updated


def uniform_sample(num_clients: int, sample_size: int, rng: np.random.Generator) -> np.ndarray:
    """``sample_size`` distinct client indices drawn uniformly, sorted (Ripple-Unif)."""
    if num_clients < 0 or not (0 <= sample_size <= num_clients):
        raise ValueError(
            f"cannot sample {sample_size} distinct clients out of {num_clients}; "
            "clip sample_size to the number of clients"
        )
    return np.sort(rng.choice(num_clients, size=sample_size, replace=False)).astype(np.int64)


STRAT_ORDERS = ("rotation", "mass")


def stratified_sample(
    weights: np.ndarray,
    sample_size: int,
    rng: np.random.Generator,
    min_mass: float = 1e-4,
    *,
    server_round: int = 1,
    order: str = "rotation",
) -> np.ndarray:
    """Ripple-Strat: a sample in which every cluster with mass has a representative.

    ``weights`` is (N, K) over all N clients. Each cluster c with
    ``sum_k w_kc > min_mass`` gets one client whose largest weight is c,
    chosen at random among those; if no client has c as its largest weight,
    it gets the client with the most mass on c (ties: lowest index). A
    cluster already represented by an earlier pick is not picked again.
    Clusters are served in decreasing order of total mass. When more clusters
    have mass (M) than ``sample_size`` (S), ``order="rotation"`` (the default)
    starts round r's pass at position ``(r - 1) * S mod M`` of that order, so
    over any ceil(M / S) consecutive rounds every cluster with mass gets a
    representative; ``order="mass"`` (the earlier rule) always starts at the
    heaviest, so the same S clusters are served every round and the others
    never. With M <= S both give the same sample. The rest of the sample is
    drawn uniformly from the clients not yet chosen. Returns sorted, distinct
    indices; deterministic given ``rng`` and ``server_round``.
    """
    if order not in STRAT_ORDERS:
        raise ValueError(f"order={order!r} is not one of {', '.join(STRAT_ORDERS)}")
    w = _check_weights(weights, None, simplex=False)
    n = len(w)
    if not (0 <= sample_size <= n):
        raise ValueError(
            f"cannot sample {sample_size} distinct clients out of {n}; "
            "clip sample_size to the number of clients"
        )
    if n == 0 or sample_size == 0:
        return np.zeros(0, dtype=np.int64)
    mass = w.sum(axis=0)
    top = np.argmax(w, axis=1)
    served = np.argsort(-mass, kind="stable")
    served = served[mass[served] > min_mass]
    if order == "rotation" and len(served) > sample_size:
        served = np.roll(served, -(((int(server_round) - 1) * sample_size) % len(served)))
    chosen: list[int] = []
    taken = np.zeros(n, dtype=bool)
    covered = np.zeros(w.shape[1], dtype=bool)
    for c in served:
        if len(chosen) == sample_size:
            break
        if covered[c]:
            continue
        owners = np.flatnonzero(top == c)
        if owners.size:
            pick = int(rng.choice(owners))
        else:
            pick = int(np.argmax(w[:, c]))
            covered[c] = True
            if taken[pick]:
                continue
        chosen.append(pick)
        taken[pick] = True
        covered[top[pick]] = True
    rest = np.flatnonzero(~taken)
    extra = rng.choice(rest, size=sample_size - len(chosen), replace=False)
    return np.sort(np.concatenate([np.asarray(chosen, dtype=np.int64), extra.astype(np.int64)]))
