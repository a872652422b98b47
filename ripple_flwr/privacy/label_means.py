"""Differential privacy for the class-conditional summary: clipped, noised per-label means.

A class-conditional client sends, for each label it keeps (``n_y >= min-label-count``
images), the mean image and the mean pixel variance of those images. With
``label-dp-epsilon`` set, each image is first scaled to an L2 norm of at most
``label-dp-clip`` (pixels stay in [0, 1]), and each label's release gets Gaussian noise of
the analytic Gaussian mechanism (:func:`~ripple_flwr.privacy.mechanism.gaussian_sigma`):

- the mean: replacing one of the ``n_y`` images moves it by at most ``2 clip / n_y`` in L2;
- the variance (the mean over pixels of the per-pixel variance of pixels in [0, 1]):
  replacing one image moves it by at most ``3 / n_y``.

Each takes half of (epsilon, delta) (basic composition). An image belongs to one label
only, so the labels' releases compose in parallel: the block is (epsilon, delta)-DP for
one image replaced, **given the counts**: the counts (the label histogram above the
minimum) are sent exactly and are not protected. The server knows every noise scale from
the public parameters and the counts, and reads the noisy block accordingly
(:func:`~ripple_flwr.aggregation.concepts.read_blocks`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ripple_flwr.privacy.mechanism import check_dp_params, gaussian_sigma

VARIANCE_SENSITIVITY = 3.0  # times 1 / n_y: one image of pixels in [0, 1] replaced


@dataclass(frozen=True)
class LabelMechanism:
    """The public parameters of the per-label release."""

    epsilon: float
    delta: float
    clip: float

    def __post_init__(self) -> None:
        check_dp_params(self.epsilon, self.delta, self.clip)

    @classmethod
    def of(
        cls, epsilon: float, delta: float, clip: float, image_shape: tuple[int, ...]
    ) -> LabelMechanism | None:
        """The run's release from its keys: ``None`` when ``epsilon`` is 0 (off); a ``clip``
        of 0 is :func:`default_clip` (nothing clipped)."""
        if not epsilon:
            return None
        return cls(float(epsilon), float(delta), float(clip) or default_clip(image_shape))

    def clip_images(self, images: np.ndarray) -> np.ndarray:
        """Each image scaled to an L2 norm of at most :attr:`clip`."""
        return clip_images(images, self.clip)

    def sigmas(self, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Noise sds ``(mean's pixels, variance)`` for labels of these counts (0 where 0)."""
        n = np.asarray(counts, dtype=np.float64)
        mean_sd, var_sd = np.zeros_like(n), np.zeros_like(n)
        cache: dict[float, tuple[float, float]] = {}
        for idx in zip(*np.nonzero(n > 0), strict=True):
            k = float(n[idx])
            if k not in cache:
                cache[k] = (
                    gaussian_sigma(self.epsilon / 2, self.delta / 2, 2.0 * self.clip / k),
                    gaussian_sigma(self.epsilon / 2, self.delta / 2, VARIANCE_SENSITIVITY / k),
                )
            mean_sd[idx], var_sd[idx] = cache[k]
        return mean_sd, var_sd

    def release(self, block: np.ndarray, num_classes: int, rng: np.random.Generator) -> np.ndarray:
        """The noisy block of a clean one made from clipped images (counts unchanged)."""
        c = int(num_classes)
        out = np.asarray(block, dtype=np.float64).copy()
        counts = out[:c]
        mean_sd, var_sd = self.sigmas(counts)
        d = (len(out) - 2 * c) // c
        means = out[2 * c :].reshape(c, d)
        kept = counts > 0
        out[c : 2 * c] += np.where(kept, rng.normal(size=c) * var_sd, 0.0)
        means += np.where(kept[:, None], rng.normal(size=(c, d)) * mean_sd[:, None], 0.0)
        return out.astype(np.float32)


def clip_images(images: np.ndarray, clip: float) -> np.ndarray:
    """Each image scaled to an L2 norm of at most ``clip`` (pixels in [0, 1] stay there)."""
    x = np.asarray(images, dtype=np.float64)
    flat = x.reshape(len(x), -1)
    norms = np.linalg.norm(flat, axis=1)
    scale = np.minimum(1.0, clip / np.maximum(norms, 1e-12))
    return (flat * scale[:, None]).reshape(x.shape)


def default_clip(image_shape: tuple[int, ...]) -> float:
    """The largest L2 norm of an image of pixels in [0, 1]: no image is changed."""
    return math.sqrt(float(np.prod(image_shape)))
