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


def _as_batch(features: np.ndarray, dim: int, what: str) -> np.ndarray:
    x = np.asarray(features, dtype=np.float32)
    if x.ndim == 1:
        x = x[None]
    if x.ndim != 2 or x.shape[1] != dim:
        raise ValueError(f"{what}: expected shape (B, {dim}), got {np.shape(features)}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{what}: contains NaN or Inf")
    return x


class GMMVAERouter:
    """w = q(c | Phi) from the frozen GMM-VAE, weights below ``prune`` zeroed."""

    name = "gmm-vae"
    needs = "embedding"

    def __init__(self, model: GMMVAE, prune: float = 0.01, device: str = "cpu") -> None:
        self.model = model.to(device).eval()
        self.prune = prune
        self.device = device
        self.num_components = model.config.num_components
        self.input_dim = model.config.input_dim

    def route(self, features: np.ndarray, batch_size: int = 4096) -> np.ndarray:
        x = _as_batch(features, self.input_dim, "embedding")
        out = []
        for start in range(0, len(x), batch_size):
            chunk = torch.from_numpy(x[start : start + batch_size]).to(self.device)
            out.append(self.model.posterior(chunk).double().cpu().numpy())
        w = np.concatenate(out) if out else np.zeros((0, self.num_components))
        return prune_weights(w, self.prune)


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
        x = _as_batch(features, self.input_dim, "client mean image")
        basis = self.component_means.T
        w = np.stack([nnls(basis, row.astype(np.float64))[0] for row in x])
        sums = w.sum(axis=1, keepdims=True)
        return np.where(sums > 0, w / np.where(sums > 0, sums, 1.0), 1.0 / self.num_components)


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


def routing_l1(w: np.ndarray, truth: np.ndarray) -> float:
    """Mean over clients of ||w_k - pi*_k||_1."""
    return float(np.abs(np.asarray(w) - np.asarray(truth)).sum(axis=1).mean())
