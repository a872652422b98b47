"""FLUX: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients train with plain SGD.
"""

from __future__ import annotations

from ripple_flwr.methods.spec import MethodSpec
from ripple_flwr.settings import Option

FLUX_START_ROUND = Option(
    "flux-start-round",
    int,
    3,
    "FLUX: the clustering test runs from this round on (official: server_round >= 3)",
    low=1,
    high=1_000_000,
)

FLUX_ACCURACY_DELTA = Option(
    "flux-accuracy-delta",
    float,
    0.06,
    "FLUX: cluster once an accuracy increase between evaluations is below this (official th_round)",
    low=-1,
    high=1,
)

FLUX_LATEST_FRACTION = Option(
    "flux-latest-fraction",
    float,
    0.8,
    "FLUX: ... or at the latest after this fraction of the rounds (official: 0.8)",
    low=0,
    high=1,
)

FLUX_EPS_SCALING = Option(
    "flux-eps-scaling",
    float,
    1.0,
    "FLUX: DBSCAN eps = the knee of the nearest-neighbour distances x this (official: 1.0)",
    low=0,
    low_open=True,
    high=1e6,
)

# The keys of FLUX's side query (query.method): whether the client may read its labels, and
# how many latent features its descriptor keeps. Written by its server, read by client.py.
LABELLED = "labelled"
LATENT_DIM = "latent-dim"

FLUX_LATENT_DIM = Option(
    "flux-latent-dim",
    int,
    0,
    "FLUX: dimensions latent features are projected to (0: the number of classes, official)",
    low=0,
    high=200,
)

SPECS = (
    MethodSpec(
        "flux",
        "FLUX: FedAvg, then DBSCAN over latent-moment descriptors; unseen clients to the nearest",
        rank=18,
        models="clusters",
        exports="descriptors",
        family="clustered",
        options=(
            FLUX_START_ROUND,
            FLUX_ACCURACY_DELTA,
            FLUX_LATEST_FRACTION,
            FLUX_EPS_SCALING,
            FLUX_LATENT_DIM,
        ),
        benchmarks=("table2", "map"),
    ),
)
