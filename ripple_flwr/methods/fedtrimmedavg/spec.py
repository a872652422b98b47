"""FedTrimmedAvg: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients train with plain SGD.
"""

from __future__ import annotations

from ripple_flwr.methods.spec import MethodSpec
from ripple_flwr.settings import Option

TRIMMED_BETA = Option(
    "trimmed-beta",
    float,
    0.2,
    "FedTrimmedAvg: share cut at each end",
    low=0,
    high=0.5,
    high_open=True,
)

SPECS = (
    MethodSpec(
        "fedtrimmedavg",
        "FedTrimmedAvg, Flower's class: coordinate-wise trimmed mean (robust)",
        rank=13,
        models="one",
        exports="global",
        family="global",
        options=(TRIMMED_BETA,),
    ),
)
