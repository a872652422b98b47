"""Ripple-HDB (eq. 10/11) on small hand-built posteriors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from ripple_flwr.aggregation.hdb import (
    HDBResult,
    _merge_light,
    collapse_weights,
    component_map_from_labels,
    js_divergence_matrix,
    js_to_centroids,
    refine_hdb,
    sqrt_js_distances,
)


def _jitter(rows: list[list[float]], n: int, scale: float = 0.01, seed: int = 0) -> np.ndarray:
    """``n`` clients near each prototype row: uniform noise of ``scale``, renormalised."""
    rng = np.random.default_rng(seed)
    out = []
    for r in rows:
        x = np.asarray(r, dtype=np.float64)[None, :] + rng.uniform(0, scale, (n, len(r)))
        out.append(x / x.sum(axis=1, keepdims=True))
    return np.vstack(out)


def _check_map(res: HDBResult, w: np.ndarray) -> None:
    """Invariants of every result: contiguous map, all ids used, rows keep their mass."""
    k = w.shape[1]
    assert res.component_map.shape == (k,) and res.component_map.dtype == np.int64
    assert sorted(set(res.component_map.tolist())) == list(range(res.num_meta))
    assert res.labels.shape == (len(w),) and res.labels.min() >= 0
    assert res.labels.max() < res.num_meta
    np.testing.assert_allclose(
        res.collapsed, collapse_weights(w, res.component_map, res.num_meta), atol=0
    )
    np.testing.assert_allclose(res.collapsed.sum(axis=1), 1.0, atol=1e-12)


# --- JS divergence / distances ------------------------------------------------------------


def test_js_by_hand() -> None:
    w = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])
    js = js_divergence_matrix(w)
    assert js.dtype == np.float64 and js.shape == (4, 4)
    assert js[0, 1] == pytest.approx(math.log(2))  # disjoint supports: the maximum
    assert js[0, 2] == 0.0  # identical rows
    # [1,0] vs [.5,.5]: m = [.75,.25]; 0.5*(ln(1/.75) + .5 ln(.5/.75) + .5 ln(.5/.25))
    by_hand = 0.5 * (math.log(4 / 3) + 0.5 * math.log(2 / 3) + 0.5 * math.log(2))
    assert js[0, 3] == pytest.approx(by_hand)
    assert sqrt_js_distances(w)[0, 1] == pytest.approx(math.sqrt(math.log(2)))


def test_sqrt_js_is_a_symmetric_metric_matching_scipy() -> None:
    rng = np.random.default_rng(42)
    w = rng.dirichlet(np.full(5, 0.3), size=25)
    w[3] = w[7]  # an exact duplicate
    w[0] = [1, 0, 0, 0, 0]  # zeros exercise 0 log 0
    d = sqrt_js_distances(w)
    assert np.array_equal(d, d.T)
    assert np.all(np.diag(d) == 0) and d[3, 7] == 0.0
    assert d.min() >= 0 and d.max() <= math.sqrt(math.log(2)) + 1e-15
    ref = np.array([[jensenshannon(a, b) for b in w] for a in w])  # base e = sqrt-JS
    np.testing.assert_allclose(d, ref, atol=1e-12)
    # Triangle inequality over all triples: d[i, k] <= d[i, j] + d[j, k].
    slack = d[:, None, :] - (d[:, :, None] + d[None, :, :])
    assert slack.max() <= 1e-12


def test_js_to_centroids_matches_scipy() -> None:
    rng = np.random.default_rng(1)
    w = rng.dirichlet(np.ones(4), size=6)
    c = rng.dirichlet(np.ones(4), size=3)
    got = js_to_centroids(w, c)
    assert got.shape == (6, 3)
    ref = np.array([[jensenshannon(a, b) for b in c] for a in w])
    np.testing.assert_allclose(got, ref, atol=1e-12)
    with pytest.raises(ValueError, match="components"):
        js_to_centroids(w, np.full((2, 3), 1 / 3))


# --- refine_hdb: regular cases ------------------------------------------------------------


def test_two_groups_give_two_meta_clusters() -> None:
    w = _jitter([[0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]], 6, scale=0.02)
    res = refine_hdb(w)
    _check_map(res, w)
    assert not res.fell_back and res.num_meta == 2
    cmap = res.component_map
    assert cmap[0] == cmap[1] and cmap[2] == cmap[3] and cmap[0] != cmap[2]
    assert len(set(res.labels[:6].tolist())) == 1 and len(set(res.labels[6:].tolist())) == 1
    assert res.labels[0] == cmap[0] and res.labels[6] == cmap[2]
    assert res.events == ()
    # Deterministic.
    again = refine_hdb(w)
    assert np.array_equal(again.component_map, cmap) and np.array_equal(again.labels, res.labels)


def test_three_groups_give_three_meta_clusters() -> None:
    protos = [[0.5, 0.5, 0, 0, 0, 0], [0, 0, 0.5, 0.5, 0, 0], [0, 0, 0, 0, 0.5, 0.5]]
    w = _jitter(protos, 5, scale=0.02)
    res = refine_hdb(w)
    _check_map(res, w)
    assert res.num_meta == 3 and not res.fell_back
    groups = [set(res.component_map[[j, j + 1]].tolist()) for j in (0, 2, 4)]
    assert all(len(g) == 1 for g in groups) and len(set.union(*groups)) == 3
    # New clients collapse with the same map.
    new = collapse_weights(np.array([0.1, 0.0, 0.0, 0.0, 0.6, 0.3]), res.component_map, 3)
    assert new[res.component_map[4]] == pytest.approx(0.9)


def test_noise_client_joins_nearest_meta_cluster() -> None:
    a, b = [0.4, 0.4, 0.1, 0.1, 0, 0], [0.1, 0.1, 0.4, 0.4, 0, 0]
    blend = [0.3, 0.2, 0.0, 0.0, 0.25, 0.25]
    w = np.vstack([_jitter([a, b], 6), blend])
    res = refine_hdb(w)
    _check_map(res, w)
    assert res.hdbscan_labels[-1] == -1 and (res.hdbscan_labels[:-1] >= 0).all()
    assert res.labels.min() >= 0
    core = res.hdbscan_labels >= 0
    cents = np.array([w[core & (res.labels == m)].mean(axis=0) for m in range(res.num_meta)])
    dist = [jensenshannon(w[-1], c) for c in cents]
    assert res.labels[-1] == int(np.argmin(dist))
    assert res.labels[-1] == res.labels[0]  # the blend leans towards group a


# --- refine_hdb: degenerate outcomes ------------------------------------------------------


def test_identical_clients_fall_back_or_single_cluster_with_event() -> None:
    w = _jitter([[0.25, 0.25, 0.25, 0.25]], 8, scale=0.001)
    res = refine_hdb(w)
    _check_map(res, w)
    assert res.events
    if res.fell_back:
        assert res.num_meta == 4 and np.array_equal(res.component_map, np.arange(4))
        assert "no cluster" in res.events[0]
    else:
        assert res.num_meta == 1 and "one meta-cluster" in res.events[-1]


def test_exactly_identical_clients_fall_back() -> None:
    w = np.tile([0.7, 0.2, 0.1], (6, 1))
    res = refine_hdb(w)
    assert res.fell_back and res.num_meta == 3 and (res.hdbscan_labels == -1).all()
    assert np.array_equal(res.labels, np.zeros(6, dtype=np.int64))  # argmax component
    np.testing.assert_allclose(res.collapsed, w)


def test_fewer_clients_than_min_cluster_size_fall_back() -> None:
    w = np.array([[0.9, 0.1, 0.0], [0.0, 0.2, 0.8]])
    res = refine_hdb(w, min_cluster_size=3)
    assert res.fell_back and res.num_meta == 3
    assert np.array_equal(res.component_map, np.arange(3))
    assert np.array_equal(res.labels, [0, 2]) and (res.hdbscan_labels == -1).all()
    assert len(res.events) == 1 and "only 2 clients" in res.events[0]


def test_meta_cluster_without_component_is_dropped() -> None:
    # Group c sits between a and b: its centroid never has the most mass on any component.
    protos = [[0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5], [0.35, 0.35, 0.15, 0.15]]
    w = _jitter(protos, 5)
    res = refine_hdb(w)
    _check_map(res, w)
    assert len(set(res.hdbscan_labels.tolist())) == 3  # HDBSCAN found all three
    assert res.num_meta == 2
    assert any("won no component" in e for e in res.events)
    assert (res.labels[10:] == res.component_map[0]).all()  # c's clients join a (nearest)


def test_light_meta_cluster_is_merged_through_hdbscan() -> None:
    # A flat group wins only components 4, 5 that nobody else uses: 5 * 2/6 < 3 clients.
    protos = [[0.5, 0.5, 0, 0, 0, 0], [0, 0, 0.5, 0.5, 0, 0], [1 / 6] * 6]
    w = _jitter(protos, 5, scale=0.02)
    res = refine_hdb(w)
    _check_map(res, w)
    assert len(set(res.hdbscan_labels.tolist())) == 3 and res.num_meta == 2
    (event,) = [e for e in res.events if "clients of mass" in e]
    assert "components [4, 5]" in event and "(< 3)" in event
    assert res.collapsed.sum(axis=0).min() >= 3
    # With min_mass 0 nothing is merged.
    assert refine_hdb(w, min_mass=0.0).num_meta == 3


def test_merge_down_to_one_meta_cluster_is_reported() -> None:
    w = _jitter([[0.5, 0.5, 0], [0.4, 0.4, 0.2]], 6)
    res = refine_hdb(w)
    _check_map(res, w)
    assert res.num_meta == 1 and not res.fell_back
    assert (res.labels == 0).all() and np.allclose(res.collapsed, 1.0)
    assert "clients of mass" in res.events[0]
    assert "one meta-cluster" in res.events[-1]


def test_merge_light_helper_directly() -> None:
    w = np.array(
        [
            [0.8, 0.1, 0.1, 0.0],
            [0.7, 0.2, 0.1, 0.0],
            [0.1, 0.8, 0.0, 0.1],
            [0.1, 0.7, 0.1, 0.1],
            [0.4, 0.0, 0.4, 0.2],
        ]
    )
    labels = np.array([0, 0, 1, 1, 3])
    cmap = np.array([0, 1, 3, 3])
    new_labels, new_map, events = _merge_light(w, labels, cmap, min_mass=1.5)
    # Masses: meta 0 = 2.1, meta 1 = 1.8, meta 3 = 0.7 + 0.4 = 1.1 clients (< 1.5).
    assert len(events) == 1
    assert "meta-cluster 3 carried 1.10" in events[0] and "components [2, 3]" in events[0]
    # Its centroid (client 4) is nearer meta 0's centroid than meta 1's.
    c0, c1 = w[:2].mean(axis=0), w[2:4].mean(axis=0)
    assert jensenshannon(w[4], c0) < jensenshannon(w[4], c1)
    assert "into meta-cluster 0" in events[0]
    assert np.array_equal(new_map, [0, 1, 0, 0]) and np.array_equal(new_labels, [0, 0, 1, 1, 0])
    mass = [w[:, new_map == m].sum() for m in np.unique(new_map)]
    assert min(mass) >= 1.5
    # Inputs are left alone; nothing to do leaves no event.
    assert np.array_equal(cmap, [0, 1, 3, 3])
    assert _merge_light(w, labels, cmap, min_mass=1.0)[2] == []


# --- results / interface ------------------------------------------------------------------


def test_result_is_frozen_and_json_friendly() -> None:
    w = _jitter([[0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]], 6, scale=0.02)
    res = refine_hdb(w)
    d = json.loads(json.dumps(res.to_dict()))
    assert d["num_meta"] == 2 and d["component_map"] == res.component_map.tolist()
    assert d["fell_back"] is False and d["events"] == [] and d["num_noise"] == 0
    assert len(d["collapsed"]) == 12 and len(d["collapsed"][0]) == 2
    with pytest.raises(ValueError):
        res.component_map[0] = 1  # read-only
    with pytest.raises(AttributeError):
        res.num_meta = 3  # type: ignore[misc]


def test_component_map_from_labels() -> None:
    w = np.array([[0.6, 0.3, 0.1], [0.5, 0.4, 0.1], [0.1, 0.2, 0.7], [0.2, 0.2, 0.6]])
    cmap = component_map_from_labels(w, np.array([0, 0, 1, -1]), 2)
    # Centroids: m0 = [.55,.35,.1], m1 = [.1,.2,.7] (the noise row is ignored).
    assert cmap.dtype == np.int64 and np.array_equal(cmap, [0, 0, 1])
    with pytest.raises(ValueError, match="no member"):
        component_map_from_labels(w, np.array([0, 0, 0, -1]), 2)
    with pytest.raises(ValueError, match=r"\[-1, 2\)"):
        component_map_from_labels(w, np.array([0, 0, 2, 1]), 2)


# --- input errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("w", "match"),
    [
        (np.array([[0.5, np.nan], [0.5, 0.5]]), "NaN"),
        (np.array([[1.2, -0.2], [0.5, 0.5]]), "negative"),
        (np.array([[0.5, 0.4], [0.5, 0.5]]), "renormalise the router output"),
        (np.array([0.5, 0.5]), "2-D"),
        (np.array([[0.5, 0.5]]), "at least 2"),
    ],
)
def test_bad_weights_raise(w: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        refine_hdb(w)


def test_bad_parameters_raise() -> None:
    w = _jitter([[0.5, 0.5]], 4)
    with pytest.raises(ValueError, match="min_cluster_size"):
        refine_hdb(w, min_cluster_size=1)
    with pytest.raises(ValueError, match="min_mass"):
        refine_hdb(w, min_mass=-1.0)
    with pytest.raises(ValueError, match="NaN"):
        sqrt_js_distances(np.array([[np.inf, 0.0]]))


# --- collapse_weights (eq. 11) ------------------------------------------------------------


def test_collapse_weights_by_hand() -> None:
    out = collapse_weights(np.array([[0.1, 0.2, 0.7]]), np.array([0, 1, 0]), 2)
    np.testing.assert_allclose(out, [[0.8, 0.2]])
    one = collapse_weights(np.array([0.1, 0.2, 0.7]), np.array([0, 1, 0]), 2)
    assert one.shape == (2,)
    np.testing.assert_allclose(one, [0.8, 0.2])


@pytest.mark.parametrize(
    ("cmap", "num_meta", "match"),
    [
        (np.array([0, 1]), 2, "shape"),
        (np.array([0, 1, 2]), 2, r"\[0, 2\)"),
        (np.array([0, -1, 0]), 2, r"\[0, 2\)"),
        (np.array([0, 0, 0]), 0, r"\[0, 0\)"),
    ],
)
def test_collapse_weights_bad_maps_raise(cmap: np.ndarray, num_meta: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        collapse_weights(np.array([[0.1, 0.2, 0.7]]), cmap, num_meta)
