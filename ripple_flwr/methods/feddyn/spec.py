"""FedDyn: the registry entry and its options (light: clients import it too).

Its clients' rule is in ``client.py``, its server side in ``server.py``.
"""

from __future__ import annotations

from ripple_flwr.methods import options as o
from ripple_flwr.methods.spec import MethodSpec
from ripple_flwr.settings import Option

FEDDYN_ALPHA = Option(
    "feddyn-alpha",
    float,
    0.01,
    "FedDyn: alpha of the linear + proximal terms (paper)",
    low=0,
    low_open=True,
)
FEDDYN_GRAD_CLIP = Option(
    "feddyn-grad-clip",
    float,
    o.REFERENCE_GRAD_CLIP,
    "FedDyn: clip each step's gradient to this L2 norm, 0 = off (Acar et al.'s code: 10)",
    low=0,
)

SPECS = (
    MethodSpec(
        "feddyn",
        "FedDyn: clients add -<g_k, theta> + alpha/2 ||theta - theta_prev||^2, server state h",
        rank=9,
        models="one",
        exports="global",
        family="global",
        options=(FEDDYN_ALPHA, FEDDYN_GRAD_CLIP),
    ),
)
