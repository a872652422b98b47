"""Ripple and its oracle: the registry entry and its options (light: clients import it too).

Its server side is in ``server.py``; its clients train with plain SGD.
"""

from __future__ import annotations

from ripple_flwr.methods import options as o
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

CLASS_CONDITIONAL = Option(
    "class-conditional",
    bool,
    False,
    "Ripple, beyond the paper: clients also send, for each label with at least "
    "min-label-count training images, its count, pixel variance and mean image; the server "
    "finds concepts (labels that mean different things) from them and routes over (concept, "
    "component) pairs (docs/concept-shift.md). Off: the paper's label-free summary only",
)
MIN_LABEL_COUNT = Option(
    "min-label-count",
    int,
    20,
    "class-conditional: a label's mean is sent only when the client holds at least this many "
    "training images of it (a mean of few images exposes them)",
    low=2,
    high=1_000_000,
)
CONCEPTS = Option(
    "concepts",
    int,
    0,
    "class-conditional: the number of concepts G, or 0 to find it by Ripple-HDB's rule "
    "(HDBSCAN over the clients' standardized per-label distances, min-cluster-size)",
    low=0,
    high=100,
)
LABEL_DP_EPSILON = Option(
    "label-dp-epsilon",
    float,
    0.0,
    "class-conditional: > 0 releases each label's mean and variance (epsilon, delta)-DP for one "
    "image replaced, given the counts (which are sent exactly); 0 = off "
    "(ripple_flwr/privacy/label_means.py)",
    low=0,
)
LABEL_DP_DELTA = Option(
    "label-dp-delta",
    float,
    1e-5,
    "class-conditional: delta of that release",
    low=0,
    high=1,
    low_open=True,
    high_open=True,
)
LABEL_DP_CLIP = Option(
    "label-dp-clip",
    float,
    0.0,
    "class-conditional: each image's L2 norm is clipped to this before its label's mean is "
    "taken (0 = sqrt(C*H*W), the largest a [0, 1] image has: nothing clipped)",
    low=0,
)
CONCEPT_OPTIONS = (
    CLASS_CONDITIONAL,
    MIN_LABEL_COUNT,
    CONCEPTS,
    LABEL_DP_EPSILON,
    LABEL_DP_DELTA,
    LABEL_DP_CLIP,
)


def unread(settings: RunSettings) -> dict[str, str]:
    """Ripple's own keys it does not read under these settings: ``strat-order`` without the
    stratified sampler, an optimiser's keys under another ``cluster-optimizer`` (shared:
    :func:`ripple_flwr.methods.options.optimizer_unread`), the concept keys without
    ``class-conditional``."""
    out: dict[str, str] = {}
    if settings.training.sampling != "stratified":
        out[RIPPLE_STRAT_ORDER.key] = "read only with sampling='stratified' (Ripple-Strat)"
    if not CLASS_CONDITIONAL.of(settings):
        for opt in CONCEPT_OPTIONS[1:]:
            out[opt.key] = "read only with class-conditional=true"
    elif not LABEL_DP_EPSILON.of(settings):
        for opt in (LABEL_DP_DELTA, LABEL_DP_CLIP):
            out[opt.key] = "read only with label-dp-epsilon > 0"
    out.update(o.optimizer_unread(settings))
    return out


PRESET = Option(
    "preset",
    str,
    "none",
    "Ripple as one named configuration: recommended (mean unmixing, Ripple-Strat with the "
    "rotating order, FedYogi per cluster, class-conditional; docs/which-method.md) or paper "
    "(the paper's Ripple-Strat: GMM-VAE, stratified, eq. 9); its keys are set for you, and a "
    "key you set to another value than the preset's (and its default) is refused",
    choices=("none", "recommended", "paper"),
)
# The recommended Ripple (issue 62), fixed before the fresh-seed map: mean unmixing (no
# pre-training; ties or beats the GMM-VAE on the development seeds), Ripple-Strat with the
# rotating order, FedYogi per cluster, and the class-conditional summary (issue 60).
PRESETS = {
    "recommended": {
        "router": "mean-unmixing",
        "sampling": "stratified",
        "strat-order": "rotation",
        "cluster-optimizer": "fedyogi",
        "class-conditional": True,
    },
    "paper": {
        "router": "gmm-vae",
        "sampling": "stratified",
        "cluster-optimizer": "none",
        "class-conditional": False,
    },
}


def oracle_unread(settings: RunSettings) -> dict[str, str]:
    """The oracle's: Ripple's, less the concept keys (it routes by pi*, it has none)."""
    own = {o.key for o in CONCEPT_OPTIONS}
    return {k: v for k, v in unread(settings).items() if k not in own}


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
        options=(RIPPLE_STRAT_ORDER, *o.OPTIMIZER_OPTIONS, *CONCEPT_OPTIONS, PRESET),
        unread=unread,
        benchmarks=("table2", "map"),
        presets=PRESETS,
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
        options=(RIPPLE_STRAT_ORDER, *o.OPTIMIZER_OPTIONS),
        unread=oracle_unread,
        benchmarks=("map",),
    ),
)
