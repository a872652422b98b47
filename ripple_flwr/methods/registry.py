"""The registry of federated methods: one entry per method, the only place that names them.

Config validation, the ServerApp, the ClientApp, the benchmarks and the
README's method list all read :data:`METHODS`. An entry says which strategy runs
the method (by its import path, resolved only on the server, so a client reads the
registry without importing a strategy or Flower's strategy classes), the run-config
keys it reads, whether it needs the router (and so the one-shot summaries), how many
models the server holds, what a saved run exports for zero-shot onboarding outside the
run, and which client-side training rule its clients apply
(:mod:`ripple_flwr.training.rules`).

Adding a method: one strategy file under ``ripple_flwr/app/server/strategies/`` and one
:class:`MethodSpec` in the list below (docs/adding-a-method.md).
"""

from __future__ import annotations

from ripple_flwr.methods import options as o
from ripple_flwr.methods.spec import (
    Export,
    Family,
    MethodInputs,
    MethodSpec,
    ModelCount,
    resolve,
)
from ripple_flwr.settings import Option, RunSettings
from ripple_flwr.training.personal import (
    PERFEDAVG_ALPHA,
    PERFEDAVG_BETA,
    PFEDME_INNER_STEPS,
    PFEDME_LAMBDA,
    PFEDME_MU,
    PFEDME_PERSONAL_LR,
)
from ripple_flwr.training.stateful import FEDDYN_ALPHA, FEDDYN_GRAD_CLIP, SCAFFOLD_GRAD_CLIP

METHODS: dict[str, MethodSpec] = {}


def register(spec: MethodSpec) -> MethodSpec:
    """Add ``spec`` to the registry; a duplicate name or an incomplete entry is an error.

    An option key may be shared by several methods only as the same declaration
    (FedOpt's), and never clash with a :class:`RunSettings` field.

    Parameters
    ----------
    spec
        The method's entry (docs/adding-a-method.md).

    Returns
    -------
    MethodSpec
        ``spec``, registered.
    """
    spec.check()
    if spec.name in METHODS:
        raise ValueError(f"method {spec.name!r} is registered already")
    fields = {o.key for o in RunSettings.fields_as_options()}
    known = {o.key: o for o in all_options()}
    for opt in spec.options:
        if opt.key in fields:
            raise ValueError(f"method {spec.name!r}: option {opt.key!r} is a run setting")
        if opt.key in known and known[opt.key] != opt:
            raise ValueError(
                f"method {spec.name!r}: option {opt.key!r} is declared differently elsewhere"
            )
    METHODS[spec.name] = spec
    return spec


def all_options() -> tuple[Option, ...]:
    """Every registered method's options, each key once, in registration order."""
    out: dict[str, Option] = {}
    for spec in METHODS.values():
        for opt in spec.options:
            out.setdefault(opt.key, opt)
    return tuple(out.values())


def method_names() -> tuple[str, ...]:
    """Every registered method, in registration order."""
    return tuple(METHODS)


def get_method(name: str) -> MethodSpec:
    """The entry of ``name``, or a ``KeyError`` listing the registered methods."""
    try:
        return METHODS[name]
    except KeyError:
        raise KeyError(f"unknown method {name!r}; registered: {', '.join(METHODS)}") from None


# -- the entries ---------------------------------------------------------------------------------
_S = "ripple_flwr.app.server.strategies"
FEDOPT = (o.FEDOPT_ETA, o.FEDOPT_BETA1, o.FEDOPT_BETA2, o.FEDOPT_TAU)
ONE = {"models": "one", "exports": "global"}
GLOBAL = {**ONE, "family": "global"}
PERSONALISED = {**ONE, "family": "personalised"}
CLUSTERS = {"models": "clusters", "exports": "none"}
CLUSTERED = {**CLUSTERS, "family": "clustered"}

for _spec in (
    MethodSpec(
        "ripple",
        "Ripple: K cluster models, one-shot GMM-VAE routing, w-mix down, eq. 9 up",
        f"{_S}.ripple:RippleStrategy",
        models="clusters",
        exports="clusters",
        needs_router=True,
        routing_weights=True,
        family="ripple",
        build=f"{_S}.ripple:build_ripple",
        options=(o.RIPPLE_STRAT_ORDER,),
        benchmarks=("table2", "map"),
    ),
    MethodSpec(
        "oracle",
        "Ripple with w = pi* (the true mixtures): perfect-routing reference",
        f"{_S}.ripple:RippleStrategy",
        **CLUSTERS,
        routing_weights=True,
        needs_truth=True,
        family="ripple",
        build=f"{_S}.ripple:build_oracle",
        options=(o.RIPPLE_STRAT_ORDER,),
        benchmarks=("map",),
    ),
    MethodSpec(
        "fedavg",
        "FedAvg, Flower's class: one global model",
        f"{_S}.fedavg:FedAvgStrategy",
        **GLOBAL,
        benchmarks=("table2", "map"),
    ),
    MethodSpec(
        "fedprox",
        "FedProx, Flower's class: FedAvg plus mu/2 ||w - w_global||^2 on the clients",
        f"{_S}.fedprox:FedProxStrategy",
        **GLOBAL,
        client_rule="fedprox",
        options=(o.PROXIMAL_MU,),
    ),
    MethodSpec(
        "fedadam",
        "FedAdam, Flower's class: Adam on the server over the mean update",
        f"{_S}.fedadam:FedAdamStrategy",
        **GLOBAL,
        options=FEDOPT,
    ),
    MethodSpec(
        "fedavgm",
        "FedAvgM, Flower's class: the mean update applied with server momentum",
        f"{_S}.fedavgm:FedAvgMStrategy",
        **GLOBAL,
        options=(o.FEDAVGM_MOMENTUM,),
    ),
    MethodSpec(
        "fedyogi",
        "FedYogi, Flower's class: Yogi on the server over the mean update",
        f"{_S}.fedyogi:FedYogiStrategy",
        **GLOBAL,
        options=FEDOPT,
        benchmarks=("map",),
    ),
    MethodSpec(
        "fedadagrad",
        "FedAdagrad, Flower's class: Adagrad on the server over the mean update",
        f"{_S}.fedadagrad:FedAdagradStrategy",
        **GLOBAL,
        options=(o.FEDOPT_ETA, o.FEDOPT_TAU),
    ),
    MethodSpec(
        "scaffold",
        "SCAFFOLD: server control c and client controls c_i correct every local step",
        f"{_S}.scaffold:ScaffoldStrategy",
        **GLOBAL,
        client_rule="scaffold",
        options=(SCAFFOLD_GRAD_CLIP,),  # read by the clients' rule
    ),
    MethodSpec(
        "feddyn",
        "FedDyn: clients add -<g_k, theta> + alpha/2 ||theta - theta_prev||^2, server state h",
        f"{_S}.feddyn:FedDynStrategy",
        **GLOBAL,
        client_rule="feddyn",
        options=(FEDDYN_ALPHA, FEDDYN_GRAD_CLIP),
    ),
    MethodSpec(
        "perfedavg",
        "Per-FedAvg (first order): MAML steps, scored after one alpha step on the train split",
        f"{_S}.perfedavg:PerFedAvgStrategy",
        **PERSONALISED,
        client_rule="perfedavg",
        options=(PERFEDAVG_ALPHA, PERFEDAVG_BETA),  # read by the clients' rule
        benchmarks=("map",),
    ),
    MethodSpec(
        "pfedme",
        "pFedMe: Moreau-envelope personal models theta_tilde, server beta-mix of local models",
        f"{_S}.pfedme:PFedMeStrategy",
        **PERSONALISED,
        client_rule="pfedme",
        options=(PFEDME_LAMBDA, PFEDME_INNER_STEPS, PFEDME_PERSONAL_LR, PFEDME_MU, o.PFEDME_BETA),
    ),
    MethodSpec(
        "fedmedian",
        "FedMedian, Flower's class: coordinate-wise median of the replies (robust)",
        f"{_S}.fedmedian:FedMedianStrategy",
        **GLOBAL,
    ),
    MethodSpec(
        "fedtrimmedavg",
        "FedTrimmedAvg, Flower's class: coordinate-wise trimmed mean (robust)",
        f"{_S}.fedtrimmedavg:FedTrimmedAvgStrategy",
        **GLOBAL,
        options=(o.TRIMMED_BETA,),
    ),
    MethodSpec(
        "krum",
        "Krum, Flower's class: the reply closest to its neighbours (robust)",
        f"{_S}.krum:KrumStrategy",
        **GLOBAL,
        options=(o.KRUM_MALICIOUS,),
    ),
    MethodSpec(
        "ifca",
        "IFCA: all K models to each client, it trains the lowest-loss one (K x FedAvg down)",
        f"{_S}.ifca:IFCAStrategy",
        **CLUSTERED,
        sweeps_k=True,
        options=(o.IFCA_INIT_BALANCE, o.IFCA_INIT_DRAWS),
        build=f"{_S}.ifca:build_ifca",
        benchmarks=("table2", "map"),
    ),
    MethodSpec(
        "fesem",
        "FeSEM: K centres from one initial model; K-means over the clients' models reassigns",
        f"{_S}.fesem:FeSEMStrategy",
        **CLUSTERED,
        sweeps_k=True,
        options=(
            o.FESEM_UPDATE_EVERY,
            o.FESEM_LAYER,
            o.FESEM_POINTS,
            o.FESEM_KMEANS_ITERS,
            o.FESEM_SAMPLING,
        ),
        build=f"{_S}.fesem:build_fesem",
        benchmarks=("table2",),
    ),
    MethodSpec(
        "cfl",
        "CFL: one model, split by cosine similarity of updates when the joint one stalls",
        f"{_S}.cfl:CFLStrategy",
        **CLUSTERED,
        options=(
            o.CFL_WARMUP_FRACTION,
            o.CFL_EPS1,
            o.CFL_EPS2,
            o.CFL_MAX_SIMILARITY,
            o.CFL_MAX_CLUSTERS,
            o.CFL_WEIGHTING,
        ),
        build=f"{_S}.cfl:build_cfl",
        benchmarks=("table2", "map"),
    ),
    MethodSpec(
        "flux",
        "FLUX: FedAvg, then DBSCAN over latent-moment descriptors; unseen clients to the nearest",
        f"{_S}.flux:FLUXStrategy",
        **{**CLUSTERED, "exports": "descriptors"},
        options=(
            o.FLUX_START_ROUND,
            o.FLUX_ACCURACY_DELTA,
            o.FLUX_LATEST_FRACTION,
            o.FLUX_EPS_SCALING,
            o.FLUX_LATENT_DIM,
        ),
        build=f"{_S}.flux:build_flux",
        benchmarks=("table2", "map"),
    ),
    MethodSpec(
        "local",
        "local-only: each client trains alone, only in the rounds it is sampled",
        f"{_S}.local_only:LocalOnlyStrategy",
        models="per-client",
        exports="none",
        family="personalised",
        benchmarks=("map",),
    ),
):
    register(_spec)


__all__ = [
    "METHODS",
    "Export",
    "Family",
    "MethodInputs",
    "MethodSpec",
    "ModelCount",
    "all_options",
    "get_method",
    "method_names",
    "register",
    "resolve",
]
