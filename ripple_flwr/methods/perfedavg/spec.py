"""Per-FedAvg: the registry entry and its options (light: clients import it too).

Its clients' rule is in ``client.py``, its server side in ``server.py``.
"""

from __future__ import annotations

from ripple_flwr.methods.spec import MethodSpec
from ripple_flwr.settings import Option

PERFEDAVG_ALPHA = Option(
    "perfedavg-alpha",
    float,
    0.01,
    "Per-FedAvg: inner (personalisation) step alpha (paper)",
    low=0,
    low_open=True,
)
PERFEDAVG_BETA = Option(
    "perfedavg-beta",
    float,
    0.01,
    "Per-FedAvg: plain-SGD meta step beta (PFLlib: beta = the client lr, 0.01 here)",
    low=0,
    low_open=True,
)

SPECS = (
    MethodSpec(
        "perfedavg",
        "Per-FedAvg (first order): MAML steps, scored after one alpha step on the train split",
        rank=10,
        models="one",
        exports="global",
        family="personalised",
        options=(PERFEDAVG_ALPHA, PERFEDAVG_BETA),
        benchmarks=("map",),
    ),
)
