"""PACFL's client side: its one-shot summary, the per-class subspaces of its training split.

Sent once, in the query round (summary kind ``method``). With ``pacfl-budget = per-class``
(the default): ``pacfl-p`` left singular vectors per class, in a fixed ``(C, p, d)`` block
(:func:`~ripple_flwr.aggregation.subspaces.class_subspaces`). With ``dirichlet``: the
authors' Dirichlet rule, ``pacfl-vectors`` spread over the classes by
:func:`~ripple_flwr.aggregation.subspaces.dirichlet_budget`, only the vectors sent (at most
``pacfl-vectors x d`` floats; :func:`~ripple_flwr.aggregation.subspaces.budget_subspaces`).
Its clients train with plain SGD (no ``rule`` here).
"""

from __future__ import annotations

import numpy as np

from ripple_flwr.aggregation.subspaces import budget_subspaces, class_subspaces
from ripple_flwr.methods.api import ClientDataView
from ripple_flwr.methods.pacfl.spec import PACFL_BUDGET, PACFL_P, PACFL_VECTORS
from ripple_flwr.settings import RunSettings


def summary(settings: RunSettings, data: ClientDataView) -> np.ndarray:
    """PACFL's per-class subspaces of the training split, flattened (float32)."""
    if PACFL_BUDGET.of(settings) == "dirichlet":
        budget = PACFL_VECTORS.of(settings)
        return budget_subspaces(data.x_train, data.y_train, data.num_classes, budget).reshape(-1)
    p = PACFL_P.of(settings)
    return class_subspaces(data.x_train, data.y_train, data.num_classes, p).reshape(-1)
