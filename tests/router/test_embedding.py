"""Spectral prototype and scattering embedding: formulas on small cases, invariances, errors."""

import numpy as np
import pytest
import torch

from ripple_flwr.wst.embedder import SpectralEmbedder
from ripple_flwr.wst.prototype import PrototypeSettings, batch_prototypes
from ripple_flwr.wst.scattering import Scattering2D
from ripple_flwr.wst.shapes import embedding_dim, scattering_channels
from ripple_flwr.wst.subspace import top_eigenpairs


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
    z = rng.standard_normal((400, 3))  # a 400 x 400 Gram (4000 took 80 s of CI)
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


@pytest.mark.parametrize(
    ("J", "shape"), [(3, (28, 28)), (3, (32, 32)), (2, (16, 16)), (4, (32, 32)), (1, (8, 12))]
)
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


def test_embed_many_keeps_client_order_across_sizes_and_worker_batches():
    # 40 clients of two sizes: several batches of 16 on worker threads on a CPU.
    images = _mnist_clients(40, n=120, seed=8).reshape(40, 120, 1, 28, 28)
    clients = [c[: 100 + 20 * (i % 2)] for i, c in enumerate(images)]
    emb = SpectralEmbedder((1, 28, 28), device="cpu")
    many = emb.embed_many(clients)
    single = np.stack([emb.embed(c) for c in clients])
    np.testing.assert_allclose(many, single, rtol=1e-5, atol=1e-6 * np.abs(single).max())
    assert not np.allclose(many[0], many[2])  # distinct clients, not one repeated row


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
    for values in ([np.inf], [-np.inf], [np.inf, -np.inf]):
        bad = good.copy()
        bad[1, 0, 5, : len(values)] = values
        with pytest.raises(ValueError, match="NaN or Inf"):
            emb.embed(bad)
    # Finite entries whose sum overflows float32 are not mistaken for infinities.
    SpectralEmbedder._check_finite(np.full((4, 8), 3e38, dtype=np.float32))
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


# -- the fast top-M eigen-solver and the batched paths ------------------------------------
def _mnist_clients(b: int, n: int = 200, seed: int = 0) -> np.ndarray:
    from ripple_flwr.data import load_dataset

    images = load_dataset("mnist-5k").images
    rng = np.random.default_rng(seed)
    return images[rng.integers(0, len(images), (b, n))].reshape(b, n, -1)


def _count_full_eigh(monkeypatch) -> list[int]:
    """Sizes of the matrices handed to torch.linalg.eigh (the Ritz step's are 32 x 32)."""
    sizes: list[int] = []
    real = torch.linalg.eigh

    def spy(a, *args, **kwargs):
        sizes.append(a.shape[-1])
        return real(a, *args, **kwargs)

    monkeypatch.setattr(torch.linalg, "eigh", spy)
    return sizes


def test_top_eigenpairs_match_float64_decomposition_without_full_eigh(monkeypatch):
    x = torch.from_numpy(_mnist_clients(16))
    xc = x - x.mean(dim=1, keepdim=True)
    gram = xc @ xc.transpose(1, 2)
    sizes = _count_full_eigh(monkeypatch)
    lam, u = top_eigenpairs(gram, 20)
    assert all(s < 200 for s in sizes), "the subspace path must not decompose 200 x 200"
    ref_lam, ref_u = np.linalg.eigh(gram.double().numpy())
    ref_lam, ref_u = ref_lam[:, ::-1][:, :20], ref_u[:, :, ::-1][:, :, :20]
    np.testing.assert_allclose(lam.numpy(), ref_lam, rtol=2e-5)
    # Eigenvectors up to sign: |<u, u_ref>| = 1.
    dots = np.abs(np.einsum("bnm,bnm->bm", u.double().numpy(), ref_u))
    np.testing.assert_allclose(dots, 1.0, atol=1e-4)


def test_flat_spectrum_falls_back_to_the_exact_decomposition(monkeypatch):
    # Uniform noise: lambda_33 / lambda_20 ~ 0.93, subspace iteration cannot converge in
    # its fixed steps, so the residual check must hand those clients to eigh.
    rng = np.random.default_rng(5)
    x = torch.from_numpy(rng.random((4, 200, 300), dtype=np.float32))
    xc = x - x.mean(dim=1, keepdim=True)
    gram = xc @ xc.transpose(1, 2)
    sizes = _count_full_eigh(monkeypatch)
    lam, u = top_eigenpairs(gram, 20)
    assert 200 in sizes
    ref_lam = np.linalg.eigvalsh(gram.double().numpy())[:, ::-1][:, :20]
    np.testing.assert_allclose(lam.numpy(), ref_lam, rtol=1e-5)
    resid = torch.linalg.vector_norm(gram @ u - u * lam[:, None, :], dim=1)
    assert float((resid / lam[:, :1]).max()) < 1e-5


def test_fast_prototype_matches_covariance_formula_on_real_and_rank_deficient_clients():
    clients = _mnist_clients(6).astype(np.float64)
    # Two rank-deficient clients: 200 rows drawn from 10 and from 25 distinct images.
    rng = np.random.default_rng(1)
    clients[4] = clients[4][rng.integers(0, 10, 200)]
    clients[5] = clients[5][rng.integers(0, 25, 200)]
    got = batch_prototypes(torch.from_numpy(clients).float(), PrototypeSettings(svd_rank=20))
    for c, proto in zip(clients, got.numpy(), strict=True):
        ref = reference_prototype(c, min(20, np.linalg.matrix_rank(c - c.mean(0))))
        np.testing.assert_allclose(proto, ref, atol=2e-5 * np.abs(ref).max())


# BLAS blocking depends on the CPU and the batch shape: across batch sizes the embedding is the
# same to float32 rounding (one AMD EPYC: 254 of 46,872 entries differ, at most 2.2e-6
# relative), and bit-identical only for the same call on the same machine.
BATCH_RTOL, BATCH_ATOL = 2e-5, 1e-6


def test_embedding_does_not_depend_on_batch_size_or_scattering_chunk():
    clients = _mnist_clients(24, seed=3)
    emb = SpectralEmbedder((1, 28, 28), device="cpu")
    whole = emb.embed_batch(clients)
    chunked = np.concatenate([emb.embed_batch(clients[i : i + 8]) for i in range(0, 24, 8)])
    small = SpectralEmbedder((1, 28, 28), device="cpu", batch_size=3).embed_batch(clients)
    np.testing.assert_allclose(chunked, whole, rtol=BATCH_RTOL, atol=BATCH_ATOL)
    np.testing.assert_allclose(small, whole, rtol=BATCH_RTOL, atol=BATCH_ATOL)
    assert np.array_equal(whole, emb.embed_batch(clients))  # the same call: the same bits


def test_colour_embedding_does_not_depend_on_batch_or_chunk():
    # Three channels: every scattering call mixes images of several clients.
    clients = np.random.default_rng(6).random((7, 40, 3 * 16 * 16), dtype=np.float32)
    emb = SpectralEmbedder((3, 16, 16), J=3, device="cpu")
    whole = emb.embed_batch(clients)
    one_by_one = np.concatenate([emb.embed_batch(clients[i : i + 1]) for i in range(7)])
    odd_chunks = SpectralEmbedder((3, 16, 16), J=3, device="cpu", batch_size=5).embed_batch(clients)
    np.testing.assert_allclose(one_by_one, whole, rtol=BATCH_RTOL, atol=BATCH_ATOL)
    np.testing.assert_allclose(odd_chunks, whole, rtol=BATCH_RTOL, atol=BATCH_ATOL)
    assert np.array_equal(whole, emb.embed_batch(clients))


def test_overwrite_centres_the_callers_copy_in_place_with_the_same_bits():
    clients = _mnist_clients(4, seed=5)
    emb = SpectralEmbedder((1, 28, 28), device="cpu")
    kept = clients.copy()
    expected = emb.embed_batch(clients)
    assert np.array_equal(clients, kept)  # the default leaves the caller's array alone
    got = emb.embed_batch(clients, overwrite=True)
    assert np.array_equal(got, expected)
    # The caller's array now holds each client's centred rows.
    np.testing.assert_allclose(clients, kept - kept.mean(axis=1, keepdims=True), atol=1e-6)
    # embed() centres its own ordered copy: the caller's images are untouched.
    one = kept[0].reshape(-1, 1, 28, 28)
    before = one.copy()
    assert np.array_equal(emb.embed(one), emb.embed(before[::-1]))
    assert np.array_equal(one, before)


def test_one_client_graph_needs_cuda_and_cpu_embed_never_builds_one():
    from ripple_flwr.wst.one_client_graph import OneClientGraph

    emb = SpectralEmbedder((1, 28, 28), device="cpu")
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA embedder"):
        OneClientGraph(emb, 200)
    clients = _mnist_clients(2, seed=5)
    for c in (clients[0], clients[0], clients[1]):
        emb.embed(c.reshape(-1, 1, 28, 28))
    assert emb._graph_for(200) is None and not emb._graphs


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_one_client_graph_replays_the_eager_gpu_path():
    clients = [c.reshape(-1, 1, 28, 28) for c in _mnist_clients(3, seed=6)]
    emb = SpectralEmbedder((1, 28, 28), device="cuda")
    eager = SpectralEmbedder((1, 28, 28), device="cuda")
    eager._graphs_failed = True
    first = emb.embed(clients[0])  # a new size runs eagerly
    assert not emb._graphs
    for c in clients:
        got = emb.embed(c)
        want = eager.embed(c)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())
    assert 200 in emb._graphs and not emb._graphs_failed
    assert np.array_equal(emb.embed(clients[0]), emb.embed(clients[0]))  # replay to replay
    np.testing.assert_allclose(emb.embed(clients[0]), first, rtol=1e-5, atol=1e-5)
    broken = clients[1].copy()
    broken[7, 0, 3, 3] = np.nan  # skips the host check before a replay, refused after it
    with pytest.raises(ValueError, match="NaN or Inf"):
        emb.embed(broken)
