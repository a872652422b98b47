"""FedYogi: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients train with plain SGD.
"""

from __future__ import annotations

from ripple_flwr.methods import options as o
from ripple_flwr.methods.spec import MethodSpec

SPECS = (
    MethodSpec(
        "fedyogi",
        "FedYogi, Flower's class: Yogi on the server over the mean update",
        rank=6,
        models="one",
        exports="global",
        family="global",
        options=(o.FEDOPT_ETA, o.FEDOPT_BETA1, o.FEDOPT_BETA2, o.FEDOPT_TAU),
        benchmarks=("map",),
    ),
)
