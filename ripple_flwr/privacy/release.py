"""A differentially private one-shot embedding in a run: the public mechanism and the release.

The server fixes every parameter of the mechanism from public data only (its
own auxiliary set D_aux and the GMM-VAE checkpoint), before any client
sends anything, and ships them in the one-shot query; each client clips and
noises its own embedding with them (:func:`ripple_flwr.privacy.mechanism.privatize_embedding`)
and a secret random generator before the embedding leaves the device. The
server routes the noisy vector unchanged.

The mechanism is the best of those ``benchmarks/embedding_dp.py`` measured
("model-ridge"): in the GMM-VAE's input space (signed log1p, the
checkpoint's feature mean and std), the embedding is projected on the K - 1
ridge directions that predict the mixtures of synthetic reference clients
drawn from D_aux, clipped to the 0.9-quantile of those clients' norms there
(unless ``embedding-dp-clip`` sets the bound) and noised in those K - 1
coordinates, then mapped back by the conditional mean.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ripple_flwr.privacy.mechanism import gaussian_sigma, privatize_embedding, reference_projection

NOISE_SEED_KEY = "dp-noise-seed"  # node config: fixes the node's noise (tests, benchmarks only)
_REFERENCE_KEY = 104729


@dataclass
class PublicMechanism:
    """What every client needs to privatise its embedding; nothing in it depends on a client."""

    center: np.ndarray
    scale: np.ndarray
    basis: np.ndarray
    lift: np.ndarray
    clip: float
    epsilon: float
    delta: float
    log_space: bool = True

    @property
    def sigma(self) -> float:
        """Standard deviation of the noise on each of the ``basis`` coordinates."""
        return gaussian_sigma(self.epsilon, self.delta, 2.0 * self.clip)

    def arrays(self) -> dict[str, np.ndarray]:
        """The mechanism's arrays (float64), as they travel in the query message."""
        return {
            k: np.asarray(getattr(self, k), dtype=np.float64)
            for k in ("center", "scale", "basis", "lift")
        }

    def config(self) -> dict[str, float | bool]:
        """The mechanism's scalars, as they travel in the query message."""
        return {
            "epsilon": float(self.epsilon),
            "delta": float(self.delta),
            "clip": float(self.clip),
            "log-space": bool(self.log_space),
        }

    @classmethod
    def from_parts(
        cls, arrays: Mapping[str, np.ndarray], config: Mapping[str, Any]
    ) -> PublicMechanism:
        """The inverse of :meth:`arrays` and :meth:`config`."""
        return cls(
            **{k: np.asarray(arrays[k]) for k in ("center", "scale", "basis", "lift")},
            clip=float(config["clip"]),
            epsilon=float(config["epsilon"]),
            delta=float(config["delta"]),
            log_space=bool(config["log-space"]),
        )

    def release(self, embedding: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The (epsilon, delta)-DP release of one client's embedding (float32)."""
        return privatize_embedding(
            embedding,
            self.epsilon,
            self.delta,
            self.clip,
            rng,
            center=self.center,
            scale=self.scale,
            basis=self.basis,
            lift=self.lift,
            log_space=self.log_space,
        )


def public_mechanism(
    ckpt: Any,
    federation: Any,
    embedder: Any,
    *,
    epsilon: float,
    delta: float,
    clip: float = 0.0,
    seed: int = 0,
    reference_clients: int = 1000,
    reference_alpha: float = 0.3,
    clip_quantile: float = 0.9,
    ridge: float = 10.0,
    client_size: int = 200,
) -> PublicMechanism:
    """The mechanism the server ships, from its D_aux and the checkpoint only.

    ``clip`` 0 takes the ``clip_quantile`` of the reference clients' norms in
    the projected space: public, because the reference clients are the
    server's own synthetic ones.
    """
    from ripple_flwr.data import mixture_of, sample_dirichlet_clients

    images, comp = federation.aux_data()
    k = federation.num_components
    rng = np.random.default_rng([seed, _REFERENCE_KEY])
    ref_clients = sample_dirichlet_clients(
        comp, reference_clients, client_size, reference_alpha, rng, num_components=k
    )
    ref = embedder.embed_many([images[c] for c in ref_clients]).astype(np.float64)
    targets = np.stack([mixture_of(comp[c], k) for c in ref_clients])
    center = ckpt.model.feature_mean.double().cpu().numpy()
    scale = ckpt.model.feature_std.double().cpu().numpy()
    t = (np.sign(ref) * np.log1p(np.abs(ref)) - center) / scale
    mean_t, basis, lift = reference_projection(t, targets, ridge=ridge)
    if not clip:
        clip = float(np.quantile(np.linalg.norm((t - mean_t) @ basis, axis=1), clip_quantile))
    if not (clip > 0 and math.isfinite(clip)):
        raise ValueError(f"the clip bound must be a finite number > 0, got {clip}")
    return PublicMechanism(
        center=center + scale * mean_t,
        scale=scale,
        basis=basis,
        lift=lift,
        clip=float(clip),
        epsilon=float(epsilon),
        delta=float(delta),
    )


def noise_generator(node_config: dict[str, Any]) -> np.random.Generator:
    """A fresh generator seeded from the OS (secret), or from the node's ``dp-noise-seed``.

    The node operator, never the server, may fix the seed (reproducible
    simulations and benchmarks): a seed the server knows would void the
    guarantee.
    """
    seed = node_config.get(NOISE_SEED_KEY)
    return np.random.default_rng(None if seed is None else [int(seed), 0xD9])
