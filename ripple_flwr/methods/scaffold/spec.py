"""SCAFFOLD: the registry entry and its options (light: clients import it too).

Its clients' rule is in ``client.py``, its server side in ``server.py``.
"""

from __future__ import annotations

from ripple_flwr.methods import options as o
from ripple_flwr.methods.spec import MethodSpec
from ripple_flwr.settings import Option

SCAFFOLD_GRAD_CLIP = Option(
    "scaffold-grad-clip",
    float,
    o.REFERENCE_GRAD_CLIP,
    "SCAFFOLD: clip each corrected gradient to this L2 norm, 0 = off (Acar et al.'s code: 10)",
    low=0,
)

SPECS = (
    MethodSpec(
        "scaffold",
        "SCAFFOLD: server control c and client controls c_i correct every local step",
        rank=8,
        models="one",
        exports="global",
        family="global",
        options=(SCAFFOLD_GRAD_CLIP,),
    ),
)
