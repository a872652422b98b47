"""FedGWC: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients (``client.py``) train with plain SGD and
report each local step's batch loss.
"""

from __future__ import annotations

from ripple_flwr.methods.spec import MethodSpec
from ripple_flwr.settings import Option

# The train reply's extra record (the method's own, as SCAFFOLD's "control"): its steps'
# batch losses, under one key.
STEP_LOSSES = "step-losses"
LOSS_VALUES = "values"

FEDGWC_STEPS = Option(
    "fedgwc-steps",
    int,
    5,
    "FedGWC: step losses each client reports a round, its first S steps (one epoch of 160 "
    "images at batch 32 is 5; the authors' 7 local iterations)",
    low=1,
    high=1000,
)

FEDGWC_GAMMA = Option(
    "fedgwc-gamma",
    float,
    0.1,
    "FedGWC: RBF width of the affinity between clients' interaction vectors (authors' config)",
    low=0,
    low_open=True,
)

FEDGWC_EPS = Option(
    "fedgwc-eps",
    float,
    1e-5,
    "FedGWC: a cluster's interaction matrix has converged once the moving mean of its squared "
    "change stays below this (authors' config)",
    low=0,
    low_open=True,
)

FEDGWC_MAX_SCORE = Option(
    "fedgwc-max-score",
    float,
    1.0,
    "FedGWC: split a cluster only if the best split's Davies-Bouldin score is below this "
    "(authors' code: 1.0)",
    low=0,
    low_open=True,
)

SPECS = (
    MethodSpec(
        "fedgwc",
        "FedGWC: FedAvg per cluster; clusters split by the Gaussian-weighted interplay of losses",
        rank=20,
        models="clusters",
        exports="none",
        family="clustered",
        options=(FEDGWC_STEPS, FEDGWC_GAMMA, FEDGWC_EPS, FEDGWC_MAX_SCORE),
        benchmarks=("table2", "map"),
    ),
)
