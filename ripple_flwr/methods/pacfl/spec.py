"""PACFL: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients train with plain SGD and send, once, the
subspaces of their data (:func:`ripple_flwr.aggregation.subspaces.class_subspaces`).
"""

from __future__ import annotations

from ripple_flwr.methods import options as o
from ripple_flwr.methods.spec import MethodSpec
from ripple_flwr.settings import Option

PACFL_P = Option(
    "pacfl-p",
    int,
    3,
    "PACFL: left singular vectors each client sends per class it holds (the authors' scripts: "
    "3; their argparse default: 5)",
    low=1,
    high=50,
)

PACFL_BETA = Option(
    "pacfl-beta",
    float,
    8.0,
    "PACFL: merge clusters while their linkage distance (smallest angle between the clients' "
    "subspace vectors, degrees) is <= this; tuned on an unscored federation "
    "(docs/baselines.md#pacfl)",
    low=0,
    high=90,
)

PACFL_LINKAGE = Option(
    "pacfl-linkage",
    str,
    "average",
    "PACFL: linkage of the agglomerative clustering, the authors' names: average (their "
    "default: the two merged rows' unweighted mean, WPGMA), maximum (complete), minimum (single)",
    choices=("average", "maximum", "minimum"),
)

SPECS = (
    MethodSpec(
        "pacfl",
        "PACFL: clients send per-class SVD subspaces once, clustered by angle, FedAvg in each",
        rank=19,
        models="clusters",
        exports="none",
        family="clustered",
        options=(PACFL_P, PACFL_BETA, PACFL_LINKAGE, *o.OPTIMIZER_OPTIONS),
        unread=o.optimizer_unread,
        benchmarks=("table2", "map"),
    ),
)
