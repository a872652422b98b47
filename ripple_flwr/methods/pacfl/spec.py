"""PACFL: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients train with plain SGD and send, once, the
subspaces of their data (:func:`ripple_flwr.aggregation.subspaces.class_subspaces`).
"""

from __future__ import annotations

from ripple_flwr.methods import options as o
from ripple_flwr.methods.spec import MethodSpec
from ripple_flwr.settings import Option, RunSettings

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

PACFL_BUDGET = Option(
    "pacfl-budget",
    str,
    "per-class",
    "PACFL: how many vectors each class sends: per-class (pacfl-p for every class held, the "
    "authors' label splits) or dirichlet (the authors' rule for Dirichlet splits: "
    "pacfl-vectors spread over the classes, a dominant class weighing its raw count)",
    choices=("per-class", "dirichlet"),
)

PACFL_VECTORS = Option(
    "pacfl-vectors",
    int,
    20,
    "PACFL: with pacfl-budget = dirichlet, the vectors each client sends in all (the "
    "authors' budget: 20); the server refuses a reply with more",
    low=1,
    high=500,
)


def unread(settings: RunSettings) -> dict[str, str]:
    """PACFL's keys it does not read under these settings: one budget rule's key each, and
    the optimiser keys the chosen ``cluster-optimizer`` does not read."""
    out = o.optimizer_unread(settings)
    if PACFL_BUDGET.of(settings) == "dirichlet":
        return {**out, PACFL_P.key: "read only with pacfl-budget='per-class'"}
    return {**out, PACFL_VECTORS.key: "read only with pacfl-budget='dirichlet'"}


SPECS = (
    MethodSpec(
        "pacfl",
        "PACFL: clients send per-class SVD subspaces once, clustered by angle, FedAvg in each",
        rank=19,
        models="clusters",
        exports="none",
        family="clustered",
        options=(
            PACFL_P,
            PACFL_BETA,
            PACFL_LINKAGE,
            PACFL_BUDGET,
            PACFL_VECTORS,
            *o.OPTIMIZER_OPTIONS,
        ),
        unread=unread,
        benchmarks=("table2", "map"),
    ),
)
