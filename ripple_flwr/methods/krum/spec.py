"""Krum: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients train with plain SGD.
"""

from __future__ import annotations

from ripple_flwr.methods.spec import MethodSpec
from ripple_flwr.settings import Option

KRUM_MALICIOUS = Option(
    "krum-malicious", int, 1, "Krum: malicious clients assumed per round", low=0, high=100_000
)

SPECS = (
    MethodSpec(
        "krum",
        "Krum, Flower's class: the reply closest to its neighbours (robust)",
        rank=14,
        models="one",
        exports="global",
        family="global",
        options=(KRUM_MALICIOUS,),
    ),
)
