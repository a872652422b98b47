"""FedAvg: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients train with plain SGD.
"""

from __future__ import annotations

from ripple_flwr.methods.spec import MethodSpec

SPECS = (
    MethodSpec(
        "fedavg",
        "FedAvg, Flower's class: one global model",
        rank=2,
        models="one",
        exports="global",
        family="global",
        benchmarks=("table2", "map"),
    ),
)
