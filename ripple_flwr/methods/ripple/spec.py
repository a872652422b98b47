"""Ripple and its oracle: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients train with plain SGD.
"""

from __future__ import annotations

from ripple_flwr.methods import options as o
from ripple_flwr.methods.fedavgm.spec import FEDAVGM_MOMENTUM
from ripple_flwr.methods.spec import MethodSpec
from ripple_flwr.settings import Option, RunSettings

RIPPLE_STRAT_ORDER = Option(
    "strat-order",
    str,
    "rotation",
    "Ripple-Strat with more clusters than clients a round: rotation (each round starts one "
    "sample further along the clusters' mass order, so every cluster gets a client within "
    "ceil(K/S) rounds) or mass (the heaviest clusters every round, the earlier rule); the "
    "same sample when K <= clients-per-round",
    choices=("rotation", "mass"),
)

CLUSTER_OPTIMIZER = Option(
    "cluster-optimizer",
    str,
    "none",
    "Ripple: the server step of each cluster model: none (eq. 9, the paper's rule) or Flower's "
    "fedyogi / fedadam / fedavgm, one per cluster, on the cluster's w-weighted mean update "
    "(fedopt-eta, fedopt-beta1/2, fedopt-tau; fedavgm: server-lr, fedavgm-momentum)",
    choices=("none", "fedyogi", "fedadam", "fedavgm"),
)
# What cluster-optimizer reads besides itself (the same keys as the global rows').
OPTIMIZER_OPTIONS = (
    CLUSTER_OPTIMIZER,
    o.FEDOPT_ETA,
    o.FEDOPT_BETA1,
    o.FEDOPT_BETA2,
    o.FEDOPT_TAU,
    FEDAVGM_MOMENTUM,
)

# What each cluster-optimizer value reads of OPTIMIZER_OPTIONS (besides itself).
OPTIMIZER_READS = {
    "none": (),
    "fedyogi": ("fedopt-eta", "fedopt-beta1", "fedopt-beta2", "fedopt-tau"),
    "fedadam": ("fedopt-eta", "fedopt-beta1", "fedopt-beta2", "fedopt-tau"),
    "fedavgm": (FEDAVGM_MOMENTUM.key,),
}


def unread(settings: RunSettings) -> dict[str, str]:
    """Ripple's own keys it does not read under these settings: ``strat-order`` without the
    stratified sampler, an optimiser's keys under another ``cluster-optimizer``."""
    out: dict[str, str] = {}
    if settings.training.sampling != "stratified":
        out[RIPPLE_STRAT_ORDER.key] = "read only with sampling='stratified' (Ripple-Strat)"
    chosen = CLUSTER_OPTIMIZER.of(settings)
    for opt in OPTIMIZER_OPTIONS[1:]:
        if opt.key not in OPTIMIZER_READS.get(chosen, ()):
            users = [name for name, keys in OPTIMIZER_READS.items() if opt.key in keys]
            out[opt.key] = f"read only with cluster-optimizer={' or '.join(map(repr, users))}"
    return out


SPECS = (
    MethodSpec(
        "ripple",
        "Ripple: K cluster models, one-shot GMM-VAE routing, w-mix down, eq. 9 up",
        rank=0,
        models="clusters",
        exports="clusters",
        needs_router=True,
        routing_weights=True,
        family="ripple",
        options=(RIPPLE_STRAT_ORDER, *OPTIMIZER_OPTIONS),
        unread=unread,
        benchmarks=("table2", "map"),
    ),
    MethodSpec(
        "oracle",
        "Ripple with w = pi* (the true mixtures): perfect-routing reference",
        rank=1,
        models="clusters",
        exports="none",
        routing_weights=True,
        needs_truth=True,
        family="ripple",
        options=(RIPPLE_STRAT_ORDER, *OPTIMIZER_OPTIONS),
        unread=unread,
        benchmarks=("map",),
    ),
)
