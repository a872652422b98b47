"""FedProx: the registry entry and its options (light: clients import it too).

Its clients' rule is in ``client.py``, its server side in ``server.py``.
"""

from __future__ import annotations

from ripple_flwr.methods.spec import MethodSpec
from ripple_flwr.settings import Option

PROXIMAL_MU = Option(
    "proximal-mu", float, 0.01, "FedProx: clients add mu/2 ||w - w_global||^2", low=0
)

SPECS = (
    MethodSpec(
        "fedprox",
        "FedProx, Flower's class: FedAvg plus mu/2 ||w - w_global||^2 on the clients",
        rank=3,
        models="one",
        exports="global",
        family="global",
        options=(PROXIMAL_MU,),
    ),
)
