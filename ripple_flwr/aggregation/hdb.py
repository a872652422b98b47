"""Ripple-HDB: fewer, data-driven clusters from HDBSCAN over the clients' routing weights.

Ripple fixes the number of mixture components K up front, but the federation may hold
fewer real distributions. Ripple-HDB finds K_hat <= K from the clients' own weights: it
runs HDBSCAN on the square root of the Jensen-Shannon divergence between clients' routing
weights (eq. 10 of "Ripple in Still Water") and turns the client clusters into a map from
*components* to meta-clusters, then sums each client's weights over the components of a
meta-cluster (eq. 11). Because the map is over components, not clients, a new client's
router output collapses with the same map, without re-clustering.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import rel_entr

_LN2 = math.log(2.0)
_SUM_TOL = 1e-6
_BLOCK_ELEMENTS = 1 << 22  # ~32 MiB of float64 per temporary in the pairwise JS


def collapse_weights(w: np.ndarray, component_map: np.ndarray, num_meta: int) -> np.ndarray:
    """Eq. 11: w_hat[k, m] = sum of w[k, j] over the components j mapped to meta-cluster m.

    This is how any client, old or new, gets its weights over the K_hat meta-models from
    its K routing weights. ``w`` is ``(N, K)`` (or ``(K,)``, giving ``(num_meta,)``),
    ``component_map`` ``(K,)`` ints in ``[0, num_meta)``; rows keep their sum.
    """
    w = np.asarray(w, dtype=np.float64)
    single = w.ndim == 1
    w2 = np.atleast_2d(w)
    cmap = np.asarray(component_map, dtype=np.int64)
    if cmap.shape != (w2.shape[1],):
        raise ValueError(f"component map has shape {cmap.shape}, expected ({w2.shape[1]},)")
    if num_meta < 1 or cmap.min() < 0 or cmap.max() >= num_meta:
        raise ValueError(f"component map values must lie in [0, {num_meta})")
    out = np.zeros((len(w2), num_meta), dtype=np.float64)
    np.add.at(out.T, cmap, w2.T)
    return out[0] if single else out


# --- input checks ---------------------------------------------------------------------------


def _as_weights(w: Any, name: str = "w", min_rows: int = 1) -> np.ndarray:
    """``w`` as a float64 ``(N, K)`` array of probability rows, or a ValueError saying why not."""
    arr = np.asarray(w)
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D (clients x components) array, got shape {arr.shape}"
        )
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    n, k = arr.shape
    if k < 1:
        raise ValueError(f"{name} has no components (shape {arr.shape})")
    if n < min_rows:
        raise ValueError(f"{name} needs at least {min_rows} rows (clients), got {n}")
    bad = ~np.isfinite(arr).all(axis=1)
    if bad.any():
        raise ValueError(f"{name} contains NaN or inf in rows {np.flatnonzero(bad)[:10].tolist()}")
    neg = (arr < 0).any(axis=1)
    if neg.any():
        raise ValueError(
            f"{name} has negative entries in rows {np.flatnonzero(neg)[:10].tolist()}; "
            "routing weights must be probabilities"
        )
    sums = arr.sum(axis=1)
    off = np.abs(sums - 1.0) > _SUM_TOL
    if off.any():
        rows = np.flatnonzero(off)[:10]
        raise ValueError(
            f"rows of {name} must sum to 1 (within {_SUM_TOL:g}); rows {rows.tolist()} sum to "
            f"{np.round(sums[rows], 6).tolist()}: renormalise the router output"
        )
    return arr


# --- eq. 10: square-root Jensen-Shannon distances -------------------------------------------


def _js_cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """JS divergence (nats) between every row of ``a`` and every row of ``b``, in row blocks.

    Uses the KL form 0.5 * (KL(p||m) + KL(q||m)) with ``rel_entr`` (0 log 0 = 0), which is
    accurate for near-identical rows where the entropy form cancels badly.
    """
    out = np.empty((len(a), len(b)), dtype=np.float64)
    step = max(1, _BLOCK_ELEMENTS // max(1, len(b) * a.shape[1]))
    q = b[None, :, :]
    for start in range(0, len(a), step):
        p = a[start : start + step, None, :]
        m = 0.5 * (p + q)
        out[start : start + step] = 0.5 * (rel_entr(p, m) + rel_entr(q, m)).sum(axis=-1)
    return np.clip(out, 0.0, _LN2)


def js_divergence_matrix(w: np.ndarray) -> np.ndarray:
    """Pairwise Jensen-Shannon divergence (natural log) between the rows of ``w``.

    ``(N, K)`` -> ``(N, N)`` float64, exactly symmetric, zero diagonal, in ``[0, ln 2]``.
    """
    w = _as_weights(w)
    js = _js_cross(w, w)
    js = 0.5 * (js + js.T)  # already symmetric in exact arithmetic; make it so bit-for-bit
    np.fill_diagonal(js, 0.0)
    return js


def sqrt_js_distances(w: np.ndarray) -> np.ndarray:
    """Eq. 10: D_ij = sqrt(JS(w_i, w_j)), a metric bounded by sqrt(ln 2), as HDBSCAN's input."""
    return np.sqrt(js_divergence_matrix(w))


def js_to_centroids(w: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """``(N, M)`` sqrt-JS distances from each client's weights to each meta-cluster centroid.

    The same distance HDBSCAN clustered with, so "nearest" for noise clients and merges
    agrees with the clustering.
    """
    w = _as_weights(w)
    c = _as_weights(centroids, name="centroids")
    if c.shape[1] != w.shape[1]:
        raise ValueError(f"centroids have {c.shape[1]} components, w has {w.shape[1]}")
    return np.sqrt(_js_cross(w, c))


# --- eq. 11: component -> meta-cluster map ---------------------------------------------------


def _centroids(w: np.ndarray, labels: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``(len(ids), K)`` mean weights of the clients labelled with each id (ids must be used)."""
    onehot = (labels[:, None] == ids[None, :]).astype(np.float64)
    counts = onehot.sum(axis=0)
    return (onehot.T @ w) / counts[:, None]


def component_map_from_labels(w: np.ndarray, labels: np.ndarray, num_meta: int) -> np.ndarray:
    """Each component joins the meta-cluster whose centroid puts the most mass on it.

    Centroids are the mean ``w`` of the clients labelled ``m`` (label -1, noise, is
    ignored); ties go to the lowest meta id. Returns ``(K,)`` int64 in ``[0, num_meta)``.
    Some meta ids may win no component: :func:`refine_hdb` drops those.
    """
    w = _as_weights(w)
    if isinstance(num_meta, bool) or not isinstance(num_meta, int | np.integer) or num_meta < 1:
        raise ValueError(f"num_meta must be a positive int, got {num_meta!r}")
    lab = np.asarray(labels)
    if lab.shape != (len(w),):
        raise ValueError(f"labels has shape {lab.shape}, expected ({len(w)},)")
    if not np.issubdtype(lab.dtype, np.integer):
        raise ValueError(f"labels must be integers, got dtype {lab.dtype}")
    lab = lab.astype(np.int64)
    if lab.min() < -1 or lab.max() >= num_meta:
        raise ValueError(f"labels must lie in [-1, {num_meta}) (-1 = noise)")
    ids = np.arange(num_meta)
    counts = np.bincount(lab[lab >= 0], minlength=num_meta)
    if (counts == 0).any():
        raise ValueError(
            f"meta-clusters {np.flatnonzero(counts == 0).tolist()} have no member client"
        )
    return np.argmax(_centroids(w, lab, ids), axis=0).astype(np.int64)


# --- guards ---------------------------------------------------------------------------------


def _nearest(
    rows: np.ndarray, w: np.ndarray, labels: np.ndarray, core: np.ndarray, ids: np.ndarray
) -> np.ndarray:
    """For each of ``rows``, the id (from ``ids``) of the nearest centroid of core clients."""
    cents = _centroids(w[core], labels[core], ids)
    return ids[np.argmin(np.sqrt(_js_cross(rows, cents)), axis=1)]


def _merge_light(
    w: np.ndarray,
    labels: np.ndarray,
    component_map: np.ndarray,
    min_mass: float,
    core: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Guard (d): merge meta-clusters that carry less than ``min_mass`` clients of mass.

    Mass of meta-cluster m = sum over all clients of the collapsed weight w_hat[k, m] (each
    client weighs 1 in total). The lightest meta-cluster below ``min_mass`` hands its
    components and clients to the meta-cluster whose centroid (mean w of core clients) is
    nearest in sqrt-JS; repeat until none is light or one remains. Ids are not renumbered.
    ``labels`` must be >= 0 and every id in ``component_map`` must have a core client.
    """
    labels = np.asarray(labels, dtype=np.int64).copy()
    cmap = np.asarray(component_map, dtype=np.int64).copy()
    core = np.ones(len(w), dtype=bool) if core is None else np.asarray(core, dtype=bool)
    missing = np.setdiff1d(cmap, labels[core])
    if len(missing):
        raise ValueError(f"meta-clusters {missing.tolist()} have no (core) client to centre on")
    events: list[str] = []
    while True:
        ids = np.unique(cmap)
        if len(ids) <= 1:
            return labels, cmap, events
        mass = np.array([w[:, cmap == m].sum() for m in ids])
        if mass.min() >= min_mass:
            return labels, cmap, events
        i = int(np.argmin(mass))  # lightest first; ties -> lowest id
        light = int(ids[i])
        cents = _centroids(w[core], labels[core], ids)
        dist = np.sqrt(_js_cross(cents[i : i + 1], cents))[0]
        dist[i] = np.inf
        target = int(ids[int(np.argmin(dist))])
        comps = np.flatnonzero(cmap == light).tolist()
        events.append(
            f"meta-cluster {light} carried {mass[i]:.2f} clients of mass (< {min_mass:g}); "
            f"merged its components {comps} and {int((labels == light).sum())} clients "
            f"into meta-cluster {target} (nearest centroid, sqrt-JS {dist.min():.3f})"
        )
        cmap[cmap == light] = target
        labels[labels == light] = target


# --- Ripple-HDB -----------------------------------------------------------------------------


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class HDBResult:
    """What Ripple-HDB decided: the component map new clients collapse with, and why."""

    component_map: np.ndarray  # (K,) int64: the meta-cluster (model index) of each component
    num_meta: int  # K_hat
    labels: np.ndarray  # (N,) final meta-cluster of each client (noise reassigned)
    hdbscan_labels: np.ndarray  # (N,) raw HDBSCAN labels, -1 = noise
    collapsed: np.ndarray  # (N, K_hat) = collapse_weights(w, component_map, num_meta)
    fell_back: bool  # HDBSCAN found no cluster: the identity map (K_hat = K) was kept
    events: tuple[str, ...]  # what each guard did, in order

    def __post_init__(self) -> None:
        for name in ("component_map", "labels", "hdbscan_labels", "collapsed"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary (plain lists and ints) for the results file."""
        return {
            "num_meta": int(self.num_meta),
            "num_components": int(len(self.component_map)),
            "component_map": [int(x) for x in self.component_map],
            "labels": [int(x) for x in self.labels],
            "hdbscan_labels": [int(x) for x in self.hdbscan_labels],
            "num_noise": int((self.hdbscan_labels < 0).sum()),
            "collapsed": [[float(x) for x in row] for row in self.collapsed],
            "fell_back": bool(self.fell_back),
            "events": list(self.events),
        }


def _fallback(w: np.ndarray, raw: np.ndarray, event: str) -> HDBResult:
    """Guard (a): keep the K components as clusters; a client's meta-cluster is its argmax."""
    k = w.shape[1]
    cmap = np.arange(k, dtype=np.int64)
    return HDBResult(
        component_map=cmap,
        num_meta=k,
        labels=np.argmax(w, axis=1).astype(np.int64),
        hdbscan_labels=raw,
        collapsed=collapse_weights(w, cmap, k),
        fell_back=True,
        events=(event,),
    )


def _check_sizes(min_cluster_size: int, min_mass: float | None) -> tuple[int, float]:
    """HDBSCAN's smallest cluster (an int >= 2) and the lightest meta-cluster kept."""
    if (
        isinstance(min_cluster_size, bool)
        or not isinstance(min_cluster_size, int | np.integer)
        or min_cluster_size < 2
    ):
        raise ValueError(
            f"min_cluster_size must be an int >= 2 (HDBSCAN), got {min_cluster_size!r}"
        )
    mass = float(min_cluster_size) if min_mass is None else float(min_mass)
    if not math.isfinite(mass) or mass < 0:
        raise ValueError(f"min_mass must be a finite number >= 0, got {mass!r}")
    return int(min_cluster_size), mass


def _assign_clients(
    w: np.ndarray, raw: np.ndarray, events: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """The component map by the argmax rule (eq. 11), then every client in a meta-cluster.

    Meta-clusters that win no component are dropped and their clients move to the
    nearest remaining centroid (guard (c), one event each); noise clients join their
    nearest centroid (a normal step, no event).
    """
    core = raw >= 0
    num_raw = int(raw.max()) + 1
    labels = raw.copy()
    cmap = component_map_from_labels(w, raw, num_raw)
    won = np.unique(cmap)
    empty = np.setdiff1d(np.arange(num_raw), won)
    if len(empty):
        movers = np.isin(labels, empty)
        before = labels[movers].copy()
        labels[movers] = _nearest(w[movers], w, labels, core & ~movers, won)
        for m in empty.tolist():
            dest = sorted(set(labels[movers][before == m].tolist()))
            events.append(
                f"meta-cluster {m} ({int((before == m).sum())} clients) won no component "
                f"under the argmax rule; dropped it and moved its clients to meta-clusters {dest}"
            )
    noise = labels < 0
    if noise.any():
        labels[noise] = _nearest(w[noise], w, labels, core, won)
    return labels, cmap


def _renumber(
    cmap: np.ndarray, labels: np.ndarray, events: list[str]
) -> tuple[np.ndarray, np.ndarray, int]:
    """Meta-cluster ids renumbered 0..K_hat-1 in order of the surviving ids."""
    ids = np.unique(cmap)
    num_meta = len(ids)
    if not np.array_equal(ids, np.arange(num_meta)):
        renum = dict(zip(ids.tolist(), range(num_meta), strict=True))
        events.append(f"renumbered meta-clusters contiguously (old -> new): {renum}")
    cmap = np.searchsorted(ids, cmap).astype(np.int64)
    labels = np.searchsorted(ids, labels).astype(np.int64)
    return cmap, labels, num_meta


def refine_hdb(
    w: np.ndarray, min_cluster_size: int = 3, min_mass: float | None = None
) -> HDBResult:
    """Ripple-HDB: cluster the clients' routing weights and collapse the K components to K_hat.

    Steps: HDBSCAN on sqrt-JS distances (eq. 10); component map by the centroid argmax rule
    (eq. 11), centroids over HDBSCAN's clustered (non-noise) clients; meta-clusters that win
    no component are dropped and their clients move to the nearest remaining centroid; noise
    clients join their nearest centroid; meta-clusters lighter than ``min_mass`` clients of
    collapsed mass (default ``min_cluster_size``) are merged into their nearest neighbour;
    finally ids are renumbered 0..K_hat-1. Every guard that acts leaves a line in ``events``.
    """
    w = _as_weights(w, min_rows=2)
    min_cluster_size, min_mass = _check_sizes(min_cluster_size, min_mass)
    n, k = w.shape
    if n < min_cluster_size:
        return _fallback(
            w,
            np.full(n, -1, dtype=np.int64),
            f"only {n} clients (< min_cluster_size={min_cluster_size}): HDBSCAN not run; "
            f"kept the identity map (K_hat = K = {k})",
        )

    import hdbscan  # heavy import, only needed here

    raw = (
        hdbscan.HDBSCAN(
            metric="precomputed", min_cluster_size=min_cluster_size, allow_single_cluster=False
        )
        .fit(sqrt_js_distances(w))
        .labels_.astype(np.int64)
    )
    if not (raw >= 0).any():
        return _fallback(
            w,
            raw,
            f"HDBSCAN found no cluster among {n} clients (all noise, min_cluster_size="
            f"{min_cluster_size}); kept the identity map (K_hat = K = {k})",
        )
    events: list[str] = []
    labels, cmap = _assign_clients(w, raw, events)
    # Guard (d): near-empty meta-clusters collapse new clients to chance; merge them.
    labels, cmap, merged = _merge_light(w, labels, cmap, min_mass, core=raw >= 0)
    events.extend(merged)
    cmap, labels, num_meta = _renumber(cmap, labels, events)
    # Guard (b): a single meta-cluster is allowed, but it means no personalisation at all.
    if num_meta == 1:
        events.append("only one meta-cluster remains (K_hat = 1): every client gets the same model")

    return HDBResult(
        component_map=cmap,
        num_meta=num_meta,
        labels=labels,
        hdbscan_labels=raw,
        collapsed=collapse_weights(w, cmap, num_meta),
        fell_back=False,
        events=tuple(events),
    )
