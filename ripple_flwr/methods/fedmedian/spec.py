"""FedMedian: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients train with plain SGD.
"""

from __future__ import annotations

from ripple_flwr.methods.spec import MethodSpec

SPECS = (
    MethodSpec(
        "fedmedian",
        "FedMedian, Flower's class: coordinate-wise median of the replies (robust)",
        rank=12,
        models="one",
        exports="global",
        family="global",
    ),
)
