"""FedAvgM: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients train with plain SGD.
"""

from __future__ import annotations

from ripple_flwr.methods.spec import MethodSpec
from ripple_flwr.settings import Option

FEDAVGM_MOMENTUM = Option(
    "fedavgm-momentum", float, 0.9, "FedAvgM: server momentum beta", low=0, high=1, high_open=True
)

SPECS = (
    MethodSpec(
        "fedavgm",
        "FedAvgM, Flower's class: the mean update applied with server momentum",
        rank=5,
        models="one",
        exports="global",
        family="global",
        options=(FEDAVGM_MOMENTUM,),
    ),
)
