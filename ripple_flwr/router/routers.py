"""Routers: client summary in, cluster weights w in the simplex out (one interface).

- ``gmm-vae``: the paper's method; reads the client's WST embedding.
- ``mean-unmixing``: the reference of the spec; non-negative least squares
  of the client's mean image on the auxiliary set's per-component means.
- ``uniform``: w = 1/K, the floor any router must beat.

A router declares which summary it needs (``"embedding"`` or ``"mean"``),
so the client sends exactly that and nothing more.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch
from scipy.optimize import nnls

from ripple_flwr.router.vae import GMMVAE, prune_weights

ROUTERS = ("gmm-vae", "mean-unmixing")


class Router(Protocol):
    name: str
    needs: str
    num_components: int
    input_dim: int | None  # length of the summary it reads (None: reads nothing)

    def route(self, features: np.ndarray) -> np.ndarray:
        """``(B, F)`` client summaries -> ``(B, K)`` weights, rows summing to 1."""
        ...

    # Optional: ``route_with_reasons(features) -> (w, [reason or None per client])`` says
    # which summaries it would not read (routed 1/K); a router without it reads them all.


def _as_batch(features: np.ndarray, dim: int, what: str) -> np.ndarray:
    x = np.asarray(features, dtype=np.float32)
    if x.ndim == 1:
        x = x[None]
    if x.ndim != 2 or x.shape[1] != dim:
        raise ValueError(f"{what}: expected shape (B, {dim}), got {np.shape(features)}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{what}: contains NaN or Inf")
    return x


# The router's domain, in the synthetic bank's standard deviations from its mean (the
# statistics the VAE standardises its input with). Real clients reach |z| 13.1 in one
# coordinate and an RMS of 4.5 (Fashion-MNIST, 100 clients of one class each; mnist-5k
# Dir(0.1): 6.3 and 1.9); a crafted vector far outside (all 3e38, a random direction x
# 1000) routes one-hot wherever the encoder extrapolates, which would let a client pick
# its cluster. Such a summary is not routed: the client gets w = 1/K.
DOMAIN_MAX_Z = 50.0
DOMAIN_MAX_RMS = 12.0


class GMMVAERouter:
    """w = q(c | Phi) from the frozen GMM-VAE, weights below ``prune`` zeroed.

    A summary outside the router's domain (:data:`DOMAIN_MAX_Z`,
    :data:`DOMAIN_MAX_RMS`) gets the uniform w = 1/K: it says nothing the
    router was trained to read, and it cannot choose a cluster.
    """

    name = "gmm-vae"
    needs = "embedding"

    def __init__(self, model: GMMVAE, prune: float = 0.01, device: str = "cpu") -> None:
        self.model = model.to(device).eval()
        self.prune = prune
        self.device = device
        self.num_components = model.config.num_components
        self.input_dim = model.config.input_dim

    def out_of_domain(self, features: np.ndarray) -> list[str | None]:
        """For each summary, why it lies outside the router's domain (``None``: inside)."""
        x = _as_batch(features, self.input_dim, "embedding").astype(np.float64)
        mean = self.model.feature_mean.detach().cpu().double().numpy()
        std = self.model.feature_std.detach().cpu().double().numpy()
        z = np.abs((x - mean) / std)
        peak, rms = z.max(axis=1), np.sqrt((z**2).mean(axis=1))
        reasons: list[str | None] = []
        for p, r in zip(peak, rms, strict=True):
            if p > DOMAIN_MAX_Z or r > DOMAIN_MAX_RMS:
                reasons.append(
                    f"embedding outside the router's domain (max |z| {p:.3g}, RMS {r:.3g} "
                    f"standard deviations of the synthetic bank; limits {DOMAIN_MAX_Z:g}, "
                    f"{DOMAIN_MAX_RMS:g}): routed uniformly"
                )
            else:
                reasons.append(None)
        return reasons

    def route(self, features: np.ndarray, batch_size: int = 4096) -> np.ndarray:
        return self.route_with_reasons(features, batch_size)[0]

    def route_with_reasons(
        self, features: np.ndarray, batch_size: int = 4096
    ) -> tuple[np.ndarray, list[str | None]]:
        """:meth:`route` and :meth:`out_of_domain` from one pass over the summaries."""
        x = _as_batch(features, self.input_dim, "embedding")
        out = []
        for start in range(0, len(x), batch_size):
            chunk = torch.from_numpy(x[start : start + batch_size]).to(self.device)
            out.append(self.model.posterior(chunk).double().cpu().numpy())
        w = np.concatenate(out) if out else np.zeros((0, self.num_components))
        w = prune_weights(w, self.prune)
        reasons = self.out_of_domain(x)
        w[[i for i, r in enumerate(reasons) if r is not None]] = 1.0 / self.num_components
        return w, reasons


class MeanUnmixingRouter:
    """w = NNLS(component means, client mean), normalised to sum 1 (spec section 3)."""

    name = "mean-unmixing"
    needs = "mean"

    def __init__(self, component_means: np.ndarray) -> None:
        m = np.asarray(component_means, dtype=np.float64)
        if m.ndim != 2 or m.shape[0] < 2:
            raise ValueError(f"component means must be (K>=2, D), got {m.shape}")
        self.component_means = m
        self.num_components = m.shape[0]
        self.input_dim = m.shape[1]

    @classmethod
    def from_aux(cls, images: np.ndarray, components: np.ndarray, k: int) -> MeanUnmixingRouter:
        flat = images.reshape(len(images), -1)
        missing = [c for c in range(k) if not np.any(components == c)]
        if missing:
            raise ValueError(f"auxiliary set has no image of components {missing}")
        return cls(np.stack([flat[components == c].mean(axis=0) for c in range(k)]))

    def route(self, features: np.ndarray) -> np.ndarray:
        return self.route_with_reasons(features)[0]

    def route_with_reasons(self, features: np.ndarray) -> tuple[np.ndarray, list[str | None]]:
        """:meth:`route`, and for each client why it was routed uniformly (``None``: it was not).

        A mean image that no non-negative mix of the components' means approaches (NNLS
        weights all 0, e.g. an all-black mean) gets w = 1/K.
        """
        x = _as_batch(features, self.input_dim, "client mean image")
        basis = self.component_means.T
        w = np.stack([nnls(basis, row.astype(np.float64))[0] for row in x])
        sums = w.sum(axis=1, keepdims=True)
        w = np.where(sums > 0, w / np.where(sums > 0, sums, 1.0), 1.0 / self.num_components)
        reasons: list[str | None] = [
            None
            if s > 0
            else "mean image is no non-negative mix of the components' mean images (all NNLS "
            "weights 0): routed uniformly"
            for s in sums[:, 0]
        ]
        return w, reasons


class UniformRouter:
    """w = 1/K for everyone."""

    name = "uniform"
    needs = "none"
    input_dim = None

    def __init__(self, num_components: int) -> None:
        self.num_components = num_components

    def route(self, features: np.ndarray) -> np.ndarray:
        n = len(np.atleast_2d(features))
        return np.full((n, self.num_components), 1.0 / self.num_components)

    def route_with_reasons(self, features: np.ndarray) -> tuple[np.ndarray, list[str | None]]:
        w = self.route(features)
        return w, [None] * len(w)


def routing_l1(w: np.ndarray, truth: np.ndarray) -> float:
    """Mean over clients of ||w_k - pi*_k||_1."""
    return float(np.abs(np.asarray(w) - np.asarray(truth)).sum(axis=1).mean())
