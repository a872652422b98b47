"""Embedding at a smaller size (embed_size): dimensions, the resize, bit-identity without it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ripple_flwr.router.synthetic import BankSettings, bank_key, cached_bank
from ripple_flwr.wst.embedder import SpectralEmbedder
from ripple_flwr.wst.shapes import (
    embed_shape,
    embedding_dim,
    resize_images,
    validate_scattering,
)


def _clients(count: int, n: int, shape: tuple[int, int, int], seed: int) -> np.ndarray:
    """``count`` clients of ``n`` smooth-ish images in [0, 1]: ``(count, n, C, H, W)``."""
    rng = np.random.default_rng(seed)
    c, h, w = shape
    coarse = rng.random((count * n, c, 8, 8), dtype=np.float32)
    fine = F.interpolate(torch.from_numpy(coarse), size=(h, w), mode="bilinear").numpy()
    noise = 0.1 * rng.random((count * n, c, h, w), dtype=np.float32)
    return np.clip(fine + noise, 0, 1).reshape(count, n, c, h, w).astype(np.float32)


def _by_hand(images: np.ndarray, side: int) -> np.ndarray:
    """The resize the embedder documents, written out: one interpolate call."""
    lead = images.shape[:-3]
    x = torch.from_numpy(np.ascontiguousarray(images).reshape(-1, *images.shape[-3:]))
    out = F.interpolate(x, size=(side, side), mode="bilinear", antialias=True, align_corners=False)
    return out.numpy().reshape(*lead, images.shape[-3], side, side)


@pytest.mark.parametrize("shape", [(3, 224, 224), (3, 64, 64)])
def test_embedding_dim_at_64_is_41664(shape):
    assert embedding_dim(shape, 3, 8, embed_size=64) == 41_664 == 3 * 217 * 8 * 8
    emb = SpectralEmbedder(shape, J=3, L=8, embed_size=64, device="cpu")
    assert emb.output_dim == 41_664
    assert emb.input_dim == int(np.prod(shape))  # clients still send images of their size
    assert emb.embed_shape == (3, 64, 64)
    assert emb.resizes == (shape != (3, 64, 64))
    assert embedding_dim((3, 224, 224), 3, 8) == 3 * 217 * 28 * 28  # no embed_size: own size
    assert embed_shape((1, 28, 28)) == (1, 28, 28) == embed_shape((1, 28, 28), 0)
    assert embed_shape((3, 96, 128), 32) == (3, 32, 32)


def test_large_images_embed_as_their_resize_by_hand():
    big = _clients(3, 12, (3, 224, 224), seed=1)
    small = _by_hand(big, 64)
    resizing = SpectralEmbedder((3, 224, 224), embed_size=64, device="cpu")
    plain = SpectralEmbedder((3, 64, 64), device="cpu")
    # The resize itself is the documented interpolate call, batched over all images.
    np.testing.assert_array_equal(
        resize_images(torch.from_numpy(big.reshape(-1, 3, 224, 224)), (64, 64)).numpy(),
        small.reshape(-1, 3, 64, 64),
    )
    rows_big = big.reshape(3, 12, -1)
    rows_small = small.reshape(3, 12, -1)
    # Without canonical ordering (the synthetic bank's path) the bits are the same.
    want = plain.embed_batch(rows_small)
    np.testing.assert_array_equal(resizing.embed_batch(rows_big), want)
    np.testing.assert_array_equal(resizing.embed_batch_tensor(rows_big).numpy(), want)
    proto = resizing.prototype(big[0])
    assert proto.shape == (3, 64, 64)
    np.testing.assert_array_equal(resizing.scatter(proto[None]), plain.scatter(proto[None]))
    # embed / embed_many order the rows of the large images (the order can differ from the
    # small images' order, so the sums may round differently): equal up to float rounding.
    one = resizing.embed(big[0])
    assert one.shape == (41_664,)
    many = resizing.embed_many(list(big))
    np.testing.assert_array_equal(many[0], one)
    scale = np.abs(want).max()
    for got, ref in zip(many, plain.embed_many(list(small)), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * scale)
    # A client's row order does not matter for the resizing embedder either.
    np.testing.assert_array_equal(resizing.embed(big[0][::-1]), one)


def test_no_resize_is_bit_identical_to_the_plain_embedder():
    clients = _clients(2, 10, (3, 32, 32), seed=2)
    plain = SpectralEmbedder((3, 32, 32), device="cpu")
    same = SpectralEmbedder((3, 32, 32), embed_size=32, device="cpu")
    none = SpectralEmbedder((3, 32, 32), embed_size=None, device="cpu")
    assert not same.resizes and same.embed_size is None and same.embed_shape == (3, 32, 32)
    want = plain.embed_many(list(clients))
    for emb in (same, none):
        np.testing.assert_array_equal(emb.embed_many(list(clients)), want)
        np.testing.assert_array_equal(emb.embed(clients[1]), want[1])
        np.testing.assert_array_equal(
            emb.embed_batch(clients.reshape(2, 10, -1)),
            plain.embed_batch(clients.reshape(2, 10, -1)),
        )
    # The embedder's own path: prototype then scattering, no interpolation on the way.
    rows = clients.reshape(2, 10, -1)
    x = torch.from_numpy(rows.copy())
    np.testing.assert_array_equal(same.scatter(same.prototypes(x)), plain.embed_batch(rows))
    # Upsampling is a resize like any other (antialiasing then has no effect).
    up = SpectralEmbedder((1, 16, 16), J=2, L=4, embed_size=32, device="cpu")
    grey = _clients(1, 6, (1, 16, 16), seed=3)[0]
    ref = SpectralEmbedder((1, 32, 32), J=2, L=4, device="cpu")
    np.testing.assert_array_equal(
        up.embed_batch(grey.reshape(1, 6, -1)),
        ref.embed_batch(_by_hand(grey, 32).reshape(1, 6, -1)),
    )


def test_j_is_checked_against_the_embed_size():
    validate_scattering((3, 224, 224), 5, 8)  # fine at 224x224
    with pytest.raises(ValueError, match=r"J=6 is too large for 64x64 images \(embed-size 64\)"):
        validate_scattering((3, 224, 224), 6, 8, embed_size=64)
    with pytest.raises(ValueError, match="J=6 is too large for 64x64 images.*J <= 5"):
        SpectralEmbedder((3, 224, 224), J=6, embed_size=64, device="cpu")
    with pytest.raises(ValueError, match="J=5 is too large for 28x28 images: .*J <= 4"):
        validate_scattering((1, 28, 28), 5, 8, embed_size=28)  # same message as without
    with pytest.raises(ValueError, match="embed_size must be a positive int"):
        SpectralEmbedder((3, 64, 64), embed_size=-1, device="cpu")


def test_clients_must_still_send_images_of_their_own_size():
    emb = SpectralEmbedder((3, 96, 96), embed_size=32, device="cpu")
    small = _clients(1, 4, (3, 32, 32), seed=4)[0]
    with pytest.raises(ValueError, match=r"expected images of shape \(n, 3, 96, 96\)"):
        emb.embed(small)
    with pytest.raises(ValueError, match="expected clients of shape"):
        emb.embed_batch(small.reshape(1, 4, -1))


def test_bank_key_follows_the_embed_size(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.random((40, 1, 32, 32), dtype=np.float32)
    comps = np.repeat(np.arange(4), 10)
    s = BankSettings(num_clients=6, client_size=6)
    plain = SpectralEmbedder((1, 32, 32), J=2, L=4, device="cpu")
    same = SpectralEmbedder((1, 32, 32), J=2, L=4, embed_size=32, device="cpu")
    at16 = SpectralEmbedder((1, 32, 32), J=2, L=4, embed_size=16, device="cpu")
    at8 = SpectralEmbedder((1, 32, 32), J=2, L=4, embed_size=8, device="cpu")
    keys = {
        name: bank_key(e, images, comps, 4, s)
        for name, e in [("plain", plain), ("same", same), ("16", at16), ("8", at8)]
    }
    assert keys["plain"] == keys["same"]  # no resize: the embeddings (and keys) are unchanged
    assert len({keys["plain"], keys["16"], keys["8"]}) == 3
    first, cached = cached_bank(at16, images, comps, 4, s, cache_dir=tmp_path)
    assert not cached and first.embeddings.shape == (6, at16.output_dim)
    other, cached = cached_bank(at8, images, comps, 4, s, cache_dir=tmp_path)
    assert not cached and other.embeddings.shape == (6, at8.output_dim)
    again, cached = cached_bank(at16, images, comps, 4, s, cache_dir=tmp_path)
    assert cached
    np.testing.assert_array_equal(again.embeddings, first.embeddings)
    # The server's bank embeds its synthetic clients as a real client's device does.
    rows = images.reshape(40, -1)
    client = rows[np.arange(6)].reshape(6, 1, 32, 32)
    np.testing.assert_allclose(
        at16.embed(client),
        SpectralEmbedder((1, 16, 16), J=2, L=4, device="cpu").embed(_by_hand(client, 16)),
        rtol=1e-4,
        atol=1e-6,
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_one_client_graph_resizes_like_the_eager_path():
    clients = _clients(3, 200, (3, 128, 128), seed=5)
    emb = SpectralEmbedder((3, 128, 128), embed_size=64, device="cuda")
    eager = SpectralEmbedder((3, 128, 128), embed_size=64, device="cuda")
    eager._graphs_failed = True
    cpu = SpectralEmbedder((3, 128, 128), embed_size=64, device="cpu")
    for c in list(clients) + [clients[0]]:
        got = emb.embed(c)
        want = eager.embed(c)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
    assert 200 in emb._graphs and not emb._graphs_failed
    ref = cpu.embed(clients[1])
    np.testing.assert_allclose(emb.embed(clients[1]), ref, rtol=1e-3, atol=1e-4 * np.abs(ref).max())
