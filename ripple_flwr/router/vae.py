"""The GMM-VAE that turns a client embedding into soft cluster weights (spec section 3).

Generative model: c ~ uniform(K), z | c ~ N(mu_c, diag sigma_c^2), Phi | z
Gaussian around a decoder mean. Inference: q(c | Phi) = softmax(f(Phi)) and
q(z | Phi, c) = N(mu(Phi, c), diag sigma^2(Phi, c)). The cluster weights of a
client are q(c | Phi).

Embeddings are normalised inside the model (signed log1p, then per-feature
standardisation with statistics of the synthetic bank), so a checkpoint
carries everything inference needs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

SUPERVISED_DIVERGENCES = ("kl_qy", "kl_yq")
_EPS = 1e-6


@dataclass(frozen=True)
class GMMVAEConfig:
    """Architecture (paper Table 5 defaults)."""

    input_dim: int
    num_components: int = 10
    hidden: tuple[int, ...] = (1024, 512, 256, 128)
    head_hidden: int = 64
    latent_dim: int = 32

    def __post_init__(self) -> None:
        if self.num_components < 2:
            raise ValueError(f"K (num-components) must be >= 2, got {self.num_components}")
        if self.input_dim < 1 or self.latent_dim < 1 or not self.hidden:
            raise ValueError(f"invalid GMM-VAE sizes: {self}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> GMMVAEConfig:
        return cls(**{**d, "hidden": tuple(d["hidden"])})


@dataclass(frozen=True)
class LossWeights:
    """Weights of the loss terms (paper Table 5: lambda_sup 5.0, lambda_kl 0.05)."""

    lambda_sup: float = 5.0
    lambda_kl: float = 0.05
    lambda_rec: float = 1.0
    supervised: str = "kl_yq"

    def __post_init__(self) -> None:
        if self.supervised not in SUPERVISED_DIVERGENCES:
            raise ValueError(
                f"supervised divergence must be one of {SUPERVISED_DIVERGENCES}, "
                f"got {self.supervised!r}"
            )
        if min(self.lambda_sup, self.lambda_kl, self.lambda_rec) < 0:
            raise ValueError("loss weights must be non-negative")


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class GMMVAE(nn.Module):
    """Encoder, cluster head, conditional latent head, Gaussian-mixture prior, decoder."""

    def __init__(self, config: GMMVAEConfig) -> None:
        super().__init__()
        self.config = config
        k, dz, h = config.num_components, config.latent_dim, list(config.hidden)
        self.register_buffer("feature_mean", torch.zeros(config.input_dim))
        self.register_buffer("feature_std", torch.ones(config.input_dim))
        self.encoder = nn.Sequential(_mlp([config.input_dim, *h]), nn.ReLU())
        self.cluster_head = _mlp([h[-1], config.head_hidden, k])
        # q(z | Phi, c): the encoder state and a one-hot c, for all K components at once.
        self.latent_head = _mlp([h[-1] + k, h[-1], 2 * dz])
        # No ``* 1.0`` (an identity): on the meta device, where load_checkpoint checks shapes,
        # that multiply imported torch._dynamo, about a second of every run that loads one.
        self.prior_mean = nn.Parameter(torch.randn(k, dz))
        self.prior_logvar = nn.Parameter(torch.zeros(k, dz))
        self.decoder = _mlp([dz, *reversed(h), config.input_dim])

    # -- normalisation -----------------------------------------------------------------
    @staticmethod
    def squash(phi: torch.Tensor) -> torch.Tensor:
        """Signed log1p: scattering energies span decades; this evens them out."""
        return torch.sign(phi) * torch.log1p(phi.abs())

    def set_normalisation(self, embeddings: np.ndarray | torch.Tensor) -> None:
        """Per-feature statistics of squashed embeddings (from the synthetic bank)."""
        x = self.squash(torch.as_tensor(embeddings, dtype=torch.float32))
        self.feature_mean.copy_(x.mean(dim=0))
        self.feature_std.copy_(x.std(dim=0).clamp_min(1e-4))

    def normalise(self, phi: torch.Tensor) -> torch.Tensor:
        return (self.squash(phi) - self.feature_mean) / self.feature_std

    # -- inference ---------------------------------------------------------------------
    def cluster_logits(self, phi: torch.Tensor) -> torch.Tensor:
        return self.cluster_head(self.encoder(self.normalise(phi)))

    @torch.no_grad()
    def posterior(self, phi: torch.Tensor) -> torch.Tensor:
        """q(c | Phi): one forward pass of the frozen encoder and cluster head."""
        return F.softmax(self.cluster_logits(phi), dim=-1)

    def forward(self, phi: torch.Tensor) -> dict[str, torch.Tensor]:
        x = self.normalise(phi)
        h = self.encoder(x)
        logits = self.cluster_head(h)
        b, k = logits.shape
        onehot = torch.eye(k, device=phi.device, dtype=h.dtype).expand(b, k, k)
        stats = self.latent_head(torch.cat([h[:, None, :].expand(b, k, h.shape[1]), onehot], -1))
        z_mean, z_logvar = stats.chunk(2, dim=-1)  # (B, K, dz) each
        return {"x": x, "logits": logits, "z_mean": z_mean, "z_logvar": z_logvar.clamp(-8, 8)}


def supervised_divergence(log_q: torch.Tensor, y: torch.Tensor, kind: str) -> torch.Tensor:
    """KL(q || y) (the paper's term, y guarded by eps) or KL(y || q), per client."""
    q = log_q.exp()
    if kind == "kl_qy":
        return (q * (log_q - torch.log(y + _EPS))).sum(-1)
    return (y * (torch.log(y + _EPS) - log_q)).sum(-1)


def gmm_vae_loss(
    model: GMMVAE,
    phi: torch.Tensor,
    y: torch.Tensor,
    weights: LossWeights,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """ELBO terms + supervised alignment; returns the loss and its parts.

    The parts are detached 0-d tensors on the loss's device, not floats:
    reading them every step would stall a GPU once per step.

    Reconstruction is the squared error *averaged per dimension* of the
    normalised embedding (a sum over P ~ 2,000-40,000 dimensions would drown
    the K-way supervised term). It decodes one z per client, drawn from
    q(z | Phi, c) at a c sampled from q(c | Phi), instead of decoding all K.
    """
    out = model(phi)
    log_q = F.log_softmax(out["logits"], dim=-1)
    q = log_q.exp()
    b, k = q.shape
    # Reconstruction at one sampled component per client (reparameterised z).
    c = torch.multinomial(q.detach(), 1, generator=generator)[:, 0]
    rows = torch.arange(b, device=phi.device)
    mean, logvar = out["z_mean"][rows, c], out["z_logvar"][rows, c]
    noise = torch.randn(mean.shape, generator=generator, device=phi.device, dtype=mean.dtype)
    z = mean + (0.5 * logvar).exp() * noise
    rec = F.mse_loss(model.decoder(z), out["x"])
    # sum_c q(c) KL(q(z | Phi, c) || p(z | c)), closed form for diagonal Gaussians.
    pm, plv = model.prior_mean[None], model.prior_logvar[None]
    kl_z = 0.5 * (
        plv - out["z_logvar"] + (out["z_logvar"].exp() + (out["z_mean"] - pm) ** 2) / plv.exp() - 1
    ).sum(-1)
    kl_z = (q * kl_z).sum(-1).mean()
    kl_c = (q * log_q).sum(-1).mean() + math.log(k)
    sup = supervised_divergence(log_q, y, weights.supervised).mean()
    loss = weights.lambda_rec * rec + weights.lambda_kl * (kl_z + kl_c) + weights.lambda_sup * sup
    parts = {"rec": rec, "kl_z": kl_z, "kl_c": kl_c, "sup": sup}
    parts = {k: v.detach() for k, v in parts.items()}
    return loss, parts


def prune_weights(w: np.ndarray, threshold: float) -> np.ndarray:
    """Zero weights below ``threshold`` and renormalise (softmax never gives exact zeros).

    A row whose every weight is below the threshold keeps its argmax.
    """
    w = np.asarray(w, dtype=np.float64)
    if threshold <= 0:
        return w
    kept = np.where(w >= threshold, w, 0.0)
    empty = kept.sum(axis=1) == 0
    if np.any(empty):
        kept[empty, w[empty].argmax(axis=1)] = 1.0
    return kept / kept.sum(axis=1, keepdims=True)
