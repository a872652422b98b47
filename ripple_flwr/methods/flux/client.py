"""FLUX's client side: its descriptor of the node's training split under the model it is sent.

The answer to FLUX's side query (``query.method``): the float32 statistics of
:class:`~ripple_flwr.aggregation.descriptors.Layout` from the training split's latent
features. An unseen client is asked with ``labelled`` false and reads no label. Its
clients train with plain SGD (no ``rule`` here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ripple_flwr.aggregation.descriptors import client_statistics
from ripple_flwr.methods.api import ClientDataView
from ripple_flwr.methods.flux.spec import LABELLED, LATENT_DIM
from ripple_flwr.settings import RunSettings
from ripple_flwr.training.latent import latent_features


def answer(
    settings: RunSettings,
    data: ClientDataView,
    model: Any,
    config: Mapping[str, Any],
    device: str,
) -> np.ndarray:
    """The statistics FLUX's client sends, from its training split's latent features."""
    labelled, k = bool(config[LABELLED]), int(config[LATENT_DIM])
    z = latent_features(model, data.x_train, device=device)
    labels = np.asarray(data.y_train) if labelled else None
    return client_statistics(z, labels, data.num_classes, k).astype(np.float32)
