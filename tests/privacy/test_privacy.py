"""The Gaussian mechanism on the one-shot embedding: clipping, calibration, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from ripple_flwr.privacy.mechanism import (
    analytic_gaussian_delta,
    check_dp_params,
    classic_gaussian_sigma,
    clip_l2,
    gaussian_sigma,
    privatize_embedding,
)


def test_clip_shrinks_long_vectors_to_the_bound_and_keeps_short_ones():
    long = np.array([3.0, 4.0])  # norm 5
    short = np.array([0.3, 0.4])  # norm 0.5
    np.testing.assert_allclose(clip_l2(long, 1.0), [0.6, 0.8])
    np.testing.assert_allclose(clip_l2(short, 1.0), short)
    rows = clip_l2(np.stack([long, short]), 2.0)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), [2.0, 0.5])
    assert np.all(clip_l2(np.zeros(3), 1.0) == 0)


def test_analytic_sigma_meets_the_bound_tightly():
    for eps in (0.1, 1.0, 4.0, 16.0, 64.0):
        for delta in (1e-5, 1e-3):
            sigma = gaussian_sigma(eps, delta, 2.0)
            assert analytic_gaussian_delta(sigma, eps, 2.0) <= delta
            assert analytic_gaussian_delta(sigma * (1 - 1e-6), eps, 2.0) > delta


def test_analytic_delta_matches_the_direct_formula():
    # Balle and Wang, Theorem 8, evaluated naively where it does not overflow.
    sigma, eps, sens = 3.0, 1.5, 2.0
    direct = norm.cdf(sens / (2 * sigma) - eps * sigma / sens) - math.exp(eps) * norm.cdf(
        -sens / (2 * sigma) - eps * sigma / sens
    )
    assert analytic_gaussian_delta(sigma, eps, sens) == pytest.approx(direct, rel=1e-9)


def test_analytic_is_tighter_than_classic_where_classic_holds():
    for eps in (0.1, 0.5, 1.0):
        assert gaussian_sigma(eps, 1e-5, 2.0) < classic_gaussian_sigma(eps, 1e-5, 2.0)
    with pytest.raises(ValueError, match="epsilon <= 1"):
        classic_gaussian_sigma(4.0, 1e-5, 2.0)


def test_sigma_scales_with_sensitivity_and_falls_with_epsilon():
    s1 = gaussian_sigma(2.0, 1e-5, 1.0)
    assert gaussian_sigma(2.0, 1e-5, 3.0) == pytest.approx(3 * s1, rel=1e-9)
    sigmas = [gaussian_sigma(e, 1e-5, 1.0) for e in (0.5, 1, 4, 16)]
    assert sigmas == sorted(sigmas, reverse=True)


def test_noise_std_matches_the_calibration_empirically():
    rng = np.random.default_rng(0)
    clip, eps, delta = 1.0, 4.0, 1e-5
    # Inside the bound: the clip does nothing, the difference is pure noise.
    x = np.full(20_000, 0.1 / math.sqrt(20_000))
    noisy = privatize_embedding(x, eps, delta, clip, rng)
    expected = gaussian_sigma(eps, delta, 2 * clip)
    assert noisy.dtype == np.float32 and noisy.shape == x.shape
    assert np.std(noisy - x) == pytest.approx(expected, rel=0.02)
    assert abs(np.mean(noisy - x)) < 4 * expected / math.sqrt(len(x))


def test_long_embedding_is_clipped_before_the_noise():
    rng = np.random.default_rng(1)
    x = np.full(10_000, 5.0)  # norm 500
    clip = 2.0
    noisy = privatize_embedding(x, 16.0, 1e-5, clip, rng).astype(np.float64)
    clipped = clip_l2(x, clip)
    sigma = gaussian_sigma(16.0, 1e-5, 2 * clip)
    assert np.std(noisy - clipped) == pytest.approx(sigma, rel=0.03)
    assert abs(np.mean(noisy - clipped)) < 5 * sigma / 100


def test_scale_clips_and_noises_in_the_scaled_space():
    rng = np.random.default_rng(2)
    scale = np.array([1.0, 100.0] * 5_000)
    x = 0.001 * scale
    noisy = privatize_embedding(x, 4.0, 1e-5, 1.0, rng, scale=scale).astype(np.float64)
    sigma = gaussian_sigma(4.0, 1e-5, 2.0)
    u = (noisy - x) / scale
    assert np.std(u) == pytest.approx(sigma, rel=0.03)
    assert np.std((noisy - x)[1::2]) == pytest.approx(100 * sigma, rel=0.04)


def test_same_generator_state_gives_the_same_release():
    x = np.linspace(0, 1, 50)
    a = privatize_embedding(x, 1.0, 1e-5, 1.0, np.random.default_rng(7))
    b = privatize_embedding(x, 1.0, 1e-5, 1.0, np.random.default_rng(7))
    c = privatize_embedding(x, 1.0, 1e-5, 1.0, np.random.default_rng(8))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


@pytest.mark.parametrize("epsilon", [None, math.inf])
def test_no_privacy_returns_the_embedding_unchanged(epsilon):
    x = np.arange(6, dtype=np.float32) * 10
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    out = privatize_embedding(x, epsilon, 1e-5, 1.0, rng)
    assert np.array_equal(out, x) and out is not x
    assert rng.bit_generator.state == state  # no randomness spent
    assert gaussian_sigma(epsilon, 1e-5, 2.0) == 0.0


def test_huge_noise_stays_finite_in_float32():
    out = privatize_embedding(np.ones(10), 1e-3, 1e-12, 1e36, np.random.default_rng(0))
    assert out.dtype == np.float32 and np.all(np.isfinite(out))


@pytest.mark.parametrize(
    ("epsilon", "delta", "clip", "match"),
    [
        (0.0, 1e-5, 1.0, "embedding-dp-epsilon must be > 0"),
        (-1.0, 1e-5, 1.0, "embedding-dp-epsilon must be > 0"),
        (math.nan, 1e-5, 1.0, "embedding-dp-epsilon must be > 0"),
        ("1", 1e-5, 1.0, "embedding-dp-epsilon must be a number"),
        (1.0, 0.0, 1.0, "embedding-dp-delta must lie in"),
        (1.0, 1.0, 1.0, "embedding-dp-delta must lie in"),
        (1.0, -1e-5, 1.0, "embedding-dp-delta must lie in"),
        (1.0, 1e-5, 0.0, "embedding-dp-clip must be"),
        (1.0, 1e-5, math.inf, "embedding-dp-clip must be"),
        (1.0, 1e-5, -2.0, "embedding-dp-clip must be"),
    ],
)
def test_bad_settings_are_clear_errors(epsilon, delta, clip, match):
    with pytest.raises(ValueError, match=match):
        check_dp_params(epsilon, delta, clip)
    with pytest.raises(ValueError, match=match):
        privatize_embedding(np.ones(4), epsilon, delta, clip, np.random.default_rng(0))


def test_bad_embedding_and_scale_are_clear_errors():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="NaN or Inf"):
        privatize_embedding(np.array([1.0, np.nan]), 1.0, 1e-5, 1.0, rng)
    with pytest.raises(ValueError, match="shape"):
        privatize_embedding(np.ones((2, 2, 2)), 1.0, 1e-5, 1.0, rng)
    with pytest.raises(ValueError, match="scale must be"):
        privatize_embedding(np.ones(4), 1.0, 1e-5, 1.0, rng, scale=np.array([1.0, 0, 1, 1]))
    with pytest.raises(ValueError, match="scale must be"):
        privatize_embedding(np.ones(4), 1.0, 1e-5, 1.0, rng, scale=np.ones(3))


def test_center_and_basis_noise_only_the_projected_coordinates():
    rng = np.random.default_rng(3)
    p, r = 400, 5
    basis, _ = np.linalg.qr(np.random.default_rng(4).normal(size=(p, r)))
    center = np.full(p, 10.0)
    x = center + basis @ np.array([0.1, -0.2, 0.0, 0.05, 0.0])
    sigma = gaussian_sigma(4.0, 1e-5, 2.0)
    outs = np.stack(
        [
            privatize_embedding(x, 4.0, 1e-5, 1.0, rng, center=center, basis=basis)
            for _ in range(400)
        ]
    ).astype(np.float64)
    resid = outs - x
    # The noise lives in the basis' span: nothing is left outside it.
    outside = resid - (resid @ basis) @ basis.T
    assert np.abs(outside).max() < 1e-3
    assert np.std(resid @ basis) == pytest.approx(sigma, rel=0.05)
    # The clip applies to the projected coordinates, after centring.
    far = center + basis @ np.full(r, 100.0)
    many = np.stack(
        [
            privatize_embedding(far, 4.0, 1e-5, 1.0, rng, center=center, basis=basis)
            for _ in range(400)
        ]
    )
    mean_z = ((many - center) @ basis).mean(axis=0)
    np.testing.assert_allclose(mean_z, np.full(r, 1 / np.sqrt(r)), atol=4 * sigma / 20)


def test_bad_center_and_basis_are_clear_errors():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="center must be"):
        privatize_embedding(np.ones(4), 1.0, 1e-5, 1.0, rng, center=np.ones(3))
    with pytest.raises(ValueError, match="basis must be"):
        privatize_embedding(np.ones(4), 1.0, 1e-5, 1.0, rng, basis=np.ones((3, 2)))
    with pytest.raises(ValueError, match="orthonormal"):
        privatize_embedding(np.ones(4), 1.0, 1e-5, 1.0, rng, basis=np.ones((4, 2)))


def test_log_space_noises_what_the_model_reads():
    rng = np.random.default_rng(5)
    n = 20_000
    center, scale = np.full(n, 0.5), np.full(n, 0.2)
    small = np.random.default_rng(6).normal(size=n) * 1e-4  # inside the clip
    x = np.expm1(center + scale * small)
    out = privatize_embedding(
        x, 8.0, 1e-5, 1.0, rng, center=center, scale=scale, log_space=True
    ).astype(np.float64)
    # The model's view: (signed log1p - center) / scale; the noise there is N(0, sigma^2).
    view = lambda v: (np.sign(v) * np.log1p(np.abs(v)) - center) / scale  # noqa: E731
    sigma = gaussian_sigma(8.0, 1e-5, 2.0)
    assert np.std(view(out) - view(x)) == pytest.approx(sigma, rel=0.03)
    huge = privatize_embedding(np.ones(10), 1e-3, 1e-12, 1e36, rng, log_space=True)
    assert np.all(np.isfinite(huge))


def test_reference_projection_spans_the_predictive_directions():
    from ripple_flwr.privacy.mechanism import reference_projection

    rng = np.random.default_rng(7)
    n, p, k = 300, 40, 4
    latent = rng.dirichlet(np.ones(k), size=n)  # targets, rows sum to 1
    mixing = rng.normal(size=(k, p))
    x = latent @ mixing + 0.01 * rng.normal(size=(n, p)) + 3.0
    mean, basis, lift = reference_projection(x, latent, ridge=1e-3)
    assert basis.shape == (p, k - 1) and lift.shape == (p, k - 1)  # sums to 1: K-1 directions
    np.testing.assert_allclose(basis.T @ basis, np.eye(k - 1), atol=1e-10)
    np.testing.assert_allclose(basis.T @ lift, np.eye(k - 1), atol=1e-8)  # z survives the lift
    np.testing.assert_allclose(mean, x.mean(axis=0))
    z = (x - mean) @ basis
    by_lift = np.abs(mean + z @ lift.T - x).mean()
    by_projection = np.abs(mean + z @ basis.T - x).mean()
    assert by_lift < 0.2 * by_projection  # the conditional mean rebuilds correlated features
    out = privatize_embedding(
        x[:3], 16.0, 1e-5, 10.0, rng, center=mean, basis=basis, lift=lift
    ).astype(np.float64)
    assert out.shape == (3, p) and np.all(np.isfinite(out))
    with pytest.raises(ValueError, match="lift must be"):
        privatize_embedding(x[0], 1.0, 1e-5, 1.0, rng, basis=basis, lift=lift[:, :1])
    with pytest.raises(ValueError, match="give a basis with it"):
        privatize_embedding(x[0], 1.0, 1e-5, 1.0, rng, lift=lift)
    with pytest.raises(ValueError, match="same N"):
        reference_projection(x, latent[:10])
