"""FedAvgM: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients train with plain SGD.
"""

from __future__ import annotations

# Its option is shared (cluster-optimizer = fedavgm reads it too): declared in options.py.
from ripple_flwr.methods.options import FEDAVGM_MOMENTUM
from ripple_flwr.methods.spec import MethodSpec

__all__ = ["FEDAVGM_MOMENTUM", "SPECS"]

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
