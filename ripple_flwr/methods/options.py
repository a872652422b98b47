"""Method options shared by several methods: run-config keys, declared once.

Only what several methods share lives here: Flower's FedOpt family's options (FedAdam, FedYogi,
FedAdagrad), FedAvgM's momentum, ``cluster-optimizer`` (Flower's server optimiser per cluster
model: Ripple and the clustered baselines whose spec declares it) and Acar et al.'s gradient
clip. A method's own options live in its folder's
``spec.py`` (``ripple_flwr/methods/<name>/spec.py``), which the clients import too.
"""

from __future__ import annotations

from ripple_flwr.settings import Option, RunSettings

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

# -- FedAvgM (and cluster-optimizer = fedavgm) ----------------------------------------------
FEDAVGM_MOMENTUM = Option(
    "fedavgm-momentum", float, 0.9, "FedAvgM: server momentum beta", low=0, high=1, high_open=True
)

# -- cluster-optimizer: Flower's server optimiser per cluster model -------------------------
# Declared by the specs of the methods that take it (Ripple, the oracle, IFCA, FeSEM, PACFL,
# CFL); any other method refuses it, as every key it does not declare.
CLUSTER_OPTIMIZER = Option(
    "cluster-optimizer",
    str,
    "none",
    "Ripple, IFCA, FeSEM, PACFL, CFL: the server step of each cluster model: none (the "
    "method's own rule: Ripple's eq. 9, the others' mean of the members' models) or Flower's "
    "fedyogi / fedadam / fedavgm, one per cluster, on the cluster's mean update "
    "(fedopt-eta, fedopt-beta1/2, fedopt-tau; fedavgm: server-lr, fedavgm-momentum); CFL's two "
    "sides of a split both keep the parent's moments",
    choices=("none", "fedyogi", "fedadam", "fedavgm"),
)

# What cluster-optimizer reads besides itself (the same keys as the global rows').
OPTIMIZER_OPTIONS = (
    CLUSTER_OPTIMIZER,
    FEDOPT_ETA,
    FEDOPT_BETA1,
    FEDOPT_BETA2,
    FEDOPT_TAU,
    FEDAVGM_MOMENTUM,
)

# What each cluster-optimizer value reads of OPTIMIZER_OPTIONS (besides itself).
OPTIMIZER_READS = {
    "none": (),
    "fedyogi": ("fedopt-eta", "fedopt-beta1", "fedopt-beta2", "fedopt-tau"),
    "fedadam": ("fedopt-eta", "fedopt-beta1", "fedopt-beta2", "fedopt-tau"),
    "fedavgm": (FEDAVGM_MOMENTUM.key,),
}


def optimizer_unread(settings: RunSettings) -> dict[str, str]:
    """The optimiser keys (:data:`OPTIMIZER_OPTIONS`) the chosen ``cluster-optimizer`` does
    not read: a method that declares them refuses them under another value."""
    out: dict[str, str] = {}
    chosen = CLUSTER_OPTIMIZER.of(settings)
    for opt in OPTIMIZER_OPTIONS[1:]:
        if opt.key not in OPTIMIZER_READS.get(chosen, ()):
            users = [name for name, keys in OPTIMIZER_READS.items() if opt.key in keys]
            out[opt.key] = f"read only with cluster-optimizer={' or '.join(map(repr, users))}"
    return out


# Acar et al.'s max_norm for every method of their code (SCAFFOLD, FedDyn).
REFERENCE_GRAD_CLIP = 10.0
