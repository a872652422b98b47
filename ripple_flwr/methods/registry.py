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

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np

from ripple_flwr.methods import options as o

if TYPE_CHECKING:  # the registry stays light: routers are the server's
    from ripple_flwr.router.routers import Router

from ripple_flwr.settings import Option, RunSettings
from ripple_flwr.training.client_rules import CLIENT_RULES
from ripple_flwr.training.personal import (
    PERFEDAVG_ALPHA,
    PERFEDAVG_BETA,
    PFEDME_INNER_STEPS,
    PFEDME_LAMBDA,
    PFEDME_MU,
    PFEDME_PERSONAL_LR,
)
from ripple_flwr.training.stateful import FEDDYN_ALPHA, FEDDYN_GRAD_CLIP, SCAFFOLD_GRAD_CLIP

ModelCount = Literal["clusters", "one", "per-client"]
Export = Literal["clusters", "global", "descriptors", "none"]
# The paper's groups of methods (its Table 1), in the order the benchmarks draw them.
Family = Literal["ripple", "global", "personalised", "clustered"]


@dataclass(frozen=True)
class MethodInputs:
    """What building a strategy may use: settings, initial model, pi*, the router.

    ``fresh_state(i)`` builds the i-th distinct seeded initialisation (i = 0
    is ``initial_state``): IFCA's K models start from different ones.
    """

    settings: RunSettings
    initial_state: dict[str, np.ndarray]
    true_mixtures: np.ndarray | None = None
    router: Router | None = None
    fresh_state: Callable[[int], dict[str, np.ndarray]] | None = None

    def initial_states(self, k: int) -> list[dict[str, np.ndarray]]:
        """``k`` initial models: ``initial_state`` and k - 1 distinct seeded ones."""
        if self.fresh_state is None:
            raise ValueError("this method needs distinct initial models: pass fresh_state")
        return [self.initial_state] + [self.fresh_state(i) for i in range(1, k)]

    def draws(self, k: int) -> Callable[[int], list[dict[str, np.ndarray]]]:
        """d -> the d-th draw of ``k`` initial models (IFCA's re-draw).

        Draw 0 is :meth:`initial_states`; draw d is ``fresh_state(d*k .. d*k + k - 1)``.
        """
        if self.fresh_state is None:
            raise ValueError("this method needs distinct initial models: pass fresh_state")
        fresh = self.fresh_state

        def draw(d: int) -> list[dict[str, np.ndarray]]:
            if d == 0:
                return self.initial_states(k)
            return [fresh(d * k + j) for j in range(k)]

        return draw


@functools.cache
def resolve(path: str) -> Any:
    """``"package.module:Name"`` as the object it names (imported on first use)."""
    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"{path!r} is not 'package.module:Name'")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class MethodSpec:
    """One federated method.

    Parameters
    ----------
    name : str
        The ``method`` run-config value.
    summary : str
        One line for the generated method table (README, docs/methods.md).
    strategy : str
        The strategy class as ``"package.module:Class"`` (an ``AppStrategy`` that
        declares ``state_fields`` and ``check_settings``), imported only when the
        server builds the method (:attr:`strategy_class`).
    models : str
        How many models the server holds: ``clusters`` (K, or K_hat), ``one`` (a
        global model) or ``per-client``.
    exports : str
        What a saved run keeps for onboarding outside the run: ``clusters`` (with
        the router), ``global``, ``descriptors`` (the cluster models with what
        assigns a label-free descriptor to one: FLUX) or ``none``.
    client_rule : str
        The key of the clients' training rule in ``CLIENT_RULES``.
    options : tuple of Option
        The run-config keys the method reads (besides the run's settings).
    build : str
        ``"package.module:function"``, MethodInputs -> the strategy; empty:
        ``strategy(settings, initial_state)``.
    needs_router : bool
        The server loads or pre-trains the GMM-VAE and clients send their summary in
        the one-shot round.
    routing_weights : bool
        The method has per-client weights w that Ripple-HDB can refine.
    needs_truth : bool
        The method uses the clients' true mixtures pi*, which only benchmark
        partitions have (refused with ``client-data='local'``).
    family : str
        The paper's group of methods (``Family``): ``ripple`` (Ripple and its
        oracle), ``global`` (one model for all), ``personalised`` (a model per client
        from a global one, or local-only) or ``clustered`` (the clustered baselines).
        Required: an entry without one is refused.
    sweeps_k : bool
        The benchmarks sweep the method's K (``num-components``, fixed a priori) and
        report the best, as the paper does for IFCA and FeSEM; only a method with
        ``models='clusters'``.
    """

    name: str
    summary: str
    strategy: str
    models: ModelCount
    exports: Export
    client_rule: str = "sgd"
    options: tuple[Option, ...] = ()
    needs_router: bool = False
    routing_weights: bool = False
    needs_truth: bool = False
    family: str = ""
    sweeps_k: bool = False
    build: str = ""

    @property
    def strategy_class(self) -> type:
        """The strategy class, imported on first use; an entry that names no strategy is refused."""
        cls = resolve(self.strategy)
        if not isinstance(cls, type) or not hasattr(cls, "declared_state"):
            raise ValueError(f"method {self.name!r}: {self.strategy} is not an AppStrategy class")
        if "state_fields" not in vars(cls):
            raise ValueError(
                f"method {self.name!r}: {cls.__name__} does not declare state_fields "
                "(what it keeps between rounds, saved for resume; () if nothing of its own)"
            )
        return cls

    @property
    def state(self) -> tuple[str, ...]:
        """What the method keeps between rounds and a checkpoint saves (imports the strategy)."""
        return self.strategy_class.declared_state()

    def check_settings(self, settings: RunSettings) -> None:
        """The method's own rules on the run's settings (its strategy's ``check_settings``)."""
        self.strategy_class.check_settings(settings)

    def make(self, inputs: MethodInputs) -> Any:
        """The method's strategy for one run."""
        if self.build:
            return resolve(self.build)(inputs)
        return self.strategy_class(inputs.settings, inputs.initial_state)

    def check(self) -> None:
        """Refuse an incomplete or inconsistent entry, naming what is wrong (no import)."""
        if not self.name or self.name != self.name.strip().lower() or " " in self.name:
            raise ValueError(f"method name {self.name!r} must be a lower-case word")
        if not self.summary.strip():
            raise ValueError(f"method {self.name!r} has no summary")
        for path in (self.strategy, self.build):
            if path and (":" not in path or not path.partition(":")[0]):
                raise ValueError(f"method {self.name!r}: {path!r} is not 'package.module:Name'")
        if not self.strategy:
            raise ValueError(f"method {self.name!r} names no strategy")
        for opt in self.options:
            if not isinstance(opt, Option):
                raise ValueError(f"method {self.name!r}: option {opt!r} is not an Option")
        if self.models not in get_args(ModelCount):
            raise ValueError(f"method {self.name!r}: models={self.models!r} not in {ModelCount}")
        if self.exports not in get_args(Export):
            raise ValueError(f"method {self.name!r}: exports={self.exports!r} not in {Export}")
        if self.client_rule not in CLIENT_RULES:
            raise ValueError(
                f"method {self.name!r}: client_rule={self.client_rule!r} is not one of "
                f"{', '.join(CLIENT_RULES)}"
            )
        if self.exports == "clusters" and not self.needs_router:
            raise ValueError(f"method {self.name!r} exports clusters but has no router")
        if not self.family:
            raise ValueError(f"method {self.name!r} has no family: one of {get_args(Family)}")
        if self.family not in get_args(Family):
            raise ValueError(f"method {self.name!r}: family={self.family!r} not in {Family}")
        if self.sweeps_k and self.models != "clusters":
            raise ValueError(
                f"method {self.name!r} sweeps K but holds models={self.models!r}, not clusters"
            )


METHODS: dict[str, MethodSpec] = {}


def register(spec: MethodSpec) -> MethodSpec:
    """Add ``spec`` to the registry; a duplicate name or an incomplete entry is an error.

    An option key may be shared by several methods only as the same declaration
    (FedOpt's), and never clash with a :class:`RunSettings` field.
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
    ),
    MethodSpec(
        "fedavg", "FedAvg, Flower's class: one global model", f"{_S}.fedavg:FedAvgMethod", **GLOBAL
    ),
    MethodSpec(
        "fedprox",
        "FedProx, Flower's class: FedAvg plus mu/2 ||w - w_global||^2 on the clients",
        f"{_S}.fedprox:FedProxMethod",
        **GLOBAL,
        client_rule="fedprox",
        options=(o.PROXIMAL_MU,),
    ),
    MethodSpec(
        "fedadam",
        "FedAdam, Flower's class: Adam on the server over the mean update",
        f"{_S}.fedadam:FedAdamMethod",
        **GLOBAL,
        options=FEDOPT,
    ),
    MethodSpec(
        "fedavgm",
        "FedAvgM, Flower's class: the mean update applied with server momentum",
        f"{_S}.fedavgm:FedAvgMMethod",
        **GLOBAL,
        options=(o.FEDAVGM_MOMENTUM,),
    ),
    MethodSpec(
        "fedyogi",
        "FedYogi, Flower's class: Yogi on the server over the mean update",
        f"{_S}.fedyogi:FedYogiMethod",
        **GLOBAL,
        options=FEDOPT,
    ),
    MethodSpec(
        "fedadagrad",
        "FedAdagrad, Flower's class: Adagrad on the server over the mean update",
        f"{_S}.fedadagrad:FedAdagradMethod",
        **GLOBAL,
        options=(o.FEDOPT_ETA, o.FEDOPT_TAU),
    ),
    MethodSpec(
        "scaffold",
        "SCAFFOLD: server control c and client controls c_i correct every local step",
        f"{_S}.scaffold:Scaffold",
        **GLOBAL,
        client_rule="scaffold",
        options=(SCAFFOLD_GRAD_CLIP,),  # read by the clients' rule
    ),
    MethodSpec(
        "feddyn",
        "FedDyn: clients add -<g_k, theta> + alpha/2 ||theta - theta_prev||^2, server state h",
        f"{_S}.feddyn:FedDyn",
        **GLOBAL,
        client_rule="feddyn",
        options=(FEDDYN_ALPHA, FEDDYN_GRAD_CLIP),
    ),
    MethodSpec(
        "perfedavg",
        "Per-FedAvg (first order): MAML steps, scored after one alpha step on the train split",
        f"{_S}.perfedavg:PerFedAvg",
        **PERSONALISED,
        client_rule="perfedavg",
        options=(PERFEDAVG_ALPHA, PERFEDAVG_BETA),  # read by the clients' rule
    ),
    MethodSpec(
        "pfedme",
        "pFedMe: Moreau-envelope personal models theta_tilde, server beta-mix of local models",
        f"{_S}.pfedme:PFedMe",
        **PERSONALISED,
        client_rule="pfedme",
        options=(PFEDME_LAMBDA, PFEDME_INNER_STEPS, PFEDME_PERSONAL_LR, PFEDME_MU, o.PFEDME_BETA),
    ),
    MethodSpec(
        "fedmedian",
        "FedMedian, Flower's class: coordinate-wise median of the replies (robust)",
        f"{_S}.fedmedian:FedMedianMethod",
        **GLOBAL,
    ),
    MethodSpec(
        "fedtrimmedavg",
        "FedTrimmedAvg, Flower's class: coordinate-wise trimmed mean (robust)",
        f"{_S}.fedtrimmedavg:FedTrimmedAvgMethod",
        **GLOBAL,
        options=(o.TRIMMED_BETA,),
    ),
    MethodSpec(
        "krum",
        "Krum, Flower's class: the reply closest to its neighbours (robust)",
        f"{_S}.krum:KrumMethod",
        **GLOBAL,
        options=(o.KRUM_MALICIOUS,),
    ),
    MethodSpec(
        "ifca",
        "IFCA: all K models to each client, it trains the lowest-loss one (K x FedAvg down)",
        f"{_S}.ifca:IFCA",
        **CLUSTERED,
        sweeps_k=True,
        options=(o.IFCA_INIT_BALANCE, o.IFCA_INIT_DRAWS),
        build=f"{_S}.ifca:build_ifca",
    ),
    MethodSpec(
        "fesem",
        "FeSEM: K centres from one initial model; K-means over the clients' models reassigns",
        f"{_S}.fesem:FeSEM",
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
    ),
    MethodSpec(
        "cfl",
        "CFL: one model, split by cosine similarity of updates when the joint one stalls",
        f"{_S}.cfl:CFL",
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
    ),
    MethodSpec(
        "flux",
        "FLUX: FedAvg, then DBSCAN over latent-moment descriptors; unseen clients to the nearest",
        f"{_S}.flux:FLUX",
        **{**CLUSTERED, "exports": "descriptors"},
        options=(
            o.FLUX_START_ROUND,
            o.FLUX_ACCURACY_DELTA,
            o.FLUX_LATEST_FRACTION,
            o.FLUX_EPS_SCALING,
            o.FLUX_LATENT_DIM,
        ),
        build=f"{_S}.flux:build_flux",
    ),
    MethodSpec(
        "local",
        "local-only: each client trains alone, only in the rounds it is sampled",
        f"{_S}.local_only:LocalOnly",
        models="per-client",
        exports="none",
        family="personalised",
    ),
):
    register(_spec)
