"""FLUX's client side: the descriptor of the node's training split under the model it is sent.

The reply's ``phi`` is the float32 statistics of
:class:`~ripple_flwr.aggregation.descriptors.Layout`; an unseen client is asked with
``labelled`` false and reads no label (the request: ``query.describe`` in
:mod:`ripple_flwr.app.protocol.messages`).
"""

from __future__ import annotations

import numpy as np

from ripple_flwr.aggregation.descriptors import client_statistics
from ripple_flwr.app.client.data import ClientData
from ripple_flwr.app.client.work import _data, _limit_threads, _model_for, device
from ripple_flwr.settings import RunSettings
from ripple_flwr.training.latent import latent_features
from ripple_flwr.training.models import set_state


def client_descriptor(
    settings: RunSettings,
    who: int | ClientData,
    state: dict[str, np.ndarray],
    *,
    labelled: bool,
    k: int,
) -> np.ndarray:
    """The statistics FLUX's client sends, from its training split's latent features."""
    _limit_threads(settings)
    data = _data(settings, who)
    model = _model_for(settings, data.image_shape, data.num_classes)
    set_state(model, state)
    z = latent_features(model, data.x_train, device=device())
    labels = np.asarray(data.y_train) if labelled else None
    return client_statistics(z, labels, data.num_classes, k).astype(np.float32)
