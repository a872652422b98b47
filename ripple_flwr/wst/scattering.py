"""kymatio's 2-D scattering (order 2), recast as a few FFTs and matrix products.

kymatio's own loop (``kymatio/scattering2d/core/scattering2d.py``) issues one
small FFT per scattering path: 217 paths and ~650 FFT calls per image at
J=3, L=8, so a single image costs 13 ms of Python overhead on a CPU. This
module computes the *same operator* with kymatio's own filter bank, padding
and output order, rearranged so that the work is a handful of large calls:

- **Wavelet filtering + subsampling** (multiply a spectrum by a filter, then
  periodise it by k in each axis) never forms the full-size product kymatio
  writes (k^2 times larger than the result; it and its periodisation were
  65% of the time on a CPU): for k <= 2 the k^2 aliases are summed as
  complex products of contiguous alias planes, and for larger k one
  batched matrix product per (scale, resolution) pair maps the k^2 aliased
  input frequencies of each output frequency through the L filters.
- **Low-pass + subsampling + unpadding** is linear in the real map |U|, so
  it is one matrix product with a precomputed (M_r N_r, h w) operator
  straight from the spatial map: no FFT of the second-order maps at all.

The output matches kymatio's to float32 rounding (``tests/router/test_embedding.py``
checks it against ``kymatio.torch.Scattering2D``).
"""

from __future__ import annotations

import numpy as np
import torch


def _aliasing_filters(psi: np.ndarray, k: int) -> torch.Tensor:
    """Filters ``(L, M, N)`` rearranged for :func:`_filter_periodise`, divided by k^2.

    k = 1 and k = 2: ``(k*k, L, M/k, N/k)`` complex, alias s of every output
    frequency as one plane. k >= 4: ``(F, L, k*k)`` with F = (M/k)(N/k) output
    frequencies; column s of frequency f is the filter value at the s-th
    frequency that aliases onto f when subsampling by k.
    """
    n_filt, m, n = psi.shape
    p = psi.reshape(n_filt, k, m // k, k, n // k)
    if k <= 2:
        p = p.transpose(1, 3, 0, 2, 4).reshape(k * k, n_filt, m // k, n // k)
        # Stored complex (imaginary part 0): the product with a complex spectrum then
        # skips torch's promotion copy of a real operand, with the same bits.
        return torch.from_numpy(np.ascontiguousarray(p) / (k * k)).to(torch.complex64)
    p = p.transpose(2, 4, 0, 1, 3).reshape(-1, n_filt, k * k)
    return torch.from_numpy(np.ascontiguousarray(p) / (k * k))


def _filter_periodise(u_hat: torch.Tensor, filt: torch.Tensor, k: int, out: torch.Tensor) -> None:
    """``subsample_fourier(u_hat * psi, k)`` for all L filters, written to ``out``.

    ``(B, X, M, N)`` complex spectra (X maps of each of B images) ->
    ``out`` ``(B, X, L, M/k, N/k)``, with ``filt`` laid out by
    :func:`_aliasing_filters`. kymatio forms the full-size product and then
    sums its k^2 slabs; here the slabs are never formed. For k <= 2 the k^2
    aliases are summed as complex products of contiguous alias planes,
    accumulated in place. For larger k (16 or more aliases, few output
    frequencies) one batched product over output frequencies, with every
    image's maps as columns, does it in one call. Each image's coefficients
    are computed by the same operations whatever B is, so they do not depend
    on the batch (``tests/router/test_embedding.py`` checks the bits).
    """
    b, x, m, n = u_hat.shape
    mk, nk = m // k, n // k
    if k <= 2:
        # Alias planes made contiguous first (one small copy): products and sums then
        # run along whole planes, and each alias is added in place (no temporary).
        u = u_hat.reshape(b, x, k, mk, k, nk).transpose(3, 4).reshape(b, x, k * k, 1, mk, nk)
        torch.mul(u[:, :, 0], filt[0], out=out)
        for s in range(1, k * k):
            out.addcmul_(u[:, :, s], filt[s])
        return
    f, n_filt, s = filt.shape
    # (B, X, k, mk, k, nk, 2) -> (mk, nk, k, k, B, X, 2): for each output frequency, its
    # k^2 aliases as rows and every (image, map, re/im) as a column, so the filters are
    # shared by all images without copies and each column is the same 16-term (or
    # longer) product whatever B is.
    parts = torch.view_as_real(u_hat).reshape(b, x, k, mk, k, nk, 2).permute(3, 5, 2, 4, 0, 1, 6)
    prod = torch.bmm(filt, parts.reshape(f, s, b * x * 2))  # (F, L, B X 2)
    prod = prod.reshape(mk, nk, n_filt, b, x, 2).permute(3, 4, 2, 0, 1, 5)
    torch.view_as_real(out).copy_(prod)


def _lowpass_operator(phi: np.ndarray, J: int, res: int) -> torch.Tensor:
    """The real ``(M_r N_r, h w)`` matrix of ``unpad(ifft2(subsample(fft2(u) phi, 2^(J-res))))``.

    For a real map u that is circular convolution with phi's spatial kernel,
    sampled every k = 2^(J-res) pixels from k on (the unpadding drops the
    first and last sample): A[i, p] = Re g[(k p - i) mod size], g = ifft2(phi).
    """
    m, n = phi.shape
    k = 2 ** (J - res)
    g = np.fft.ifft2(phi.astype(np.float64)).real
    rows = k * np.arange(1, m // k - 1)
    cols = k * np.arange(1, n // k - 1)
    im, in_ = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    a = g[(rows[None, None, :, None] - im[..., None, None]) % m,
          (cols[None, None, None, :] - in_[..., None, None]) % n]  # fmt: skip
    return torch.from_numpy(a.reshape(m * n, len(rows) * len(cols)).astype(np.float32))


class Scattering2D(torch.nn.Module):
    """Order-2 scattering of ``(B, H, W)`` real images -> ``(B, 1 + JL + L^2 J(J-1)/2, H', W')``.

    Same filters, padding, unpadding and coefficient order as
    ``kymatio.torch.Scattering2D(J, shape, L, max_order=2)``.
    """

    def __init__(self, J: int, shape: tuple[int, int], L: int = 8) -> None:
        # kymatio (and scipy.fft under it, 0.2 s to import) only when filters are built: a
        # client process that trains or evaluates never embeds.
        from kymatio.scattering2d.backend.torch_backend import Pad
        from kymatio.scattering2d.filter_bank import filter_bank
        from kymatio.scattering2d.utils import compute_padding

        super().__init__()
        m, n = shape
        if 2**J >= min(m, n):
            raise ValueError(f"J={J} too large for {m}x{n} images (need 2**J < min(H, W))")
        self.J, self.L, self.shape = J, L, (m, n)
        mp, np_ = compute_padding(m, n, J)
        self._pad = Pad(
            [(mp - m) // 2, (mp - m + 1) // 2, (np_ - n) // 2, (np_ - n + 1) // 2], [m, n]
        )
        self.out_shape = (mp // 2**J - 2, np_ // 2**J - 2)
        bank = filter_bank(mp, np_, J, L)
        for res, level in enumerate(bank["phi"]["levels"]):
            self.register_buffer(f"low_{res}", _lowpass_operator(level, J, res))
        # psi_{j}_{res}: the L orientations of scale j at resolution res, laid out for
        # filtering a spectrum of that resolution and subsampling it by 2^(j - res).
        for j in range(J):
            psis = [p for p in bank["psi"] if p["j"] == j]
            for res in range(max(j, 1)):
                stacked = np.stack([p["levels"][res] for p in psis]).astype(np.float32)
                self.register_buffer(f"psi_{j}_{res}", _aliasing_filters(stacked, 2 ** (j - res)))
        # Where each of kymatio's coefficients lands in this module's maps: they are
        # computed resolution by resolution (see forward), then put in kymatio's order.
        self.register_buffer("_kymatio_order", torch.tensor(_kymatio_order(J, L)), persistent=False)

    @property
    def num_maps(self) -> int:
        J, L = self.J, self.L
        return 1 + J * L + L * L * J * (J - 1) // 2

    def _lowpass(self, u: torch.Tensor, res: int) -> torch.Tensor:
        """Low-pass coefficients of real maps ``(B, X, M_r, N_r)`` -> ``(B, X, h, w)``."""
        op = getattr(self, f"low_{res}")
        b = u.shape[0]
        # One product per image (same shape whatever the batch): batch-independent bits.
        out = torch.bmm(u.reshape(b, -1, op.shape[0]), op.expand(b, *op.shape))
        return out.reshape(*u.shape[:-2], *self.out_shape)

    def _filtered(self, u_hat: torch.Tensor, j: int, res: int, out: torch.Tensor) -> None:
        """Spectra ``(B, X, M, N)`` of resolution ``res`` through the L wavelets of scale ``j``.

        Subsampled to resolution j and written to ``out`` ``(B, X, L, M', N')``.
        """
        _filter_periodise(u_hat, getattr(self, f"psi_{j}_{res}"), 2 ** (j - res), out)

    @staticmethod
    def _modulus(u_hat: torch.Tensor) -> torch.Tensor:
        """|ifft2(u_hat)| of ``(B, X, L, M, N)`` spectra -> ``(B, X * L, M, N)`` real maps."""
        u = torch.view_as_real(torch.fft.ifft2(u_hat))
        # sqrt(re^2 + im^2): 2.6x faster than hypot on a CPU (no overflow guard needed:
        # |u| is at most a few times the image's range).
        re, im = u[..., 0], u[..., 1]
        return torch.sqrt(torch.addcmul(re * re, im, im)).flatten(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Kymatio's algorithm, grouped by resolution instead of by path.

        Every map of resolution r (the first order of scale r and the second
        order of every (j1 < r, r) path) comes from one filtered buffer, one
        inverse FFT, one modulus and one low-pass product, so a single image
        costs a few dozen calls instead of one set per path.
        """
        if x.ndim != 3 or tuple(x.shape[-2:]) != self.shape:
            raise ValueError(
                f"expected (B, {self.shape[0]}, {self.shape[1]}), got {tuple(x.shape)}"
            )
        b, J, L = x.shape[0], self.J, self.L
        padded = self._pad(x.contiguous())[..., 0][:, None]  # (B, 1, Mp, Np) real
        m, n = padded.shape[-2:]
        first = padded.new_empty((b, 1, L, m, n), dtype=torch.complex64)
        self._filtered(torch.fft.fft2(padded), 0, 0, first)
        # Resolution 0: the image and its first-order maps of scale 0. Their spectra
        # (one FFT) feed every later resolution: the image's for the first order of
        # scale r, the maps' for the second order (0, r).
        maps = [torch.cat([padded, self._modulus(first)], dim=1)]  # (B, 1 + L, Mp, Np)
        spectra = [torch.fft.fft2(maps[0])]
        for r in range(1, J):
            # Inputs at resolution r: the image and the scale-0 maps (1 + L), then the
            # first-order maps of each scale 1 <= j1 < r (L each).
            buf = padded.new_empty((b, 1 + L + (r - 1) * L, L, m >> r, n >> r), dtype=first.dtype)
            self._filtered(spectra[0], r, 0, buf[:, : 1 + L])
            for j1 in range(1, r):
                lo = 1 + L + (j1 - 1) * L
                self._filtered(spectra[j1], r, j1, buf[:, lo : lo + L])
            maps.append(self._modulus(buf))  # first order of scale r, then (j1, r) paths
            if r < J - 1:
                spectra.append(torch.fft.fft2(maps[r][:, :L]))
        lows = torch.cat([self._lowpass(u, r) for r, u in enumerate(maps)], dim=1)
        return lows.index_select(1, self._kymatio_order)


def _kymatio_order(J: int, L: int) -> list[int]:
    """Indices into forward's maps (by resolution) of kymatio's coefficients, in its order.

    Resolution 0 holds the image and the first order of scale 0; resolution
    r >= 1 holds the first order of scale r, then the second-order paths
    (j1 < r, r) for j1 = 0, 1, ..., each as (theta1, theta2). kymatio's order
    is the image, the first order by scale, then the second order by j1,
    theta1, j2, theta2.
    """
    base = [0, 1 + L]
    for r in range(1, J):
        base.append(base[-1] + L + r * L * L)

    def second(j1: int, j2: int, t1: int, t2: int) -> int:
        return base[j2] + L + j1 * L * L + t1 * L + t2

    order = [0, *range(1, 1 + L)]
    order += [base[r] + t for r in range(1, J) for t in range(L)]
    order += [
        second(j1, j2, t1, t2)
        for j1 in range(J - 1)
        for t1 in range(L)
        for j2 in range(j1 + 1, J)
        for t2 in range(L)
    ]
    return order
