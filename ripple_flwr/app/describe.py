"""FLUX's client side: the descriptor of the node's training split under the model it is sent.

``query.describe``: ``arrays`` (the model the descriptor is computed with) and
``config`` (``labelled``: whether the class-conditional part is wanted,
``latent-dim``: k); reply ``summary`` (ArrayRecord with ``phi``: the float32
statistics of :class:`~ripple_flwr.aggregation.descriptors.Layout`). An unseen
client is asked with ``labelled`` false and reads no label.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict

from ripple_flwr.aggregation.descriptors import client_statistics
from ripple_flwr.app.client import (
    _data,
    _limit_threads,
    _model_for,
    answers_data_errors,
    device,
    node_data,
)
from ripple_flwr.app.client_data import ClientData
from ripple_flwr.app.records import record_to_state
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


@answers_data_errors
def handle_describe(msg: Message, context: Context) -> Message:
    """Reply with the descriptor statistics under the received model."""
    settings, data = node_data(context)
    config = msg.content.config_records.get("config", ConfigRecord())
    state = record_to_state(msg.content.array_records["arrays"])
    phi = client_descriptor(
        settings,
        data,
        state,
        labelled=bool(config.get("labelled", True)),
        k=int(config.get("latent-dim", data.num_classes)),
    )
    return Message(RecordDict({"summary": ArrayRecord({"phi": Array(phi)})}), reply_to=msg)
