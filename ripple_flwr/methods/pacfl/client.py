"""PACFL's client side: its one-shot summary, the per-class subspaces of its training split.

Sent once, in the query round (summary kind ``method``): ``pacfl-p`` left singular vectors
per class (:func:`~ripple_flwr.aggregation.subspaces.class_subspaces`). Its clients train
with plain SGD (no ``rule`` here).
"""

from __future__ import annotations

import numpy as np

from ripple_flwr.aggregation.subspaces import class_subspaces
from ripple_flwr.methods.api import ClientDataView
from ripple_flwr.methods.pacfl.spec import PACFL_P
from ripple_flwr.settings import RunSettings


def summary(settings: RunSettings, data: ClientDataView) -> np.ndarray:
    """PACFL's per-class subspaces of the training split, flattened (float32)."""
    p = PACFL_P.of(settings)
    return class_subspaces(data.x_train, data.y_train, data.num_classes, p).reshape(-1)
