"""pFedMe: the registry entry and its options (light: clients import it too).

Its clients' rule is in ``client.py``, its server side in ``server.py``.
"""

from __future__ import annotations

from ripple_flwr.methods.spec import MethodSpec
from ripple_flwr.settings import Option

PFEDME_BETA = Option(
    "pfedme-beta",
    float,
    1.0,
    "pFedMe: server mixing beta (1 = mean of local models)",
    low=0,
    high=2,
    low_open=True,
)

PFEDME_LAMBDA = Option(
    "pfedme-lambda", float, 15.0, "pFedMe: Moreau-envelope lambda (paper)", low=0, low_open=True
)
PFEDME_INNER_STEPS = Option(
    "pfedme-inner-steps",
    int,
    5,
    "pFedMe: K inner steps for the personal model (paper)",
    low=1,
    high=1000,
)
PFEDME_PERSONAL_LR = Option(
    "pfedme-personal-lr",
    float,
    0.09,
    "pFedMe: inner solver's step (pFedMe paper, MNIST)",
    low=0,
    low_open=True,
)
PFEDME_MU = Option(
    "pfedme-mu",
    float,
    1e-3,
    "pFedMe: L2 term mu of the inner solve (the authors' and PFLlib's optimiser: 1e-3)",
    low=0,
)

SPECS = (
    MethodSpec(
        "pfedme",
        "pFedMe: Moreau-envelope personal models theta_tilde, server beta-mix of local models",
        rank=11,
        models="one",
        exports="global",
        family="personalised",
        options=(PFEDME_LAMBDA, PFEDME_INNER_STEPS, PFEDME_PERSONAL_LR, PFEDME_MU, PFEDME_BETA),
    ),
)
