"""Spectral prototype and scattering embedding: formulas on small cases, invariances, errors."""

import numpy as np
import pytest
import torch

from ripple_flwr.embedding import (
    PrototypeSettings,
    SpectralEmbedder,
    batch_prototypes,
    embedding_dim,
    scattering_channels,
)
from ripple_flwr.scattering import Scattering2D


def reference_prototype(x: np.ndarray, m: int) -> np.ndarray:
    """Paper eq. 5 straight from the D x D covariance, with svd_flip's sign convention."""
    mu = x.mean(axis=0)
    cov = np.cov(x, rowvar=False)
    lam, vec = np.linalg.eigh(cov)
    lam, vec = lam[::-1][:m], vec[:, ::-1][:, :m]
    signs = np.sign(vec[np.abs(vec).argmax(axis=0), np.arange(m)])
    vec = vec * signs
    return mu + vec @ (lam / lam.sum())


def test_prototype_equals_formula_on_tiny_matrix():
    rng = np.random.default_rng(0)
    x = rng.random((7, 5))
    got = batch_prototypes(torch.from_numpy(x)[None], PrototypeSettings(svd_rank=2))[0]
    np.testing.assert_allclose(got.numpy(), reference_prototype(x, 2), atol=1e-10)


def test_prototype_by_hand_one_component():
    # Points on a line along e1 around mean (1, 2): the only direction is +e1,
    # its weight is lambda_1 / lambda_1 = 1, so the prototype is mu + e1.
    x = np.array([[0.0, 2.0], [1.0, 2.0], [2.0, 2.0]])
    got = batch_prototypes(torch.from_numpy(x)[None], PrototypeSettings(svd_rank=5))[0]
    np.testing.assert_allclose(got.numpy(), [2.0, 2.0], atol=1e-12)


def test_explained_variance_picks_smallest_m():
    rng = np.random.default_rng(1)
    # Variances 9, 4, 1 along three axes: 9/14 = 0.64, 13/14 = 0.93.
    z = rng.standard_normal((4000, 3))
    z = (z - z.mean(0)) / z.std(0) * np.array([3.0, 2.0, 1.0])
    for rho, m in ((0.6, 1), (0.9, 2), (0.95, 3)):
        got = batch_prototypes(torch.from_numpy(z)[None], PrototypeSettings(explained_variance=rho))
        np.testing.assert_allclose(got[0].numpy(), reference_prototype(z, m), atol=1e-6)


def test_prototype_independent_of_eigenvector_signs():
    # numpy's eigh of the covariance and torch's eigh of the Gram matrix pick
    # signs independently; the convention must make both agree.
    rng = np.random.default_rng(2)
    for _ in range(5):
        x = rng.random((30, 12))
        got = batch_prototypes(torch.from_numpy(x)[None], PrototypeSettings(svd_rank=6))[0]
        np.testing.assert_allclose(got.numpy(), reference_prototype(x, 6), atol=1e-8)


def test_embedding_bit_identical_under_row_order():
    rng = np.random.default_rng(3)
    emb = SpectralEmbedder((1, 16, 16), J=2, L=4)
    x = rng.random((40, 1, 16, 16), dtype=np.float32)
    a = emb.embed(x)
    b = emb.embed(x[rng.permutation(40)])
    assert np.array_equal(a, b)


@pytest.mark.parametrize(
    ("shape", "p"), [((1, 28, 28), 1953), ((3, 32, 32), 10416), ((3, 64, 64), 41664)]
)
def test_embedding_dimension(shape, p):
    assert scattering_channels(3, 8) == 217
    assert embedding_dim(shape, 3, 8) == p
    if shape[1] <= 32:
        emb = SpectralEmbedder(shape)
        x = np.random.default_rng(0).random((10, *shape), dtype=np.float32)
        out = emb.embed(x)
        assert out.shape == (p,) and out.dtype == np.float32 and np.all(np.isfinite(out))


@pytest.mark.parametrize(("J", "shape"), [(3, (28, 28)), (3, (32, 32)), (2, (16, 16))])
def test_vectorised_scattering_matches_kymatio(J, shape):
    from kymatio.torch import Scattering2D as KymatioScattering2D

    x = torch.rand(4, *shape, generator=torch.Generator().manual_seed(0))
    ours = Scattering2D(J, shape, L=8)(x)
    ref = KymatioScattering2D(J=J, shape=shape, L=8, max_order=2)(x)
    assert ours.shape == ref.shape
    torch.testing.assert_close(ours, ref, atol=1e-6, rtol=1e-5)


def test_embed_many_matches_embed():
    rng = np.random.default_rng(4)
    emb = SpectralEmbedder((1, 28, 28))
    clients = [rng.random((n, 1, 28, 28), dtype=np.float32) for n in (20, 30, 20)]
    many = emb.embed_many(clients)
    single = np.stack([emb.embed(c) for c in clients])
    np.testing.assert_allclose(many, single, rtol=1e-5, atol=1e-6)


def test_errors_are_clear():
    emb = SpectralEmbedder((1, 28, 28))
    good = np.random.default_rng(0).random((5, 1, 28, 28), dtype=np.float32)
    with pytest.raises(ValueError, match="at least 2 images"):
        emb.embed(good[:1])
    with pytest.raises(ValueError, match="at least 2 images"):
        emb.embed(good[:0])
    with pytest.raises(ValueError, match="expected images of shape"):
        emb.embed(np.zeros((5, 3, 28, 28), dtype=np.float32))
    bad = good.copy()
    bad[2, 0, 3, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        emb.embed(bad)
    with pytest.raises(ValueError, match="divide uint8"):
        emb.embed((good * 255).astype(np.uint8))
    with pytest.raises(ValueError, match="J=5 is too large for 28x28.*J <= 4"):
        SpectralEmbedder((1, 28, 28), J=5)
    with pytest.raises(ValueError, match="explained-variance"):
        PrototypeSettings(explained_variance=1.5)


def test_constant_client_gives_mean_prototype():
    emb = SpectralEmbedder((1, 16, 16), J=2)
    x = np.full((10, 1, 16, 16), 0.25, dtype=np.float32)
    np.testing.assert_allclose(emb.prototype(x), 0.25, atol=1e-7)
