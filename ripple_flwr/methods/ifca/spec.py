"""IFCA: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients train with plain SGD.
"""

from __future__ import annotations

from ripple_flwr.methods import options as o
from ripple_flwr.methods.spec import MethodSpec
from ripple_flwr.settings import Option

IFCA_INIT_BALANCE = Option(
    "ifca-init-balance",
    float,
    0.0,
    "IFCA: re-draw the K initial models until each is chosen by >= this / K of the clients "
    "(the original: 0.4 at K=4; 0 = off, the default: measured no better)",
    low=0,
    high=1,
)

IFCA_INIT_DRAWS = Option(
    "ifca-init-draws",
    int,
    20,
    "IFCA: at most this many draws of the K initial models (then the most balanced is kept)",
    low=1,
    high=10_000,
)

SPECS = (
    MethodSpec(
        "ifca",
        "IFCA: all K models to each client, it trains the lowest-loss one (K x FedAvg down)",
        rank=15,
        models="clusters",
        exports="none",
        family="clustered",
        sweeps_k=True,
        options=(IFCA_INIT_BALANCE, IFCA_INIT_DRAWS, *o.OPTIMIZER_OPTIONS),
        unread=o.optimizer_unread,
        benchmarks=("table2", "map"),
    ),
)
