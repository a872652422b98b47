"""Server-side Ripple maths on hand-built cases."""

from __future__ import annotations

import numpy as np
import pytest

from ripple_flwr.aggregation.mixing import (
    BLOCK_COLUMNS,
    apply_stacked_deltas,
    blocked_matmul,
    cluster_mass,
    mix_model,
    mix_models,
    mix_stacked,
    stratified_sample,
    uniform_sample,
    weighted_cluster_update,
)


def _two_clusters() -> dict[str, np.ndarray]:
    """Two cluster models: a scalar, a 2x2 matrix and an integer counter."""
    return {
        "s": np.array([2.0, 6.0], dtype=np.float32),
        "m": np.stack([np.zeros((2, 2)), np.full((2, 2), 4.0)]).astype(np.float32),
        "n": np.array([3, 9], dtype=np.int64),
    }


def _copy(stacked: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v.copy() for k, v in stacked.items()}


# --- mix_models ---------------------------------------------------------------


def test_mix_quarter_three_quarters_by_hand() -> None:
    stacked = _two_clusters()
    (model,) = mix_models(np.array([[0.25, 0.75]]), stacked)
    assert model["s"] == pytest.approx(0.25 * 2.0 + 0.75 * 6.0)  # 5.0
    np.testing.assert_allclose(model["m"], np.full((2, 2), 0.75 * 4.0))  # 3.0
    assert model["n"] == 9  # argmax is cluster 1
    assert model["s"].dtype == np.float32 and model["m"].dtype == np.float32
    assert model["n"].dtype == np.int64
    assert list(model) == ["s", "m", "n"]


def test_mix_several_clients_at_once_matches_loop() -> None:
    rng = np.random.default_rng(0)
    stacked = {"a": rng.normal(size=(4, 3, 5)).astype(np.float32)}
    weights = rng.dirichlet(np.ones(4), size=6)
    models = mix_models(weights, stacked, threshold=0.0)
    assert len(models) == 6
    for b, model in enumerate(models):
        expected = sum(weights[b, c] * stacked["a"][c] for c in range(4))
        np.testing.assert_allclose(model["a"], expected, rtol=1e-5, atol=1e-6)
        assert model["a"].shape == (3, 5)


def test_threshold_skips_and_renormalises() -> None:
    stacked = {"s": np.array([1.0, 10.0, 100.0])}
    w = np.array([[0.5, 0.49995, 0.00005]])
    (kept,) = mix_models(w, stacked, threshold=0.0)
    assert kept["s"] == pytest.approx(0.5 * 1 + 0.49995 * 10 + 0.00005 * 100)
    (skipped,) = mix_models(w, stacked, threshold=1e-4)
    # Third component dropped, the rest renormalised by 0.99995.
    assert skipped["s"] == pytest.approx((0.5 * 1 + 0.49995 * 10) / 0.99995)
    # A weight exactly at the threshold is kept.
    (at,) = mix_models(np.array([[0.75, 0.25, 0.0]]), stacked, threshold=0.25)
    assert at["s"] == pytest.approx(0.75 + 2.5)


def test_threshold_above_every_component_keeps_the_argmax() -> None:
    stacked = {"s": np.array([1.0, 10.0, 100.0])}
    (model,) = mix_models(np.array([[0.3, 0.3, 0.4]]), stacked, threshold=0.5)
    assert model["s"] == 100.0


def test_integer_tensor_from_argmax() -> None:
    stacked = _two_clusters()
    a, b, tie = mix_models(np.array([[0.9, 0.1], [0.4, 0.6], [0.5, 0.5]]), stacked)
    assert (a["n"], b["n"], tie["n"]) == (3, 9, 3)  # ties: lowest index


def test_one_hot_weights_return_that_cluster_exactly() -> None:
    rng = np.random.default_rng(1)
    stacked = {"w": rng.normal(size=(3, 7, 4)).astype(np.float32), "n": np.array([1, 2, 3])}
    models = mix_models(np.eye(3), stacked)
    for c in range(3):
        np.testing.assert_array_equal(models[c]["w"], stacked["w"][c])
        assert models[c]["n"] == stacked["n"][c]


def test_mix_does_not_modify_input_and_clients_are_independent() -> None:
    stacked = _two_clusters()
    before = _copy(stacked)
    models = mix_models(np.array([[0.5, 0.5], [0.5, 0.5]]), stacked)
    models[0]["s"][...] = -1.0
    assert models[1]["s"] == 4.0
    for k in stacked:
        np.testing.assert_array_equal(stacked[k], before[k])


def test_mix_model_single_vector() -> None:
    model = mix_model(np.array([0.25, 0.75]), _two_clusters())
    assert model["s"] == pytest.approx(5.0)


@pytest.mark.parametrize(
    ("weights", "match"),
    [
        (np.array([0.5, 0.5]), "2-D"),
        (np.array([[0.2, 0.3, 0.5]]), "3 columns"),
        (np.array([[0.5, 0.4]]), "sum to 1"),
        (np.array([[1.5, -0.5]]), "non-negative"),
        (np.array([[np.nan, 1.0]]), "finite"),
    ],
)
def test_mix_rejects_bad_weights(weights: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        mix_models(weights, _two_clusters())


def test_mix_rejects_inconsistent_stack() -> None:
    with pytest.raises(ValueError, match="disagree"):
        mix_models(np.array([[1.0, 0.0]]), {"a": np.zeros(2), "b": np.zeros(3)})


# --- weighted_cluster_update (eq. 9) --------------------------------------------


def test_update_matches_eq9_by_hand() -> None:
    stacked = {"s": np.array([1.0, 2.0]), "v": np.array([[0.0, 0.0], [1.0, 1.0]])}
    deltas = [
        {"s": np.array(1.0), "v": np.array([1.0, 0.0])},
        {"s": np.array(3.0), "v": np.array([0.0, 2.0])},
    ]
    w = np.array([[0.75, 0.25], [0.5, 0.5]])
    eta, eps = 0.5, 1e-8
    new = weighted_cluster_update(stacked, deltas, w, server_lr=eta, eps=eps)
    # Cluster 0: mass 1.25, sum_k w_k0 delta_k = 0.75*1 + 0.5*3 = 2.25.
    # Cluster 1: mass 0.75, sum_k w_k1 delta_k = 0.25*1 + 0.5*3 = 1.75.
    assert new["s"][0] == pytest.approx(1.0 + eta * 2.25 / (1.25 + eps))
    assert new["s"][1] == pytest.approx(2.0 + eta * 1.75 / (0.75 + eps))
    # Vector: cluster 0 gets (0.75*[1,0] + 0.5*[0,2]) / 1.25,
    # cluster 1 gets (0.25*[1,0] + 0.5*[0,2]) / 0.75.
    np.testing.assert_allclose(new["v"][0], eta * np.array([0.75, 1.0]) / 1.25)
    np.testing.assert_allclose(new["v"][1], 1.0 + eta * np.array([0.25, 1.0]) / 0.75)


def test_update_keeps_dtype_integers_and_input() -> None:
    stacked = _two_clusters()
    before = _copy(stacked)
    deltas = [{"s": np.float32(1.0) * np.ones(()), "m": np.ones((2, 2)), "n": np.array(5)}]
    new = weighted_cluster_update(stacked, deltas, np.array([[1.0, 0.0]]))
    assert new["s"].dtype == np.float32 and new["m"].dtype == np.float32
    np.testing.assert_allclose(new["s"], [3.0, 6.0], rtol=1e-6)
    np.testing.assert_array_equal(new["n"], [3, 9])  # integers unchanged
    assert new["n"] is not stacked["n"]
    for k in stacked:
        np.testing.assert_array_equal(stacked[k], before[k])


def test_cluster_without_mass_is_unchanged() -> None:
    stacked = {"s": np.array([1.0, 2.0, 3.0])}
    deltas = [{"s": np.array(10.0)}, {"s": np.array(-4.0)}]
    w = np.array([[0.6, 0.4, 0.0], [0.1, 0.9, 0.0]])
    new = weighted_cluster_update(stacked, deltas, w)
    assert new["s"][2] == 3.0
    # Tiny mass moves it by at most mass / (mass + eps) of the delta.
    w_tiny = np.array([[0.6, 0.4 - 1e-12, 1e-12], [0.1, 0.9, 0.0]])
    tiny = weighted_cluster_update(stacked, deltas, w_tiny)
    assert abs(tiny["s"][2] - 3.0) <= 10.0 * 1e-12 / (1e-12 + 1e-8) + 1e-12
    # eps = 0 must not produce 0/0.
    assert weighted_cluster_update(stacked, deltas, w, eps=0.0)["s"][2] == 3.0


def test_update_with_no_replies_copies() -> None:
    stacked = _two_clusters()
    new = weighted_cluster_update(stacked, [], np.zeros((0, 2)))
    for k in stacked:
        np.testing.assert_array_equal(new[k], stacked[k])
        assert new[k] is not stacked[k]


def test_update_is_the_weighted_mean_when_all_weight_on_one_cluster() -> None:
    rng = np.random.default_rng(2)
    stacked = {"a": rng.normal(size=(2, 6)).astype(np.float32)}
    deltas = [{"a": rng.normal(size=6).astype(np.float32)} for _ in range(3)]
    w = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    new = weighted_cluster_update(stacked, deltas, w)
    mean = np.mean([d["a"] for d in deltas], axis=0)
    np.testing.assert_allclose(new["a"][0], stacked["a"][0] + mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(new["a"][1], stacked["a"][1])


@pytest.mark.parametrize(
    ("delta", "match"),
    [
        ({"s": np.array(1.0), "m": np.ones((2, 2))}, "lacks tensor 'n'"),
        ({"s": np.array(1.0), "m": np.ones((2, 2)), "n": np.array(0), "x": np.ones(1)}, "'x'"),
        ({"s": np.array(1.0), "m": np.ones((2, 3)), "n": np.array(0)}, "'m' has shape"),
        ({"s": np.array(np.inf), "m": np.ones((2, 2)), "n": np.array(0)}, "'s' is not finite"),
    ],
)
def test_update_rejects_bad_delta(delta: dict[str, np.ndarray], match: str) -> None:
    stacked = _two_clusters()
    good = {"s": np.array(1.0), "m": np.ones((2, 2)), "n": np.array(0)}
    with pytest.raises(ValueError, match=match):
        weighted_cluster_update(stacked, [good, delta], np.array([[0.5, 0.5], [0.5, 0.5]]))


def test_update_rejects_weight_row_count_mismatch() -> None:
    good = {"s": np.array(1.0), "m": np.ones((2, 2)), "n": np.array(0)}
    with pytest.raises(ValueError, match="1 deltas but 2 weight rows"):
        weighted_cluster_update(_two_clusters(), [good], np.full((2, 2), 0.5))


def test_cluster_mass() -> None:
    np.testing.assert_allclose(cluster_mass(np.array([[0.75, 0.25], [0.5, 0.5]])), [1.25, 0.75])


# --- samplers -------------------------------------------------------------------


def test_uniform_sample_distinct_sorted_deterministic() -> None:
    a = uniform_sample(100, 10, np.random.default_rng(7))
    b = uniform_sample(100, 10, np.random.default_rng(7))
    np.testing.assert_array_equal(a, b)
    assert len(np.unique(a)) == 10 and np.all(np.diff(a) > 0)
    assert a.min() >= 0 and a.max() < 100
    assert len(uniform_sample(5, 5, np.random.default_rng(0))) == 5
    with pytest.raises(ValueError, match="cannot sample"):
        uniform_sample(5, 6, np.random.default_rng(0))


def _covered(weights: np.ndarray, sample: np.ndarray, c: int) -> bool:
    top = np.argmax(weights, axis=1)
    return bool(np.any(top[sample] == c)) or int(np.argmax(weights[:, c])) in set(sample)


def test_stratified_covers_every_cluster_with_mass() -> None:
    for seed in range(200):
        rng = np.random.default_rng(seed)
        k = int(rng.integers(2, 11))
        w = rng.dirichlet(np.full(k, 0.1), size=60)
        if seed % 3 == 0:
            w[:, 0] = 0.0  # a cluster nobody uses
            w /= w.sum(axis=1, keepdims=True)
        sample = stratified_sample(w, 10, rng)
        assert len(sample) == 10 and len(np.unique(sample)) == 10
        assert np.all(np.diff(sample) > 0)
        for c in np.flatnonzero(w.sum(axis=0) > 1e-4):
            assert _covered(w, sample, c), (seed, c)


def test_stratified_falls_back_to_the_heaviest_client() -> None:
    # Cluster 2 is nobody's largest weight; client 3 has the most mass on it.
    w = np.array(
        [[0.9, 0.1, 0.0], [0.8, 0.1, 0.1], [0.1, 0.9, 0.0], [0.4, 0.25, 0.35], [0.1, 0.8, 0.1]]
    )
    for seed in range(20):
        sample = stratified_sample(w, 3, np.random.default_rng(seed))
        assert 3 in sample
        assert _covered(w, sample, 1)


def test_stratified_prefers_heavy_clusters_when_sample_is_small() -> None:
    # Masses: cluster 0 = 3.0, cluster 1 = 2.0, cluster 2 = 1.0; room for two.
    w = np.repeat(np.eye(3), [3, 2, 1], axis=0)
    for seed in range(20):
        sample = stratified_sample(w, 2, np.random.default_rng(seed))
        assert sorted(np.argmax(w[sample], axis=1)) == [0, 1]


def test_stratified_deterministic_and_edge_sizes() -> None:
    w = np.random.default_rng(3).dirichlet(np.ones(4), size=30)
    a = stratified_sample(w, 8, np.random.default_rng(11))
    b = stratified_sample(w, 8, np.random.default_rng(11))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(stratified_sample(w, 30, np.random.default_rng(0)), np.arange(30))
    assert stratified_sample(w, 0, np.random.default_rng(0)).size == 0
    with pytest.raises(ValueError, match="cannot sample"):
        stratified_sample(w, 31, np.random.default_rng(0))


def test_mixed_tensors_are_arrays_even_when_scalar() -> None:
    (model,) = mix_models(np.array([[0.25, 0.75]]), _two_clusters())
    assert all(isinstance(v, np.ndarray) for v in model.values())
    assert model["s"].shape == () and model["n"].shape == ()


def test_products_in_blocks_are_the_same_on_any_number_of_threads() -> None:
    """Mixing and eq. 9 split wide tensors into fixed column blocks: the same bits on 1 or 3
    threads (results do not depend on the machine's cores), and the plain product's values."""
    rng = np.random.default_rng(3)
    k, b = 5, 7
    wide = 2 * BLOCK_COLUMNS + 123  # three blocks, the last one partial
    stacked = {
        "w": rng.standard_normal((k, 4, wide // 4 + 1)).astype(np.float32),
        "b": rng.standard_normal((k, 3)).astype(np.float32),
        "n": np.arange(k, dtype=np.int64),
    }
    weights = rng.dirichlet(np.ones(k), size=b)
    deltas = {
        key: rng.standard_normal((b, *v.shape[1:])).astype(np.float32)
        for key, v in stacked.items()
        if key != "n"
    }
    one, three = mix_stacked(weights, stacked), mix_stacked(weights, stacked, workers=3)
    up1 = apply_stacked_deltas(stacked, deltas, weights)
    up3 = apply_stacked_deltas(stacked, deltas, weights, workers=3)
    for key in stacked:
        assert np.array_equal(one[key], three[key]) and one[key].dtype == stacked[key].dtype
        assert np.array_equal(up1[key], up3[key])
    plain = (weights.astype(np.float32) @ stacked["w"].reshape(k, -1)).reshape(one["w"].shape)
    np.testing.assert_allclose(one["w"], plain, rtol=1e-5, atol=1e-6)
    a, m = rng.standard_normal((2, 3)), rng.standard_normal((3, wide))
    add = rng.standard_normal((2, wide))
    np.testing.assert_allclose(blocked_matmul(a, m, add, workers=2), a @ m + add, rtol=1e-12)


# -- Ripple-Strat with more clusters than clients a round --------------------------------------
def _one_hot_clients(k: int, per_cluster: int, rng: np.random.Generator) -> np.ndarray:
    """Clients one-hot on their cluster, cluster c with mass decreasing in c (ties broken)."""
    w = np.repeat(np.eye(k), per_cluster, axis=0)
    return w * (1.0 - 1e-3 * np.arange(k))[None, :] * rng.uniform(0.99, 1.0, size=(len(w), 1))


def test_rotation_serves_every_cluster_within_ceil_k_over_s_consecutive_rounds():
    from ripple_flwr.aggregation.mixing import stratified_sample

    k, s = 40, 10
    w = _one_hot_clients(k, 3, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    served = [
        set(np.argmax(w[stratified_sample(w, s, rng, server_round=r)], axis=1))
        for r in range(1, 13)
    ]
    for start in range(len(served) - 3):  # any 4 = ceil(40 / 10) consecutive rounds
        assert set().union(*served[start : start + 4]) == set(range(k))


def test_the_mass_order_serves_the_same_heaviest_clusters_every_round():
    from ripple_flwr.aggregation.mixing import stratified_sample

    w = _one_hot_clients(40, 3, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    served = set()
    for r in range(1, 13):
        served |= set(np.argmax(w[stratified_sample(w, 10, rng, server_round=r, order="mass")], 1))
    assert served == set(range(10))  # the earlier rule, kept as a named option


@pytest.mark.parametrize("k", [3, 10])
def test_with_k_at_most_s_rotation_gives_the_mass_orders_sample(k):
    from ripple_flwr.aggregation.mixing import stratified_sample

    w = np.random.default_rng(k).dirichlet(np.full(k, 0.3), size=50)
    for r in (1, 2, 7):
        a = stratified_sample(w, 10, np.random.default_rng(5), server_round=r)
        b = stratified_sample(w, 10, np.random.default_rng(5), server_round=r, order="mass")
        np.testing.assert_array_equal(a, b)
