"""Ripple's client side: the class-conditional summary (``class-conditional = true``).

Without that option Ripple's clients send the paper's label-free summary (the WST
embedding, or the mean image for mean unmixing), which the generic client computes; with
it they send this folder's own summary, once, in the query round (summary kind
``method``): the label-free summary followed by the per-label block of
:func:`~ripple_flwr.aggregation.concepts.label_block` over the **training split** (counts,
pixel variances and mean images of the labels with at least ``min-label-count`` images).
Its clients train with plain SGD (no ``rule`` here).
"""

from __future__ import annotations

import numpy as np

from ripple_flwr.aggregation.concepts import label_block
from ripple_flwr.methods.api import ClientDataView
from ripple_flwr.methods.ripple.spec import (
    LABEL_DP_CLIP,
    LABEL_DP_DELTA,
    LABEL_DP_EPSILON,
    MIN_LABEL_COUNT,
)
from ripple_flwr.privacy.label_means import LabelMechanism
from ripple_flwr.router.run_embedding import embedder_key, run_embedder
from ripple_flwr.settings import RunSettings
from ripple_flwr.wst.embedder import SpectralEmbedder

_EMBEDDERS: dict[tuple, SpectralEmbedder] = {}  # this process's, by embedder_key


def _embedder(settings: RunSettings, image_shape: tuple) -> SpectralEmbedder:
    """The process's embedder for these settings (scattering filters built once)."""
    key = embedder_key(settings, image_shape)
    if key not in _EMBEDDERS:
        _EMBEDDERS.clear()  # one run's at a time
        _EMBEDDERS[key] = run_embedder(settings, image_shape)
    return _EMBEDDERS[key]


def label_free(settings: RunSettings, images: np.ndarray, image_shape: tuple) -> np.ndarray:
    """The paper's summary of these images: the mean image for mean unmixing, else the WST
    embedding Phi (float32)."""
    if settings.embedding.router == "mean-unmixing":
        return images.reshape(len(images), -1).mean(axis=0).astype(np.float32)
    return _embedder(settings, image_shape).embed(images).astype(np.float32)


def label_mechanism(settings: RunSettings, image_shape: tuple) -> LabelMechanism | None:
    """The run's per-label DP release (``None``: ``label-dp-epsilon`` 0, off)."""
    return LabelMechanism.of(
        LABEL_DP_EPSILON.of(settings),
        LABEL_DP_DELTA.of(settings),
        LABEL_DP_CLIP.of(settings),
        image_shape,
    )


def summary(settings: RunSettings, data: ClientDataView) -> np.ndarray:
    """The label-free summary of every image, then the per-label block of the training split
    (with label DP: of the clipped images, noised with a secret generator)."""
    mech = label_mechanism(settings, data.image_shape)
    count = MIN_LABEL_COUNT.of(settings)
    block = label_block(data.x_train, data.y_train, data.num_classes, count, mech)
    return np.concatenate([label_free(settings, data.images, data.image_shape), block])
