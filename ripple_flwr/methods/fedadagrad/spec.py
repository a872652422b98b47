"""FedAdagrad: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients train with plain SGD.
"""

from __future__ import annotations

from ripple_flwr.methods import options as o
from ripple_flwr.methods.spec import MethodSpec

SPECS = (
    MethodSpec(
        "fedadagrad",
        "FedAdagrad, Flower's class: Adagrad on the server over the mean update",
        rank=7,
        models="one",
        exports="global",
        family="global",
        options=(o.FEDOPT_ETA, o.FEDOPT_TAU),
    ),
)
