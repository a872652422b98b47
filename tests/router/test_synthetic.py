"""Synthetic clients: exact counts, targets = drawn proportions, determinism, disk cache."""

import numpy as np
import pytest

import ripple_flwr.router.synthetic as synthetic
from ripple_flwr.router.synthetic import (
    BankSettings,
    build_bank,
    cached_bank,
    draw_mixtures,
    sample_client_indices,
)
from ripple_flwr.wst.embedder import SpectralEmbedder


@pytest.fixture(scope="module")
def aux():
    rng = np.random.default_rng(0)
    comps = np.repeat(np.arange(4), 30)
    # Each component has its own brightness, so the mixture is visible in the data.
    images = rng.random((120, 1, 16, 16)) * 0.2 + comps[:, None, None, None] * 0.2
    return images.astype(np.float32), comps


def test_mixtures_in_simplex_and_log_uniform_is_sparser():
    rng = np.random.default_rng(0)
    y = draw_mixtures(4000, 10, BankSettings(alpha_dist="log-uniform"), rng)
    assert y.shape == (4000, 10)
    np.testing.assert_allclose(y.sum(1), 1.0)
    u = draw_mixtures(4000, 10, BankSettings(alpha_low=0.1, alpha_dist="uniform"), rng)
    # Near one-hot mixtures are far more common under the log-uniform alpha.
    assert (y.max(1) > 0.9).mean() > 2 * (u.max(1) > 0.9).mean()


def test_sample_indices_exact_counts_and_distinct(aux):
    _, comps = aux
    by = [np.flatnonzero(comps == k) for k in range(4)]
    counts = np.array([[10, 5, 5, 0], [0, 0, 0, 20], [20, 0, 0, 0]])
    idx = sample_client_indices(counts, by, np.random.default_rng(0))
    assert idx.shape == (3, 20)
    for row, c in zip(idx, counts, strict=True):
        np.testing.assert_array_equal(np.bincount(comps[row], minlength=4), c)
        assert len(np.unique(row)) == 20
    # More than the auxiliary set holds: every row once, the rest with replacement.
    idx = sample_client_indices(np.array([[40, 0, 0, 0]]), by, np.random.default_rng(0))
    assert set(idx[0]) == set(by[0]) and np.all(comps[idx[0]] == 0)


def test_bank_targets_are_drawn_proportions_and_deterministic(aux):
    images, comps = aux
    emb = SpectralEmbedder((1, 16, 16), J=2, L=4)
    s = BankSettings(num_clients=50, client_size=20, seed=3)
    a = build_bank(emb, images, comps, 4, s, keep_means=True, workers=1)
    b = build_bank(emb, images, comps, 4, s, keep_means=True, workers=2)
    assert a.embeddings.shape == (50, emb.output_dim)
    np.testing.assert_array_equal(a.embeddings, b.embeddings)
    np.testing.assert_array_equal(a.targets, b.targets)
    # Targets are multiples of 1/n_syn: exact counts, not a multinomial.
    np.testing.assert_allclose(a.targets * 20, np.round(a.targets * 20), atol=1e-5)
    # The mean image brightness follows the targets (component k has mean 0.1 + 0.2 k).
    expected = a.targets @ (0.1 + 0.2 * np.arange(4))
    np.testing.assert_allclose(a.means.mean(1), expected, atol=0.03)


def test_cache_reused_and_invalidated(aux, tmp_path, monkeypatch):
    images, comps = aux
    emb = SpectralEmbedder((1, 16, 16), J=2, L=4)
    s = BankSettings(num_clients=20, client_size=10)
    first, cached = cached_bank(emb, images, comps, 4, s, cache_dir=tmp_path)
    assert not cached and len(list(tmp_path.glob("bank-*.npz"))) == 1

    def fail(*a, **k):
        raise AssertionError("the bank was rebuilt although it is cached")

    monkeypatch.setattr(synthetic, "build_bank", fail)
    again, cached = cached_bank(emb, images, comps, 4, s, cache_dir=tmp_path)
    assert cached
    np.testing.assert_array_equal(first.embeddings, again.embeddings)
    monkeypatch.undo()
    for changed in (
        dict(settings=BankSettings(num_clients=20, client_size=12)),
        dict(settings=s, embedder=SpectralEmbedder((1, 16, 16), J=2, L=6)),
        dict(settings=s, images=images * 0.5),
    ):
        _, cached = cached_bank(
            changed.get("embedder", emb),
            changed.get("images", images),
            comps,
            4,
            changed["settings"],
            cache_dir=tmp_path,
        )
        assert not cached
    assert len(list(tmp_path.glob("bank-*.npz"))) == 4


def test_bad_settings_rejected():
    with pytest.raises(ValueError, match="n_syn"):
        BankSettings(client_size=1)
    with pytest.raises(ValueError, match="alpha"):
        BankSettings(alpha_low=0)
    with pytest.raises(ValueError, match="log-uniform"):
        BankSettings(alpha_dist="beta")
