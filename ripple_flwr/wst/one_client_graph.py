"""One client's embedding on a GPU as two captured CUDA graphs around a host eigen-solve.

Why: one client's embedding is about two hundred tiny kernels (centring,
Gram matrix, subspace iteration, prototype, scattering). Launched one by
one from Python, the GPU idles between them and a client costs several
milliseconds whatever the GPU. Captured once per client size and replayed,
they cost their execution time. The one step that cannot be captured is
the small Rayleigh-Ritz eigen-solve (torch checks its result on the host):
it runs on the host between the two graphs, on a 48 x 48 float64 matrix
(the block of :data:`~ripple_flwr.wst.subspace.HOST_SOLVE_PLAN`: half the
orthonormalisations of the GPU batch's 32 x 10).

The graphs run exactly :func:`ripple_flwr.wst.subspace.ritz_basis`,
:func:`~ripple_flwr.wst.subspace.ritz_pairs`,
:func:`~ripple_flwr.wst.prototype.prototype_from_pairs` and the scattering, so
the result is the eager GPU path's up to float rounding. A client whose
Ritz residuals fail the float32 test is reported, and the caller embeds it
with the exact decomposition instead.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np
import torch

from ripple_flwr.wst.prototype import centre, prototype_from_pairs
from ripple_flwr.wst.subspace import HOST_SOLVE_PLAN, ritz_basis, ritz_pairs

if TYPE_CHECKING:
    from ripple_flwr.wst.embedder import SpectralEmbedder

# Eager warm-up runs before capture: allocations, cuBLAS/cuSOLVER handles, cuFFT plans.
_WARMUP_RUNS = 3


class OneClientGraph:
    """Replays one client of ``n`` images through captured graphs on ``embedder.device``.

    Build it once per client size (capture takes tens of milliseconds);
    :meth:`embed` then takes the ``(n, D)`` float32 rows and their canonical order.
    """

    def __init__(self, embedder: SpectralEmbedder, n: int) -> None:
        dev = embedder.device
        if dev.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA embedder, got device {dev}")
        self.n = n
        self.m = embedder.prototype_settings.svd_rank
        # The graphs read and write fixed buffers: one replay at a time per embedder.
        self._lock = threading.Lock()
        self._embedder = embedder
        d = embedder.input_dim
        # Rows go in as given and are put in canonical order on the device (one host pass).
        self._host_x = torch.empty((n, d), dtype=torch.float32, pin_memory=True)
        self._host_order = torch.empty(n, dtype=torch.int64, pin_memory=True)
        self._raw = torch.rand((1, n, d), generator=torch.Generator().manual_seed(n)).to(dev)
        self._order = torch.arange(n, device=dev)
        # Shapes of the eigen-solve's results, from one eager run of the first stage.
        _, _, _, _, h = self._stage_a()
        self._host_h = torch.empty(h.shape, dtype=h.dtype, pin_memory=True)
        self._theta = torch.empty(h.shape[:2], dtype=h.dtype, device=dev)
        self._w = torch.empty(h.shape, dtype=h.dtype, device=dev)
        self._solve_on_host(h.cpu())
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            for _ in range(_WARMUP_RUNS):
                a = self._stage_a()
                self._stage_b(*a[:4])
        torch.cuda.current_stream(dev).wait_stream(side)
        torch.cuda.synchronize(dev)
        self._graph_a = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph_a):
            self._mu, self._xc, self._gram, self._q, self._h = self._stage_a()
        self._graph_b = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph_b):
            self._out, self._bad = self._stage_b(self._mu, self._xc, self._gram, self._q)
        torch.cuda.synchronize(dev)

    def _stage_a(self) -> tuple[torch.Tensor, ...]:
        # The rows at the images' size, resized as the eager path does (captured too).
        rows = self._embedder.resize_rows(self._raw.index_select(1, self._order))
        mu, xc, gram = centre(rows)
        q, h = ritz_basis(gram, HOST_SOLVE_PLAN)  # the solve is on the host: any block size
        return mu, xc, gram, q, h

    def _stage_b(
        self, mu: torch.Tensor, xc: torch.Tensor, gram: torch.Tensor, q: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        lam, u, bad = ritz_pairs(gram, q, self._theta, self._w, self.m)
        proto = prototype_from_pairs(mu, xc, lam, u)
        emb = self._embedder.scatter_tensor(proto.reshape(1, *self._embedder.embed_shape))
        return emb[0], bad[0]

    def _solve_on_host(self, h: torch.Tensor) -> None:
        theta, w = torch.linalg.eigh(h)
        self._theta.copy_(theta, non_blocking=True)
        self._w.copy_(w, non_blocking=True)

    def embed(self, rows: np.ndarray, order: np.ndarray) -> np.ndarray | None:
        """The embedding ``(P,)`` of ``rows[order]`` (n x D), or None if its Ritz pairs failed.

        Non-finite rows make the Ritz pairs fail (None), so the caller's own
        checks, skipped before a replay, still refuse them.
        """
        with self._lock:
            np.copyto(self._host_x.numpy(), rows)
            self._host_order.numpy()[:] = order
            self._raw.copy_(self._host_x[None], non_blocking=True)
            self._order.copy_(self._host_order, non_blocking=True)
            self._graph_a.replay()
            self._host_h.copy_(self._h)  # waits for the first graph
            self._solve_on_host(self._host_h)
            self._graph_b.replay()
            if bool(self._bad):
                return None
            return self._out.cpu().numpy()
