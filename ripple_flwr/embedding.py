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

import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from scipy.linalg.blas import ssyrk
from threadpoolctl import ThreadpoolController

from ripple_flwr.scattering import Scattering2D

if TYPE_CHECKING:
    from ripple_flwr.one_client_graph import OneClientGraph

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


def canonical_order(x: np.ndarray) -> np.ndarray:
    """Row indices of ``x`` (contiguous, 2-D) sorted by the rows' bytes."""
    keys = x.view(np.dtype((np.void, x.dtype.itemsize * x.shape[1]))).ravel()
    return np.argsort(keys, kind="stable")


def canonical_row_order(x: np.ndarray) -> np.ndarray:
    """Sort rows by their bytes, so the prototype is bit-identical for any row order."""
    x = np.ascontiguousarray(x)
    return x[canonical_order(x)]


# Top-M eigenpairs by block subspace iteration when the client has at least this many
# rows per block column; smaller Gram matrices go to a full eigen-decomposition.
_MIN_ROWS_PER_BLOCK = 2
# (block size, steps) of the subspace iteration. Each step is a product with G^2
# followed by an orthonormalisation; the error of the M-th eigenvector shrinks by
# (lambda_{b+1}/lambda_M)^2 per step. Measured on 256 mnist-5k and 256 3x32x32
# clients (M=20), the largest Ritz residual is 1.4e-6 of lambda_1 with (48, 5) and
# 1.9e-6 with (32, 10), the full decomposition's own float32 level. The larger block
# needs fewer orthonormalisations, which are latency rather than work for one client
# (1.11 vs 1.25 ms on a CPU core; half the kernels of a CUDA graph), and is used
# wherever the b x b Rayleigh-Ritz solve runs on a CPU (LAPACK takes any size). A
# batch on a GPU keeps 32: cuSOLVER's batched Jacobi solver, one call for the whole
# batch, takes matrices up to 32 x 32. Squaring G once (one n^3 product) halves the
# steps; G^4 would lose the M-th direction to float32 rounding
# ((lambda_1/lambda_M)^4 ~ 1e4-1e6).
HOST_SOLVE_PLAN = (48, 5)
BATCHED_GPU_PLAN = (32, 10)


# A Ritz pair whose residual ||G u - theta u|| exceeds this fraction of the largest
# eigenvalue is not trusted: its client is recomputed with the full decomposition.
_RESIDUAL_TOL = 1e-5
# Batches of at most this many clients on a GPU solve their (tiny) eigenproblems on the
# host when run eagerly: ~100 small solver launches cost the same for 1 client as for 1,000.
_HOST_EIGEN_MAX_CLIENTS = 4


def subspace_plan(device: torch.device) -> tuple[int, int]:
    """(block size, steps) for Gram matrices on ``device`` solved there."""
    return HOST_SOLVE_PLAN if device.type == "cpu" else BATCHED_GPU_PLAN


def _start_block(n: int, k: int, like: torch.Tensor) -> torch.Tensor:
    """A fixed pseudo-random ``(n, k)`` start, the same for every client and batch."""
    return _start_block_cached(n, k, like.device, like.dtype)


@functools.lru_cache(maxsize=16)
def _start_block_cached(n: int, k: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    gen = torch.Generator().manual_seed(n * 7919 + k)
    return torch.randn(n, k, generator=gen, dtype=torch.float64).to(device, dtype)


def _orthonormalise(y: torch.Tensor, precise: bool) -> torch.Tensor:
    """A basis of the columns of ``y`` ``(B, n, k)`` (orthonormal to about eps * cond(y)).

    Shifted Cholesky QR: the k x k Gram matrix of ``y`` (formed in float64
    when ``precise``, else in ``y``'s precision), factored in float64 with a
    shift of 1e-12 of its trace (keeps rank-deficient clients finite), and
    ``y`` solved against the factor in its own precision. Between steps
    cond(y) is about (lambda_1 / lambda_b)^2: the float32 solve then loses
    orthogonality, not the subspace, which is all the next step needs;
    applied twice to a basis it is orthonormal to rounding. No host sync.
    """
    c = y.double().transpose(1, 2) @ y.double() if precise else (y.transpose(1, 2) @ y).double()
    diag = c.diagonal(dim1=1, dim2=2)
    diag.add_(1e-12 * diag.sum(-1, keepdim=True) + torch.finfo(torch.float64).tiny)
    chol, _ = torch.linalg.cholesky_ex(c)
    return torch.linalg.solve_triangular(
        chol.transpose(1, 2).to(y.dtype), y, upper=True, left=False
    )


def uses_subspace_iteration(n: int, m: int, plan: tuple[int, int]) -> bool:
    """Whether the top ``m`` eigenpairs of ``n x n`` Gram matrices come from subspace iteration."""
    block, _ = plan
    return m + 8 <= block and n >= _MIN_ROWS_PER_BLOCK * block


def ritz_basis(
    gram: torch.Tensor, plan: tuple[int, int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Subspace iteration for ``(B, n, n)`` Gram matrices, on their device without a host sync.

    ``plan`` is (block size, steps), by default :func:`subspace_plan` of the
    device. Returns the orthonormal basis Q ``(B, n, b)`` of the block and the
    Rayleigh quotient H = Q^T G Q ``(B, b, b)`` in float64, symmetrised:
    its eigenpairs, mapped back by :func:`ritz_pairs`, are G's top ones.
    """
    n = gram.shape[1]
    block, steps = plan or subspace_plan(gram.device)
    # A float32 Gram matrix of G^2 Q is indefinite for some clients (its Cholesky factor
    # NaN on a GPU): 54 of 512 synthetic mnist-5k clients at the first step from the
    # random start, none later. The first step forms it in float64, and every step
    # does on a GPU, where float64 costs little.
    precise = gram.device.type != "cpu"
    gram2 = gram @ gram
    q = _orthonormalise(gram2 @ _start_block(n, block, gram), precise=True)
    for _ in range(steps - 1):
        q = _orthonormalise(gram2 @ q, precise)
    q = _orthonormalise(q, precise)
    h = q.double().transpose(1, 2) @ (gram @ q).double()
    h = 0.5 * (h + h.transpose(1, 2))
    # A client whose iteration broke down (non-finite H) gets the identity here, so the
    # batch's eigen-solve still runs (a GPU's batched solver fails the whole batch on
    # one bad matrix); ritz_pairs flags it for the exact decomposition.
    finite = torch.isfinite(h).all(dim=2).all(dim=1)
    eye = torch.eye(h.shape[-1], dtype=h.dtype, device=h.device)
    return q, torch.where(finite[:, None, None], h, eye)


def ritz_pairs(
    gram: torch.Tensor, q: torch.Tensor, theta: torch.Tensor, w: torch.Tensor, m: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The top ``m`` Ritz pairs from H's ascending eigenpairs ``theta``, ``w``; no host sync.

    Returns eigenvalues ``(B, m)``, eigenvectors ``(B, n, m)`` in G's dtype,
    and ``(B,)`` flags of clients whose residuals ||G u - theta u|| are not
    at float32 level for a kept component (their pairs must not be used).
    """
    theta, w = theta.flip(-1)[:, :m], w.flip(-1)[:, :, :m]
    u = (q.double() @ w).to(gram.dtype)
    lam = theta.to(gram.dtype)
    resid = torch.linalg.vector_norm(gram @ u - u * lam[:, None, :], dim=1)
    top = lam[:, :1].abs().clamp_min(torch.finfo(gram.dtype).tiny)
    kept = lam > _RANK_TOL * top
    # NaN residuals compare False: a broken client is caught by its non-finite basis.
    broken = ~torch.isfinite(u).all(dim=2).all(dim=1)
    return lam, u, ((resid > _RESIDUAL_TOL * top) & kept).any(dim=1) | broken


def top_eigenpairs(gram: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The m largest eigenpairs of symmetric PSD matrices ``(B, n, n)``, descending.

    Returns ``(B, m)`` eigenvalues and ``(B, n, m)`` eigenvectors. When a
    block of 32-48 vectors is much smaller than n, block subspace iteration
    with a final Rayleigh-Ritz step finds them with a few batched matrix
    products and one block x block eigen-solve per client, instead of a full n x n
    decomposition (which on a GPU is a sequential solver per matrix and on
    a CPU mostly the tridiagonalisation of eigenvectors nobody uses).
    Clients whose Ritz residuals are not at float32 level, and problems too
    small for the block, use ``torch.linalg.eigh``: the result is the exact
    decomposition's up to float rounding either way. On a GPU, batches of a
    few clients are solved on the host (latency, not work, is their cost).
    """
    b, n, _ = gram.shape
    if gram.device.type != "cpu" and b <= _HOST_EIGEN_MAX_CLIENTS:
        # A few clients are pure latency on a GPU (~40 small solver launches, ~8 ms
        # whatever the batch); the host does them in about a millisecond.
        # One host thread: OpenMP across a GPU machine's cores costs more than the work.
        with one_cpu_thread(torch.device("cpu")):
            lam, u = top_eigenpairs(gram.cpu(), m)
        return lam.to(gram.device), u.to(gram.device)
    if not uses_subspace_iteration(n, m, subspace_plan(gram.device)) or b == 0:
        evals, evecs = torch.linalg.eigh(gram)
        return evals.flip(-1)[:, :m], evecs.flip(-1)[:, :, :m]
    q, h = ritz_basis(gram)
    theta, w = torch.linalg.eigh(h)
    lam, u, bad = ritz_pairs(gram, q, theta, w, m)
    if bool(bad.any()):  # one host sync per batch, not per client
        idx = bad.nonzero()[:, 0]
        evals, evecs = torch.linalg.eigh(gram[idx])
        lam = lam.index_copy(0, idx, evals.flip(-1)[:, :m])
        u = u.index_copy(0, idx, evecs.flip(-1)[:, :, :m])
    return lam, u


def batch_prototypes(x: torch.Tensor, settings: PrototypeSettings) -> torch.Tensor:
    """Spectral prototypes of B clients at once: ``(B, n, D) -> (B, D)``.

    x_hat = mu + sum_{j<=M} lambda_j / (sum_{l<=M} lambda_l) v_j   (paper eq. 5)

    Eigenpairs come from the Gram matrix Xc Xc^T (n x n): with Xc = U S V^T,
    v_j = Xc^T u_j / s_j. Each v_j is flipped so that its entry of largest
    magnitude is positive (the sign convention the paper omits). A fixed M
    needs only the top M eigenpairs (:func:`top_eigenpairs`); an explained
    variance threshold needs the whole spectrum.
    """
    n = x.shape[1]
    mu, xc, gram = centre(x)
    m_max = _max_components(settings, n)
    if m_max == 0:
        return mu
    if settings.explained_variance is None:
        top, vecs = top_eigenpairs(gram, m_max)
        return prototype_from_pairs(mu, xc, top, vecs)
    evals, evecs = torch.linalg.eigh(gram)  # ascending
    evals = evals.flip(-1).clamp_min(0.0)
    top, vecs = evals[:, :m_max], evecs.flip(-1)[:, :, :m_max]
    total = evals.sum(dim=1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
    explained_before = (top.cumsum(dim=1) - top) / total < settings.explained_variance
    return prototype_from_pairs(mu, xc, top, vecs, explained_before)


def centre(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Client means ``(B, D)``, centred data ``(B, n, D)`` and Gram matrices ``(B, n, n)``."""
    mu = x.mean(dim=1)
    xc = x - mu[:, None, :]
    return mu, xc, centred_gram(xc)


def prototype_from_pairs(
    mu: torch.Tensor,
    xc: torch.Tensor,
    top: torch.Tensor,
    vecs: torch.Tensor,
    also_keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """Eq. 5 from the top eigenpairs ``(B, M)``, ``(B, n, M)`` of each client's Gram matrix.

    Components below the rank tolerance (and outside ``also_keep``) get
    weight 0. No host sync, so it can be captured in a CUDA graph.
    """
    top = top.clamp_min(0.0)
    keep = top > _RANK_TOL * top[:, :1].clamp_min(torch.finfo(xc.dtype).tiny)
    if also_keep is not None:
        keep &= also_keep
    lam = torch.where(keep, top, torch.zeros_like(top))
    denom = lam.sum(dim=1, keepdim=True)
    coef = torch.where(denom > 0, lam / denom.clamp_min(torch.finfo(xc.dtype).tiny), 0.0)
    # s_j v_j = Xc^T u_j, as rows (B, M, D) so the sign search runs along memory.
    # Only the direction and sign of v_j are needed: 1/s_j and the sign join the
    # coefficient, and a component that is not kept has coefficient 0.
    sv = vecs.transpose(1, 2) @ xc
    idx = sv.abs().argmax(dim=2, keepdim=True)
    sign = torch.sign(torch.gather(sv, 2, idx))[:, :, 0]
    scale = torch.where(sign == 0, 1.0, sign) / torch.where(keep, lam.sqrt(), 1.0)
    return mu + ((coef * scale)[:, None, :] @ sv)[:, 0]


def centred_gram(xc: torch.Tensor) -> torch.Tensor:
    """Gram matrices ``Xc Xc^T`` of centred clients ``(B, n, D) -> (B, n, n)``, exactly symmetric.

    On a CPU each client's is one BLAS ``ssyrk`` (only the upper triangle:
    half the work of a general product; 1.2 ms instead of 1.8 ms for 200
    3x32x32 images on one thread), mirrored; one product per client, so its
    bits do not depend on the batch. Elsewhere one batched product.
    """
    if xc.device.type != "cpu" or xc.dtype != torch.float32:
        return xc @ xc.transpose(1, 2)
    b, n, _ = xc.shape
    upper = torch.empty((b, n, n), dtype=xc.dtype)
    with one_cpu_thread("cpu"):  # BLAS threads would fight torch's spinning OpenMP ones
        for i, client in enumerate(xc.detach().numpy()):
            # client.T is the same memory seen as a Fortran (D, n) matrix: A^T A, no copy.
            upper[i] = torch.from_numpy(ssyrk(1.0, client.T, trans=1))
    return torch.where(_upper_mask(n), upper, upper.transpose(1, 2))


@functools.lru_cache(maxsize=4)
def _upper_mask(n: int) -> torch.Tensor:
    return torch.ones((n, n), dtype=torch.bool).triu()


def _max_components(settings: PrototypeSettings, n: int) -> int:
    if settings.explained_variance is not None:
        return n - 1
    return min(settings.svd_rank, n - 1)


_THREADS_LOCK = threading.Lock()
# [torch threads before the first holder, holders, the BLAS limiter to undo]
_THREADS_SAVED: list = []


@functools.lru_cache(maxsize=1)
def _blas_pools() -> ThreadpoolController:
    """The BLAS thread pools loaded in this process (numpy's, scipy's), found once."""
    return ThreadpoolController()


@contextmanager
def one_cpu_thread(device: torch.device | str = "cpu") -> Iterator[None]:
    """One torch thread and one BLAS thread while inside (CPU only).

    Small embedding work is latency: OpenMP barriers between threads cost
    more than they save, and worker threads that each start their own BLAS
    threads oversubscribe the cores. Holders nest and may be concurrent; the
    last to leave restores the previous settings.
    """
    if torch.device(device).type != "cpu":
        yield
        return
    with _THREADS_LOCK:
        if not _THREADS_SAVED:
            limiter = _blas_pools().limit(limits=1, user_api="blas")
            _THREADS_SAVED[:] = [torch.get_num_threads(), 0, limiter]
            torch.set_num_threads(1)
        _THREADS_SAVED[1] += 1
    try:
        yield
    finally:
        with _THREADS_LOCK:
            _THREADS_SAVED[1] -= 1
            if _THREADS_SAVED[1] == 0:
                torch.set_num_threads(_THREADS_SAVED[0])
                _THREADS_SAVED[2].restore_original_limits()
                _THREADS_SAVED.clear()


log = logging.getLogger(__name__)
# Client sizes whose CUDA graphs one embedder keeps (each holds a few MB of device memory).
_MAX_GRAPHS = 4
# Images per scattering call (see SpectralEmbedder's batch_size).
_CPU_SCATTER_BATCH = 16
_GPU_SCATTER_BATCH = 4096


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
    batch_size : images per scattering call; ``None`` sizes it for the device
        (16 on a CPU, where small batches stay in cache; 4,096 on a GPU, where
        small ones leave it idle between launches).
    """

    def __init__(
        self,
        image_shape: tuple[int, int, int],
        *,
        J: int = 3,
        L: int = 8,
        prototype: PrototypeSettings | None = None,
        device: str = "auto",
        batch_size: int | None = None,
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
        if batch_size is None:
            batch_size = _GPU_SCATTER_BATCH if self.device.type == "cuda" else _CPU_SCATTER_BATCH
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        self._op: Scattering2D | None = None
        # Client sizes seen by embed() and the CUDA graphs built for repeated ones.
        self._sizes_seen: set[int] = set()
        self._graphs: OrderedDict[int, OneClientGraph] = OrderedDict()
        self._graphs_failed = False

    @property
    def output_dim(self) -> int:
        return embedding_dim(self.image_shape, self.J, self.L)

    @property
    def input_dim(self) -> int:
        c, h, w = self.image_shape
        return c * h * w

    # -- validation -----------------------------------------------------------------
    def _check_client(
        self, images: np.ndarray, where: str = "client", finite: bool = True
    ) -> np.ndarray:
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
        flat = images.reshape(len(images), -1).astype(np.float32, copy=False)
        if finite:
            self._check_finite(flat, where)
        return flat

    @staticmethod
    def _check_finite(flat: np.ndarray, where: str = "client") -> None:
        if not np.all(np.isfinite(flat)):
            raise ValueError(f"{where}: images contain NaN or Inf")

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
        return self._finite(self.scatter_tensor(images).cpu().numpy())

    def scatter_tensor(self, images: torch.Tensor | np.ndarray) -> torch.Tensor:
        """:meth:`scatter` that stays on the device: ``(B, C, H, W)`` -> ``(B, P)`` tensor."""
        x = torch.as_tensor(images, dtype=torch.float32).to(self.device)
        b = x.shape[0]
        c, h, w = self.image_shape
        flat = x.reshape(b * c, h, w)
        op = self._scattering()
        with torch.no_grad():
            parts = [
                op(flat[start : start + self.batch_size])
                for start in range(0, flat.shape[0], self.batch_size)
            ]
        out = parts[0] if len(parts) == 1 else torch.cat(parts)
        return out.reshape(b, -1)

    @staticmethod
    def _finite(out: np.ndarray) -> np.ndarray:
        if not np.all(np.isfinite(out)):
            raise ValueError("scattering produced NaN or Inf; check the input images")
        return out

    def _scattering(self) -> Scattering2D:
        if self._op is None:
            self._op = Scattering2D(self.J, self.image_shape[1:], self.L).to(self.device)
        return self._op

    # -- embeddings -------------------------------------------------------------------
    def embed(self, images: np.ndarray) -> np.ndarray:
        """Embedding ``(P,)`` of one client; the same data gives the same bits.

        On a CPU it runs on one torch thread: a 200-image client is too small
        to split, and OpenMP's barriers between two threads made it 4x slower
        on a quiet 2-core machine (and 100x on a busy one). On a GPU, a
        client size that comes again replays captured CUDA graphs
        (:mod:`ripple_flwr.one_client_graph`) instead of launching a few
        hundred tiny kernels from Python.
        """
        with one_cpu_thread(self.device):
            flat = np.ascontiguousarray(self._check_client(images, finite=False))
            graph = self._graph_for(len(flat))
            # A replay takes the rows and their canonical order as they are: one pass over
            # the rows on the host. Non-finite rows fail its Ritz test and land below.
            out = graph.embed(flat, canonical_order(flat)) if graph is not None else None
            if out is not None:
                return self._finite(out)
            self._check_finite(flat)
            x = torch.from_numpy(canonical_row_order(flat))[None].to(self.device)
            proto = batch_prototypes(x, self.prototype_settings)
            return self.scatter(proto.reshape(1, *self.image_shape))[0]

    def _graph_for(self, n: int) -> OneClientGraph | None:
        """The CUDA graphs for clients of ``n`` images, built when that size comes again.

        A size seen once runs eagerly: capturing costs more than one client,
        so a process that embeds one client (a SuperNode) never pays for it.
        """
        settings = self.prototype_settings
        if (
            self.device.type != "cuda"
            or self._graphs_failed
            or settings.explained_variance is not None
            or settings.svd_rank == 0
            or not uses_subspace_iteration(n, min(settings.svd_rank, n - 1), HOST_SOLVE_PLAN)
        ):
            return None
        if n in self._graphs:
            self._graphs.move_to_end(n)
            return self._graphs[n]
        if n not in self._sizes_seen:
            self._sizes_seen.add(n)
            return None
        from ripple_flwr.one_client_graph import OneClientGraph  # builds on this module

        try:
            graph = OneClientGraph(self, n)
        except RuntimeError as err:  # a driver or torch build that cannot capture these ops
            log.warning("CUDA graph capture failed (%s); embedding one client eagerly", err)
            self._graphs_failed = True
            return None
        self._graphs[n] = graph
        if len(self._graphs) > _MAX_GRAPHS:
            self._graphs.popitem(last=False)
        return graph

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
        protos = torch.empty(
            (len(flats), *self.image_shape), dtype=torch.float32, device=self.device
        )
        by_size: dict[int, list[int]] = {}
        for i, f in enumerate(flats):
            by_size.setdefault(len(f), []).append(i)
        for idx in by_size.values():
            batch = torch.from_numpy(np.stack([flats[i] for i in idx]))
            protos[torch.as_tensor(idx, device=self.device)] = self.prototypes(batch)
        return self.scatter(protos)

    def embed_batch(self, clients: np.ndarray | torch.Tensor) -> np.ndarray:
        """Embeddings of equal-size clients ``(B, n, D)`` without canonical ordering.

        The fast path for synthetic clients, whose row order is already fixed
        by the seeded sampler. Everything stays on the device until the
        embeddings are copied back once.
        """
        return self._finite(self.embed_batch_tensor(clients).cpu().numpy())

    def embed_batch_tensor(self, clients: np.ndarray | torch.Tensor) -> torch.Tensor:
        """:meth:`embed_batch` without the copy back: ``(B, n, D)`` -> ``(B, P)`` on the device."""
        return self.scatter_tensor(self.prototypes(clients))
