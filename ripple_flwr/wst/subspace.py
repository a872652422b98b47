"""Top eigenpairs of many small symmetric PSD matrices by block subspace iteration.

A client's prototype needs the top M ~ 20 eigenpairs of its n x n Gram
matrix (n ~ 200). A full decomposition is mostly the tridiagonalisation of
eigenvectors nobody uses on a CPU, and a sequential solver per matrix on a
GPU. Here a block of vectors is iterated with G^2 and orthonormalised, and a
small Rayleigh-Ritz solve recovers the pairs, batched over clients with no
host sync until the residual test; clients that fail it get the exact
decomposition. The stages (:func:`ritz_basis`, :func:`ritz_pairs`) are
public so one client can run them as CUDA graphs around a host solve
(:mod:`ripple_flwr.wst.one_client_graph`).
"""

from __future__ import annotations

import functools

import torch

from ripple_flwr.wst.threads import one_cpu_thread

# Eigenvalues below this fraction of the largest are treated as zero (rank).
RANK_TOL = 1e-6


# Top-M eigenpairs by block subspace iteration when the client has at least this many
# rows per block column; smaller Gram matrices go to a full eigen-decomposition.
_MIN_ROWS_PER_BLOCK = 2
# (block size, steps) of the subspace iteration. Each step is a product with G^2
# followed by an orthonormalisation; the error of the M-th eigenvector shrinks by
# (lambda_{b+1}/lambda_M)^2 per step. Measured on 256 mnist-5k and 256 3x32x32
# clients (M=20), the largest Ritz residual is 1.3e-6 of lambda_1 with (48, 5) and
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
    if precise:
        y64 = y.double()
        c = y64.transpose(1, 2) @ y64
    else:
        c = (y.transpose(1, 2) @ y).double()
    diag = c.diagonal(dim1=1, dim2=2)
    diag.add_(diag.sum(-1, keepdim=True), alpha=1e-12).clamp_min_(torch.finfo(c.dtype).tiny)
    r, _ = torch.linalg.cholesky_ex(c, upper=True)
    return torch.linalg.solve_triangular(r.to(y.dtype), y, upper=True, left=False)


@functools.lru_cache(maxsize=8)
def _eye(k: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.eye(k, dtype=dtype, device=device)


def _largest(evals: torch.Tensor, evecs: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The m largest of ascending eigenpairs ``(B, k)``, ``(B, n, k)``, descending."""
    return evals.flip(-1)[:, :m], evecs.flip(-1)[:, :, :m]


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
    finite = torch.isfinite(h.sum(dim=(1, 2)))  # H's entries are far from overflowing
    return q, torch.where(finite[:, None, None], h, _eye(h.shape[-1], h.device, h.dtype))


def ritz_pairs(
    gram: torch.Tensor, q: torch.Tensor, theta: torch.Tensor, w: torch.Tensor, m: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The top ``m`` Ritz pairs from H's ascending eigenpairs ``theta``, ``w``; no host sync.

    Returns eigenvalues ``(B, m)``, eigenvectors ``(B, n, m)`` in G's dtype,
    and ``(B,)`` flags of clients whose residuals ||G u - theta u|| are not
    at float32 level for a kept component (their pairs must not be used).
    """
    theta, w = _largest(theta, w, m)
    u = (q.double() @ w).to(gram.dtype)
    lam = theta.to(gram.dtype)
    resid = torch.linalg.vector_norm((gram @ u).sub_(u * lam[:, None, :]), dim=1)
    top = lam[:, :1].abs().clamp_min(torch.finfo(gram.dtype).tiny)
    kept = lam > RANK_TOL * top
    # NaN residuals compare False: a broken client is caught by its non-finite basis
    # (its columns are unit vectors, so their sum is finite exactly when they are).
    broken = ~torch.isfinite(u.sum(dim=(1, 2)))
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
        # A few clients are pure latency on a GPU (about a hundred small launches:
        # 2.6-3.1 ms for one client on an H200); the host does them in 1.5 ms.
        # One host thread: OpenMP across a GPU machine's cores costs more than the work.
        with one_cpu_thread(torch.device("cpu")):
            lam, u = top_eigenpairs(gram.cpu(), m)
        return lam.to(gram.device), u.to(gram.device)
    if not uses_subspace_iteration(n, m, subspace_plan(gram.device)) or b == 0:
        evals, evecs = torch.linalg.eigh(gram)
        return _largest(evals, evecs, m)
    q, h = ritz_basis(gram)
    theta, w = torch.linalg.eigh(h)
    lam, u, bad = ritz_pairs(gram, q, theta, w, m)
    if bool(bad.any()):  # one host sync per batch, not per client
        idx = bad.nonzero()[:, 0]
        exact_lam, exact_u = _largest(*torch.linalg.eigh(gram[idx]), m)
        lam = lam.index_copy(0, idx, exact_lam)
        u = u.index_copy(0, idx, exact_u)
    return lam, u
