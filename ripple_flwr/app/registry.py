"""The registry of federated methods: one entry per method, the only place that names them.

Config validation, the ServerApp, the ClientApp, the benchmarks and the
README's method list all read :data:`METHODS`. An entry says how to build the
method's strategy, whether it needs the router (and so the one-shot
summaries), how many models the server holds, what a saved run exports for
zero-shot onboarding outside the run, and which client-side training rule
its clients apply (:mod:`ripple_flwr.training.rules`).

Adding a method: one strategy file under ``ripple_flwr/strategies/`` and one
:func:`register` call below (plus its tests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from ripple_flwr.app.strategies.cfl import CFL
from ripple_flwr.app.strategies.core.base import AppStrategy
from ripple_flwr.app.strategies.fedadagrad import FedAdagradMethod
from ripple_flwr.app.strategies.fedadam import FedAdamMethod
from ripple_flwr.app.strategies.fedavg import FedAvgMethod
from ripple_flwr.app.strategies.fedavgm import FedAvgMMethod
from ripple_flwr.app.strategies.feddyn import FedDyn
from ripple_flwr.app.strategies.fedmedian import FedMedianMethod
from ripple_flwr.app.strategies.fedprox import FedProxMethod
from ripple_flwr.app.strategies.fedtrimmedavg import FedTrimmedAvgMethod
from ripple_flwr.app.strategies.fedyogi import FedYogiMethod
from ripple_flwr.app.strategies.fesem import FeSEM
from ripple_flwr.app.strategies.flux import FLUX
from ripple_flwr.app.strategies.ifca import IFCA
from ripple_flwr.app.strategies.krum import KrumMethod
from ripple_flwr.app.strategies.local_only import LocalOnly
from ripple_flwr.app.strategies.perfedavg import PerFedAvg
from ripple_flwr.app.strategies.pfedme import PFedMe
from ripple_flwr.app.strategies.ripple import RippleStrategy
from ripple_flwr.app.strategies.scaffold import Scaffold
from ripple_flwr.settings import Option, RunSettings
from ripple_flwr.training.client_rules import CLIENT_RULES

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
    router: Any = None
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


@dataclass(frozen=True)
class MethodSpec:
    """One federated method.

    Parameters
    ----------
    name : the ``method`` run-config value.
    summary : one line for the generated method table (README, docs/methods.md).
    strategy : the strategy class (an ``AppStrategy``); it declares ``options``,
        ``state_fields`` and ``check_settings``.
    models : how many models the server holds: ``clusters`` (K, or K_hat),
        ``one`` (a global model) or ``per-client``.
    exports : what a saved run keeps for onboarding outside the run:
        ``clusters`` (with the router), ``global``, ``descriptors`` (the cluster
        models with what assigns a label-free descriptor to one: FLUX) or ``none``.
    client_rule : the key of the clients' training rule in ``CLIENT_RULES``.
    build : MethodInputs -> the strategy; default ``strategy(settings, initial_state)``.
    needs_router : the server loads or pre-trains the GMM-VAE and clients send
        their summary in the one-shot round.
    routing_weights : the method has per-client weights w that Ripple-HDB can refine.
    needs_truth : the method uses the clients' true mixtures pi*, which only benchmark
        partitions have (refused with ``client-data='local'``).
    family : the paper's group of methods (``Family``): ``ripple`` (Ripple and its
        oracle), ``global`` (one model for all), ``personalised`` (a model per client
        from a global one, or local-only) or ``clustered`` (the clustered baselines).
        Required: an entry without one is refused.
    sweeps_k : the benchmarks sweep the method's K (``num-components``, fixed a
        priori) and report the best, as the paper does for IFCA and FeSEM; only a
        method with ``models='clusters'``.
    """

    name: str
    summary: str
    strategy: type
    models: ModelCount
    exports: Export
    client_rule: str = "sgd"
    needs_router: bool = False
    routing_weights: bool = False
    needs_truth: bool = False
    family: str = ""
    sweeps_k: bool = False
    build: Callable[[MethodInputs], Any] | None = None

    @property
    def options(self) -> tuple[Option, ...]:
        """The run-config keys the method reads (declared by its strategy class)."""
        return self.strategy.declared_options()

    @property
    def state(self) -> tuple[str, ...]:
        """What the method keeps between rounds and a checkpoint saves."""
        return self.strategy.declared_state()

    def make(self, inputs: MethodInputs) -> Any:
        """The method's strategy for one run."""
        if self.build is not None:
            return self.build(inputs)
        return self.strategy(inputs.settings, inputs.initial_state)

    def check(self) -> None:
        """Refuse an incomplete or inconsistent entry, naming what is wrong."""
        if not self.name or self.name != self.name.strip().lower() or " " in self.name:
            raise ValueError(f"method name {self.name!r} must be a lower-case word")
        if not self.summary.strip():
            raise ValueError(f"method {self.name!r} has no summary")
        if not (isinstance(self.strategy, type) and issubclass(self.strategy, AppStrategy)):
            raise ValueError(f"method {self.name!r}: strategy must be an AppStrategy class")
        if "state_fields" not in vars(self.strategy):
            raise ValueError(
                f"method {self.name!r}: {self.strategy.__name__} does not declare state_fields "
                "(what it keeps between rounds, saved for resume; () if nothing of its own)"
            )
        if self.build is not None and not callable(self.build):
            raise ValueError(f"method {self.name!r}: build must be callable")
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
def _ripple(inp: MethodInputs) -> RippleStrategy:
    return RippleStrategy(
        inp.settings, inp.initial_state, router=inp.router, truth=inp.true_mixtures
    )


def _oracle(inp: MethodInputs) -> RippleStrategy:
    return RippleStrategy(
        inp.settings, inp.initial_state, weights=inp.true_mixtures, truth=inp.true_mixtures
    )


def _fesem(inp: MethodInputs) -> FeSEM:
    """K centres, all copies of the one initial model (the authors' ``center_init``)."""
    k = inp.settings.num_components
    return FeSEM(inp.settings, [dict(inp.initial_state) for _ in range(k)], truth=inp.true_mixtures)


def _ifca(inp: MethodInputs) -> IFCA:
    k = inp.settings.num_components
    return IFCA(inp.settings, inp.initial_states(k), truth=inp.true_mixtures, draw=inp.draws(k))


def _cfl(inp: MethodInputs) -> CFL:
    return CFL(inp.settings, inp.initial_state, truth=inp.true_mixtures)


def _flux(inp: MethodInputs) -> FLUX:
    return FLUX(inp.settings, inp.initial_state, truth=inp.true_mixtures)


ONE = {"models": "one", "exports": "global"}
GLOBAL = {**ONE, "family": "global"}
PERSONALISED = {**ONE, "family": "personalised"}
CLUSTERS = {"models": "clusters", "exports": "none"}
CLUSTERED = {**CLUSTERS, "family": "clustered"}

for _spec in (
    MethodSpec(
        "ripple",
        "Ripple: K cluster models, one-shot GMM-VAE routing, w-mix down, eq. 9 up",
        RippleStrategy,
        models="clusters",
        exports="clusters",
        needs_router=True,
        routing_weights=True,
        family="ripple",
        build=_ripple,
    ),
    MethodSpec(
        "oracle",
        "Ripple with w = pi* (the true mixtures): perfect-routing reference",
        RippleStrategy,
        **CLUSTERS,
        routing_weights=True,
        needs_truth=True,
        family="ripple",
        build=_oracle,
    ),
    MethodSpec("fedavg", "FedAvg, Flower's class: one global model", FedAvgMethod, **GLOBAL),
    MethodSpec(
        "fedprox",
        "FedProx, Flower's class: FedAvg plus mu/2 ||w - w_global||^2 on the clients",
        FedProxMethod,
        **GLOBAL,
        client_rule="fedprox",
    ),
    MethodSpec(
        "fedadam",
        "FedAdam, Flower's class: Adam on the server over the mean update",
        FedAdamMethod,
        **GLOBAL,
    ),
    MethodSpec(
        "fedavgm",
        "FedAvgM, Flower's class: the mean update applied with server momentum",
        FedAvgMMethod,
        **GLOBAL,
    ),
    MethodSpec(
        "fedyogi",
        "FedYogi, Flower's class: Yogi on the server over the mean update",
        FedYogiMethod,
        **GLOBAL,
    ),
    MethodSpec(
        "fedadagrad",
        "FedAdagrad, Flower's class: Adagrad on the server over the mean update",
        FedAdagradMethod,
        **GLOBAL,
    ),
    MethodSpec(
        "scaffold",
        "SCAFFOLD: server control c and client controls c_i correct every local step",
        Scaffold,
        **GLOBAL,
        client_rule="scaffold",
    ),
    MethodSpec(
        "feddyn",
        "FedDyn: clients add -<g_k, theta> + alpha/2 ||theta - theta_prev||^2, server state h",
        FedDyn,
        **GLOBAL,
        client_rule="feddyn",
    ),
    MethodSpec(
        "perfedavg",
        "Per-FedAvg (first order): MAML steps, scored after one alpha step on the train split",
        PerFedAvg,
        **PERSONALISED,
        client_rule="perfedavg",
    ),
    MethodSpec(
        "pfedme",
        "pFedMe: Moreau-envelope personal models theta_tilde, server beta-mix of local models",
        PFedMe,
        **PERSONALISED,
        client_rule="pfedme",
    ),
    MethodSpec(
        "fedmedian",
        "FedMedian, Flower's class: coordinate-wise median of the replies (robust)",
        FedMedianMethod,
        **GLOBAL,
    ),
    MethodSpec(
        "fedtrimmedavg",
        "FedTrimmedAvg, Flower's class: coordinate-wise trimmed mean (robust)",
        FedTrimmedAvgMethod,
        **GLOBAL,
    ),
    MethodSpec(
        "krum",
        "Krum, Flower's class: the reply closest to its neighbours (robust)",
        KrumMethod,
        **GLOBAL,
    ),
    MethodSpec(
        "ifca",
        "IFCA: all K models to each client, it trains the lowest-loss one (K x FedAvg down)",
        IFCA,
        **CLUSTERED,
        sweeps_k=True,
        build=_ifca,
    ),
    MethodSpec(
        "fesem",
        "FeSEM: K centres from one initial model; K-means over the clients' models reassigns",
        FeSEM,
        **CLUSTERED,
        sweeps_k=True,
        build=_fesem,
    ),
    MethodSpec(
        "cfl",
        "CFL: one model, split by cosine similarity of updates when the joint one stalls",
        CFL,
        **CLUSTERED,
        build=_cfl,
    ),
    MethodSpec(
        "flux",
        "FLUX: FedAvg, then DBSCAN over latent-moment descriptors; unseen clients to the nearest",
        FLUX,
        **{**CLUSTERED, "exports": "descriptors"},
        build=_flux,
    ),
    MethodSpec(
        "local",
        "local-only: each client trains alone, only in the rounds it is sampled",
        LocalOnly,
        models="per-client",
        exports="none",
        family="personalised",
    ),
):
    register(_spec)
