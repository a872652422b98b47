"""Client embedding: spectral prototype + Wavelet Scattering Transform (spec section 2).

A client summarises its images by one *prototype* image (mean plus
variance-weighted principal directions, paper eq. 5) and sends the scattering
coefficients of that prototype (eq. 6). The same code embeds real clients on
their devices and synthetic clients on the server, so the two agree.

The prototype is computed from the n x n Gram matrix of the centred data
(never the D x D covariance), in float32, batched over clients. The
scattering filters are kymatio's, built once per :class:`SpectralEmbedder`;
the transform itself is kymatio's algorithm vectorised over paths
(:mod:`ripple_flwr.scattering`), on CUDA when available.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ripple_flwr.scattering import Scattering2D

# Eigenvalues below this fraction of the largest are treated as zero (rank).
_RANK_TOL = 1e-6


def scattering_channels(J: int, L: int) -> int:
    """Scattering maps per input channel for order 2: 1 + JL + L^2 J(J-1)/2."""
    return 1 + J * L + L * L * J * (J - 1) // 2


def embedding_dim(image_shape: tuple[int, int, int], J: int, L: int) -> int:
    """Length P of an embedding: C x 217 x (H/2^J) x (W/2^J) for J=3, L=8."""
    c, h, w = image_shape
    return c * scattering_channels(J, L) * (h // 2**J) * (w // 2**J)


def validate_scattering(image_shape: tuple[int, int, int], J: int, L: int) -> None:
    """Reject settings kymatio would mishandle, before any work starts."""
    if len(image_shape) != 3:
        raise ValueError(f"image_shape must be (C, H, W), got {image_shape}")
    c, h, w = image_shape
    if c < 1 or h < 1 or w < 1:
        raise ValueError(f"image_shape must be positive, got {image_shape}")
    if J < 1:
        raise ValueError(f"scattering J must be >= 1, got {J}")
    if L < 1:
        raise ValueError(f"scattering L must be >= 1, got {L}")
    if 2**J >= min(h, w):
        largest = int(np.floor(np.log2(min(h, w) - 1)))
        raise ValueError(
            f"scattering J={J} is too large for {h}x{w} images: kymatio needs 2**J < "
            f"min(H, W) = {min(h, w)}; use J <= {largest}"
        )


@dataclass(frozen=True)
class PrototypeSettings:
    """How many principal components enter the prototype.

    Either a fixed ``svd_rank`` M, or (when ``explained_variance`` is set) the
    smallest M whose explained variance reaches it. M is capped at n-1 and at
    the numerical rank of the client's data.
    """

    svd_rank: int = 20
    explained_variance: float | None = None

    def __post_init__(self) -> None:
        if self.explained_variance is not None:
            if not 0.0 < self.explained_variance <= 1.0:
                raise ValueError(
                    f"explained-variance must be in (0, 1] (the spec uses 0.90-0.99), "
                    f"got {self.explained_variance}"
                )
        elif self.svd_rank < 0:
            raise ValueError(f"svd-rank must be >= 0, got {self.svd_rank}")


def canonical_row_order(x: np.ndarray) -> np.ndarray:
    """Sort rows by their bytes, so the prototype is bit-identical for any row order."""
    x = np.ascontiguousarray(x)
    keys = x.view(np.dtype((np.void, x.dtype.itemsize * x.shape[1]))).ravel()
    return x[np.argsort(keys, kind="stable")]


def batch_prototypes(x: torch.Tensor, settings: PrototypeSettings) -> torch.Tensor:
    """Spectral prototypes of B clients at once: ``(B, n, D) -> (B, D)``.

    x_hat = mu + sum_{j<=M} lambda_j / (sum_{l<=M} lambda_l) v_j   (paper eq. 5)

    Eigenpairs come from the Gram matrix Xc Xc^T (n x n): with Xc = U S V^T,
    v_j = Xc^T u_j / s_j. Each v_j is flipped so that its entry of largest
    magnitude is positive (the sign convention the paper omits).
    """
    b, n, d = x.shape
    mu = x.mean(dim=1)
    xc = x - mu[:, None, :]
    gram = xc @ xc.transpose(1, 2)
    evals, evecs = torch.linalg.eigh(gram)  # ascending
    evals = evals.flip(-1).clamp_min(0.0)
    evecs = evecs.flip(-1)
    m_max = _max_components(settings, n)
    if m_max == 0:
        return mu
    top = evals[:, :m_max]
    keep = top > _RANK_TOL * evals[:, :1].clamp_min(torch.finfo(x.dtype).tiny)
    if settings.explained_variance is not None:
        total = evals.sum(dim=1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
        frac_before = (top.cumsum(dim=1) - top) / total
        keep &= frac_before < settings.explained_variance
    lam = torch.where(keep, top, torch.zeros_like(top))
    s = lam.sqrt()
    # v_j = Xc^T u_j / s_j  -> (B, D, M); zero where the component is not kept.
    v = (xc.transpose(1, 2) @ evecs[:, :, :m_max]) / torch.where(keep, s, 1.0)[:, None, :]
    v = v * keep[:, None, :]
    idx = v.abs().argmax(dim=1, keepdim=True)
    sign = torch.sign(torch.gather(v, 1, idx))
    v = v * torch.where(sign == 0, 1.0, sign)
    denom = lam.sum(dim=1, keepdim=True)
    coef = torch.where(denom > 0, lam / denom.clamp_min(torch.finfo(x.dtype).tiny), 0.0)
    return mu + (v @ coef[:, :, None])[:, :, 0]


def _max_components(settings: PrototypeSettings, n: int) -> int:
    if settings.explained_variance is not None:
        return n - 1
    return min(settings.svd_rank, n - 1)


class SpectralEmbedder:
    """Embeds clients: images ``(n, C, H, W)`` in [0, 1] -> embedding ``(P,)``.

    Build it once per process: the scattering filters are built on first use
    and reused for every later client.

    Parameters
    ----------
    image_shape : (C, H, W) of the images.
    J, L : scattering scales and orientations (spec defaults 3 and 8).
    prototype : number of principal components (fixed M or explained variance).
    device : ``"auto"`` (CUDA when available), ``"cpu"`` or ``"cuda"``.
    batch_size : images per scattering call (small batches stay in cache).
    """

    def __init__(
        self,
        image_shape: tuple[int, int, int],
        *,
        J: int = 3,
        L: int = 8,
        prototype: PrototypeSettings | None = None,
        device: str = "auto",
        batch_size: int = 64,
    ) -> None:
        image_shape = tuple(int(s) for s in image_shape)  # type: ignore[assignment]
        validate_scattering(image_shape, J, L)
        self.image_shape = image_shape
        self.J = J
        self.L = L
        self.prototype_settings = prototype or PrototypeSettings()
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError("device='cuda' requested but CUDA is not available; use 'auto'")
        self.device = torch.device(device)
        self.batch_size = batch_size
        self._op: Scattering2D | None = None

    @property
    def output_dim(self) -> int:
        return embedding_dim(self.image_shape, self.J, self.L)

    @property
    def input_dim(self) -> int:
        c, h, w = self.image_shape
        return c * h * w

    # -- validation -----------------------------------------------------------------
    def _check_client(self, images: np.ndarray, where: str = "client") -> np.ndarray:
        images = np.asarray(images)
        if images.ndim == 3 and self.image_shape[0] == 1:
            images = images[:, None]
        if images.ndim != 4 or tuple(images.shape[1:]) != self.image_shape:
            raise ValueError(
                f"{where}: expected images of shape (n, {', '.join(map(str, self.image_shape))}),"
                f" got {images.shape}"
            )
        if len(images) < 2:
            raise ValueError(
                f"{where}: a prototype needs at least 2 images, got {len(images)}; "
                "a client with fewer cannot be embedded"
            )
        if not np.issubdtype(images.dtype, np.floating):
            raise ValueError(
                f"{where}: images must be floats in [0, 1], got dtype {images.dtype}; "
                "divide uint8 pixels by 255"
            )
        if not np.all(np.isfinite(images)):
            raise ValueError(f"{where}: images contain NaN or Inf")
        return images.reshape(len(images), -1).astype(np.float32, copy=False)

    # -- prototypes -------------------------------------------------------------------
    def prototype(self, images: np.ndarray) -> np.ndarray:
        """The spectral prototype ``(C, H, W)`` of one client (row order canonicalised)."""
        x = canonical_row_order(self._check_client(images))
        proto = batch_prototypes(torch.from_numpy(x)[None].to(self.device), self.prototype_settings)
        return proto[0].cpu().numpy().reshape(self.image_shape)

    def prototypes(self, clients: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Prototypes of equal-size clients ``(B, n, D)`` -> ``(B, C, H, W)`` (on device)."""
        x = torch.as_tensor(clients, dtype=torch.float32, device=self.device)
        if x.ndim != 3 or x.shape[2] != self.input_dim or x.shape[1] < 2:
            raise ValueError(
                f"expected clients of shape (B, n>=2, {self.input_dim}), got {tuple(x.shape)}"
            )
        return batch_prototypes(x, self.prototype_settings).reshape(-1, *self.image_shape)

    # -- scattering -------------------------------------------------------------------
    def scatter(self, images: torch.Tensor | np.ndarray) -> np.ndarray:
        """Scattering embeddings of B images ``(B, C, H, W)`` -> ``(B, P)`` float32."""
        x = torch.as_tensor(images, dtype=torch.float32)
        b = x.shape[0]
        c, h, w = self.image_shape
        flat = x.reshape(b * c, h, w)
        op = self._scattering()
        parts = []
        with torch.no_grad():
            for start in range(0, flat.shape[0], self.batch_size):
                parts.append(op(flat[start : start + self.batch_size].to(self.device)).cpu())
        out = torch.cat(parts).numpy().reshape(b, -1)
        if not np.all(np.isfinite(out)):
            raise ValueError("scattering produced NaN or Inf; check the input images")
        return out

    def _scattering(self) -> Scattering2D:
        if self._op is None:
            self._op = Scattering2D(self.J, self.image_shape[1:], self.L).to(self.device)
        return self._op

    # -- embeddings -------------------------------------------------------------------
    def embed(self, images: np.ndarray) -> np.ndarray:
        """Embedding ``(P,)`` of one client; the same data gives the same bits."""
        proto = self.prototype(images)
        return self.scatter(proto[None])[0]

    def embed_many(self, clients: Sequence[np.ndarray] | np.ndarray) -> np.ndarray:
        """Embeddings ``(B, P)`` of several clients, batched by client size."""
        if isinstance(clients, np.ndarray) and clients.ndim == 5:
            clients = list(clients)
        if len(clients) == 0:
            return np.zeros((0, self.output_dim), dtype=np.float32)
        flats = [
            canonical_row_order(self._check_client(c, where=f"client {i}"))
            for i, c in enumerate(clients)
        ]
        protos = torch.empty((len(flats), *self.image_shape), dtype=torch.float32)
        by_size: dict[int, list[int]] = {}
        for i, f in enumerate(flats):
            by_size.setdefault(len(f), []).append(i)
        for idx in by_size.values():
            batch = torch.from_numpy(np.stack([flats[i] for i in idx]))
            protos[idx] = self.prototypes(batch).cpu()
        return self.scatter(protos)

    def embed_batch(self, clients: np.ndarray | torch.Tensor) -> np.ndarray:
        """Embeddings of equal-size clients ``(B, n, D)`` without canonical ordering.

        The fast path for synthetic clients, whose row order is already fixed
        by the seeded sampler.
        """
        return self.scatter(self.prototypes(clients))
