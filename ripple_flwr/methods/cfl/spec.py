"""CFL: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients train with plain SGD.
"""

from __future__ import annotations

from ripple_flwr.methods import options as o
from ripple_flwr.methods.spec import MethodSpec
from ripple_flwr.settings import Option

CFL_WARMUP_FRACTION = Option(
    "cfl-warmup-fraction",
    float,
    0.2,
    "CFL: no split before round ceil(this x num-server-rounds) (paper: 200 of 1000 rounds)",
    low=0,
    high=1,
)

CFL_EPS1 = Option(
    "cfl-eps1",
    float,
    0.35,
    "CFL: split when the mean update norm is below this ... (reference code: 0.4)",
    low=0,
    low_open=True,
)

CFL_EPS2 = Option(
    "cfl-eps2",
    float,
    0.9,
    "CFL: ... and the largest client update norm above this (reference code: 1.6, never "
    "reached on the paper's protocol)",
    low=0,
    low_open=True,
)

CFL_MAX_SIMILARITY = Option(
    "cfl-max-similarity",
    float,
    1.0,
    "CFL: refuse a split whose largest cross-side cosine similarity is >= this (paper: 0.5; "
    "the reference code: no such test, 1.0)",
    low=-1,
    high=1,
)

CFL_MAX_CLUSTERS = Option(
    "cfl-max-clusters", int, 10, "CFL: at most this many clusters (paper: 10)", low=1, high=100
)

CFL_WEIGHTING = Option(
    "cfl-weighting",
    str,
    "examples",
    "CFL: how members' updates are weighted in the split test's mean and in each cluster's "
    "new model: examples (as every method here) or uniform (the reference code)",
    choices=("examples", "uniform"),
)

SPECS = (
    MethodSpec(
        "cfl",
        "CFL: one model, split by cosine similarity of updates when the joint one stalls",
        rank=17,
        models="clusters",
        exports="none",
        family="clustered",
        options=(
            CFL_WARMUP_FRACTION,
            CFL_EPS1,
            CFL_EPS2,
            CFL_MAX_SIMILARITY,
            CFL_MAX_CLUSTERS,
            CFL_WEIGHTING,
            *o.OPTIMIZER_OPTIONS,
        ),
        unread=o.optimizer_unread,
        benchmarks=("table2", "map"),
    ),
)
