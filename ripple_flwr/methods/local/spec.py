"""local-only: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients train with plain SGD.
"""

from __future__ import annotations

from ripple_flwr.methods.spec import MethodSpec

SPECS = (
    MethodSpec(
        "local",
        "local-only: each client trains alone, only in the rounds it is sampled",
        rank=21,
        models="per-client",
        exports="none",
        family="personalised",
        benchmarks=("map",),
    ),
)
