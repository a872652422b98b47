"""FeSEM: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients train with plain SGD.
"""

from __future__ import annotations

from ripple_flwr.methods import options as o
from ripple_flwr.methods.spec import MethodSpec
from ripple_flwr.settings import Option

FESEM_UPDATE_EVERY = Option(
    "fesem-update-every",
    int,
    10,
    "FeSEM: rounds between K-means reassignments of the clients (the authors' configs: 10)",
    low=1,
    high=1_000_000,
)

FESEM_POINTS = Option(
    "fesem-points",
    str,
    "model",
    "FeSEM: a client's K-means point: model (its last returned model's layer, the authors') "
    "or update (that model minus the centre it was sent)",
    choices=("model", "update"),
)

FESEM_KMEANS_ITERS = Option(
    "fesem-kmeans-iters",
    int,
    1,  # the authors' KmeanModel: one Lloyd iteration at every later reassignment
    "FeSEM: Lloyd iterations of each reassignment's K-means (the authors': 1; 0 = until it "
    "converges)",
    low=0,
    high=10_000,
)

FESEM_SAMPLING = Option(
    "fesem-sampling",
    str,
    "global",
    "FeSEM: global (clients-per-round from the whole federation, every method's cost) or "
    "per-cluster (up to clients-per-round inside every cluster of 2+ members, the authors'; "
    "up to K times the cost)",
    choices=("global", "per-cluster"),
)

FESEM_LAYER = Option(
    "fesem-layer",
    str,
    "last",
    "FeSEM: what clients are clustered by: last (the last weight matrix, as the authors), "
    "all, or a model state-dict key",
)

SPECS = (
    MethodSpec(
        "fesem",
        "FeSEM: K centres from one initial model; K-means over the clients' models reassigns",
        rank=16,
        models="clusters",
        exports="none",
        family="clustered",
        sweeps_k=True,
        options=(
            FESEM_UPDATE_EVERY,
            FESEM_LAYER,
            FESEM_POINTS,
            FESEM_KMEANS_ITERS,
            FESEM_SAMPLING,
            *o.OPTIMIZER_OPTIONS,
        ),
        unread=o.optimizer_unread,
        benchmarks=("table2",),
    ),
)
