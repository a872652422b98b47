"""Client embedding: spectral prototype + Wavelet Scattering Transform (spec section 2).

A client summarises its images by one *prototype* image (mean plus
variance-weighted principal directions, paper eq. 5) and sends the scattering
coefficients of that prototype (eq. 6). The same code embeds real clients on
their devices and synthetic clients on the server, so the two agree.

The prototype is computed from the n x n Gram matrix of the centred data
(never the D x D covariance), in float32, batched over clients. The
scattering filters are kymatio's, built once per :class:`SpectralEmbedder`;
the transform itself is kymatio's algorithm vectorised over paths
(:mod:`ripple_flwr.wst.scattering`), on CUDA when available.

Large images can be embedded at a smaller size (``embed_size``; the paper embeds
Office-Home's 224x224 and GLDv2's 64x64 images at 64x64): every client's images
are resized first, before the prototype and the scattering, by
:func:`~.shapes.resize_images` (bilinear with antialiasing, torch's own filter, so the
server's synthetic clients and a real client resize alike). Images already at
that size are not touched.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import torch

from ripple_flwr.wst.one_client_graph import OneClientGraph
from ripple_flwr.wst.prototype import (
    PrototypeSettings,
    batch_prototypes,
    canonical_order,
    canonical_row_order,
)
from ripple_flwr.wst.scattering import Scattering2D
from ripple_flwr.wst.shapes import embed_shape, embedding_dim, resize_images, validate_scattering
from ripple_flwr.wst.subspace import HOST_SOLVE_PLAN, uses_subspace_iteration
from ripple_flwr.wst.threads import map_on_cpu_threads, one_cpu_thread

__all__ = ["PrototypeSettings", "SpectralEmbedder"]


log = logging.getLogger(__name__)
# Client sizes whose CUDA graphs one embedder keeps (each holds a few MB of device memory).
_MAX_GRAPHS = 4
# Clients per batch on a CPU worker thread (embed_many, the synthetic bank): ~10 MB of
# images, close to the cache.
CPU_BATCH_CLIENTS = 16
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
    embed_size : side the images are resized to before the prototype and the
        scattering (:func:`~.shapes.resize_images`); ``None`` (or the images' own square
        size) embeds them as they are. Clients still pass images of
        ``image_shape``; prototypes (and :attr:`embed_shape`) have the resized shape.
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
        embed_size: int | None = None,
    ) -> None:
        image_shape = tuple(int(s) for s in image_shape)  # type: ignore[assignment]
        validate_scattering(image_shape, J, L, embed_size)
        self.image_shape = image_shape
        # The shape the prototype and the scattering work at; equal to image_shape when
        # no resize is needed (embed_size None, or the images' own square size).
        self.embed_shape = embed_shape(image_shape, embed_size)
        self.embed_size = None if self.embed_shape == image_shape else self.embed_shape[1]
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
        return embedding_dim(self.embed_shape, self.J, self.L)

    @property
    def input_dim(self) -> int:
        """Length D of a client's image row, at the images' own size."""
        c, h, w = self.image_shape
        return c * h * w

    @property
    def resizes(self) -> bool:
        """Whether images are resized before embedding (``embed_shape != image_shape``)."""
        return self.embed_shape != self.image_shape

    def resize_rows(self, clients: torch.Tensor) -> torch.Tensor:
        """Client rows ``(B, n, D)`` at ``image_shape`` -> ``(B, n, D')`` at ``embed_shape``.

        All ``B * n`` images in one :func:`~.shapes.resize_images` call; the input itself
        when no resize is needed.
        """
        if not self.resizes:
            return clients
        b, n = clients.shape[:2]
        images = clients.reshape(b * n, *self.image_shape)
        return resize_images(images, self.embed_shape[1:]).reshape(b, n, -1)

    # -- validation -----------------------------------------------------------------
    def _check_client(self, images: np.ndarray, where: str = "client") -> np.ndarray:
        """A client's images as float32 rows ``(n, D)``, shape and dtype checked.

        Finiteness is checked on the ordered rows (:meth:`_ordered_rows`).
        """
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
        return images.reshape(len(images), -1).astype(np.float32, copy=False)

    @staticmethod
    def _check_finite(flat: np.ndarray, where: str = "client") -> None:
        # One pass that allocates nothing (np.isfinite writes a mask as large as the
        # images): a NaN or an infinity makes the sum non-finite, and so can an
        # overflow; then min and max, NaN or infinite exactly when some entry is, decide.
        if np.isfinite(flat.sum()):
            return
        if not (np.isfinite(flat.min()) and np.isfinite(flat.max())):
            raise ValueError(f"{where}: images contain NaN or Inf")

    @classmethod
    def _ordered_rows(cls, flat: np.ndarray, where: str = "client") -> np.ndarray:
        """Checked rows ``(n, D)`` in canonical order (a fresh array), refused if not finite.

        Finiteness is checked on the ordered copy, which the gather has just
        brought into cache (90 us less for 200 3x32x32 images).
        """
        rows = canonical_row_order(flat)
        cls._check_finite(rows, where)
        return rows

    # -- prototypes -------------------------------------------------------------------
    def prototype(self, images: np.ndarray) -> np.ndarray:
        """The spectral prototype ``embed_shape`` of one client (row order canonicalised)."""
        rows = self._ordered_rows(self._check_client(images))
        return self.prototypes(rows[None], overwrite=True)[0].cpu().numpy()

    def prototypes(
        self, clients: np.ndarray | torch.Tensor, *, overwrite: bool = False
    ) -> torch.Tensor:
        """Prototypes of equal-size clients ``(B, n, D)`` -> ``(B, *embed_shape)`` (on device).

        The rows are at ``image_shape``; they are resized to ``embed_shape``
        first (:meth:`resize_rows`). ``overwrite``: ``clients`` is a copy the
        caller no longer needs, and may be centred in place.
        """
        x = torch.as_tensor(clients, dtype=torch.float32, device=self.device)
        if x.ndim != 3 or x.shape[2] != self.input_dim or x.shape[1] < 2:
            raise ValueError(
                f"expected clients of shape (B, n>=2, {self.input_dim}), got {tuple(x.shape)}"
            )
        if self.resizes:
            x, overwrite = self.resize_rows(x), True  # a fresh tensor: centre it in place
        protos = batch_prototypes(x, self.prototype_settings, overwrite=overwrite)
        return protos.reshape(-1, *self.embed_shape)

    # -- scattering -------------------------------------------------------------------
    def scatter(self, images: torch.Tensor | np.ndarray) -> np.ndarray:
        """Scattering embeddings of B images ``(B, C, H, W)`` -> ``(B, P)`` float32.

        The images are at ``embed_shape`` (prototypes are); images at
        ``image_shape`` are resized to it first.
        """
        return self._finite(self.scatter_tensor(images).cpu().numpy())

    def scatter_tensor(self, images: torch.Tensor | np.ndarray) -> torch.Tensor:
        """:meth:`scatter` that stays on the device: ``(B, C, H, W)`` -> ``(B, P)`` tensor."""
        x = torch.as_tensor(images, dtype=torch.float32).to(self.device)
        b = x.shape[0]
        c, h, w = self.embed_shape
        if self.resizes and tuple(x.shape[1:]) == self.image_shape:
            x = resize_images(x, (h, w))
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
            self._op = Scattering2D(self.J, self.embed_shape[1:], self.L).to(self.device)
        return self._op

    # -- embeddings -------------------------------------------------------------------
    def embed(self, images: np.ndarray) -> np.ndarray:
        """Embedding ``(P,)`` of one client; the same data gives the same bits.

        On a CPU it runs on one torch thread: a 200-image client is too small
        to split, and OpenMP's barriers between two threads made it 4x slower
        on a quiet 2-core machine (and 100x on a busy one). On a GPU, a
        client size that comes again replays captured CUDA graphs
        (:mod:`ripple_flwr.wst.one_client_graph`) instead of launching a few
        hundred tiny kernels from Python.
        """
        with one_cpu_thread(self.device):
            flat = np.ascontiguousarray(self._check_client(images))
            graph = self._graph_for(len(flat))
            # A replay takes the rows and their canonical order as they are: one pass over
            # the rows on the host. Non-finite rows fail its Ritz test and land below.
            out = graph.embed(flat, canonical_order(flat)) if graph is not None else None
            if out is not None:
                return self._finite(out)
            return self.embed_batch(self._ordered_rows(flat)[None], overwrite=True)[0]

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
        """Embeddings ``(B, P)`` of several clients, batched by client size.

        On a GPU each size is one batch; on a CPU, batches of 16 clients run on
        worker threads (as the synthetic bank does). A client's embedding does
        not depend on its batch, so the result is the same either way.
        """
        if isinstance(clients, np.ndarray) and clients.ndim == 5:
            clients = list(clients)
        if len(clients) == 0:
            return np.zeros((0, self.output_dim), dtype=np.float32)
        flats = [
            self._ordered_rows(self._check_client(c, f"client {i}"), f"client {i}")
            for i, c in enumerate(clients)
        ]
        by_size: dict[int, list[int]] = {}
        for i, f in enumerate(flats):
            by_size.setdefault(len(f), []).append(i)
        step = CPU_BATCH_CLIENTS if self.device.type == "cpu" else len(flats)
        batches = [idx[s : s + step] for idx in by_size.values() for s in range(0, len(idx), step)]
        out = np.empty((len(flats), self.output_dim), dtype=np.float32)

        def work(idx: list[int]) -> None:
            out[idx] = self.embed_batch(np.stack([flats[i] for i in idx]), overwrite=True)

        if self.device.type == "cpu":
            for _ in map_on_cpu_threads(work, batches):
                pass
        else:
            for idx in batches:
                work(idx)
        return out

    def embed_batch(
        self, clients: np.ndarray | torch.Tensor, *, overwrite: bool = False
    ) -> np.ndarray:
        """Embeddings of equal-size clients ``(B, n, D)`` without canonical ordering.

        The fast path for synthetic clients, whose row order is already fixed
        by the seeded sampler. Everything stays on the device until the
        embeddings are copied back once. ``overwrite``: see :meth:`prototypes`.
        """
        return self._finite(self.embed_batch_tensor(clients, overwrite=overwrite).cpu().numpy())

    def embed_batch_tensor(
        self, clients: np.ndarray | torch.Tensor, *, overwrite: bool = False
    ) -> torch.Tensor:
        """:meth:`embed_batch` without the copy back: ``(B, n, D)`` -> ``(B, P)`` on the device."""
        return self.scatter_tensor(self.prototypes(clients, overwrite=overwrite))
