"""Method options shared by several methods: run-config keys, declared once.

Only what several methods share lives here: Flower's FedOpt family's options (FedAdam, FedYogi,
FedAdagrad) and Acar et al.'s gradient clip. A method's own options live in its folder's
``spec.py`` (``ripple_flwr/methods/<name>/spec.py``), which the clients import too.
"""

from __future__ import annotations

from ripple_flwr.settings import Option

# -- FedAdam, FedYogi, FedAdagrad (Flower's FedOpt family) ---------------------------------
FEDOPT_ETA = Option(
    "fedopt-eta",
    float,
    0.01,
    "FedAdam/FedYogi/FedAdagrad: server learning rate",
    low=0,
    low_open=True,
)

FEDOPT_BETA1 = Option(
    "fedopt-beta1",
    float,
    0.9,
    "FedAdam/FedYogi: first-moment decay (paper)",
    low=0,
    high=1,
    high_open=True,
)

FEDOPT_BETA2 = Option(
    "fedopt-beta2",
    float,
    0.99,
    "FedAdam/FedYogi: second-moment decay (paper)",
    low=0,
    high=1,
    high_open=True,
)

FEDOPT_TAU = Option(
    "fedopt-tau",
    float,
    1e-3,
    "FedAdam/FedYogi/FedAdagrad: adaptivity (paper)",
    low=0,
    low_open=True,
)

# Acar et al.'s max_norm for every method of their code (SCAFFOLD, FedDyn).
REFERENCE_GRAD_CLIP = 10.0
