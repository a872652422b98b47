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
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np

from ripple_flwr.training.rules import CLIENT_RULES

if TYPE_CHECKING:
    from ripple_flwr.settings import RunSettings

ModelCount = Literal["clusters", "one", "per-client"]
Export = Literal["clusters", "global", "none"]


@dataclass(frozen=True)
class MethodInputs:
    """What building a strategy may use: settings, initial model, pi*, the router.

    ``fresh_state(i)`` builds the i-th distinct seeded initialisation (i = 0
    is ``initial_state``): IFCA's and FeSEM's K models start from different ones.
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


@dataclass(frozen=True)
class MethodSpec:
    """One federated method.

    Parameters
    ----------
    name : the ``method`` run-config value.
    summary : one line for the README and ``--help``.
    build : MethodInputs -> the strategy (an ``AppStrategy`` + Flower ``Strategy``).
    models : how many models the server holds: ``clusters`` (K, or K_hat),
        ``one`` (a global model) or ``per-client``.
    exports : what a saved run keeps for onboarding outside the run:
        ``clusters`` (with the router), ``global`` or ``none``.
    client_rule : the key of the clients' training rule in ``CLIENT_RULES``.
    needs_router : the server loads or pre-trains the GMM-VAE and clients send
        their summary in the one-shot round.
    routing_weights : the method has per-client weights w that Ripple-HDB can refine.
    """

    name: str
    summary: str
    build: Callable[[MethodInputs], Any]
    models: ModelCount
    exports: Export
    client_rule: str = "sgd"
    needs_router: bool = False
    routing_weights: bool = False

    def check(self) -> None:
        """Refuse an incomplete or inconsistent entry, naming what is wrong."""
        if not self.name or self.name != self.name.strip().lower() or " " in self.name:
            raise ValueError(f"method name {self.name!r} must be a lower-case word")
        if not self.summary.strip():
            raise ValueError(f"method {self.name!r} has no summary")
        if not callable(self.build):
            raise ValueError(f"method {self.name!r}: build must be callable")
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


METHODS: dict[str, MethodSpec] = {}


def register(spec: MethodSpec) -> MethodSpec:
    """Add ``spec`` to the registry; a duplicate name or an incomplete entry is an error."""
    spec.check()
    if spec.name in METHODS:
        raise ValueError(f"method {spec.name!r} is registered already")
    METHODS[spec.name] = spec
    return spec


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
def _ripple(inp: MethodInputs):
    from ripple_flwr.app.strategies.ripple import RippleStrategy

    return RippleStrategy(
        inp.settings, inp.initial_state, router=inp.router, truth=inp.true_mixtures
    )


def _oracle(inp: MethodInputs):
    from ripple_flwr.app.strategies.ripple import RippleStrategy

    return RippleStrategy(
        inp.settings, inp.initial_state, weights=inp.true_mixtures, truth=inp.true_mixtures
    )


def _ifca(inp: MethodInputs):
    from ripple_flwr.app.strategies.ifca import IFCA

    k = inp.settings.num_components
    return IFCA(inp.settings, inp.initial_states(k), truth=inp.true_mixtures)


def _fesem(inp: MethodInputs):
    from ripple_flwr.app.strategies.fesem import FeSEM

    k = inp.settings.num_components
    return FeSEM(inp.settings, inp.initial_states(k), truth=inp.true_mixtures)


def _cfl(inp: MethodInputs):
    from ripple_flwr.app.strategies.cfl import CFL

    return CFL(inp.settings, inp.initial_state, truth=inp.true_mixtures)


def _strategy_class(module: str, cls: str) -> Callable[[MethodInputs], Any]:
    def build(inp: MethodInputs):
        import importlib

        return getattr(importlib.import_module(module), cls)(inp.settings, inp.initial_state)

    return build


register(
    MethodSpec(
        "ripple",
        "Ripple: K cluster models, one-shot GMM-VAE routing, w-mix down, eq. 9 up",
        _ripple,
        models="clusters",
        exports="clusters",
        needs_router=True,
        routing_weights=True,
    )
)
register(
    MethodSpec(
        "oracle",
        "Ripple with w = pi* (the true mixtures): perfect-routing reference",
        _oracle,
        models="clusters",
        exports="none",
        routing_weights=True,
    )
)
register(
    MethodSpec(
        "fedavg",
        "FedAvg, Flower's class: one global model",
        _strategy_class("ripple_flwr.app.strategies.fedavg", "FedAvgMethod"),
        models="one",
        exports="global",
    )
)
register(
    MethodSpec(
        "fedprox",
        "FedProx, Flower's class: FedAvg plus mu/2 ||w - w_global||^2 on the clients",
        _strategy_class("ripple_flwr.app.strategies.fedprox", "FedProxMethod"),
        models="one",
        exports="global",
        client_rule="fedprox",
    )
)
register(
    MethodSpec(
        "fedadam",
        "FedAdam, Flower's class: Adam on the server over the mean update",
        _strategy_class("ripple_flwr.app.strategies.fedadam", "FedAdamMethod"),
        models="one",
        exports="global",
    )
)
register(
    MethodSpec(
        "fedyogi",
        "FedYogi, Flower's class: Yogi on the server over the mean update",
        _strategy_class("ripple_flwr.app.strategies.fedyogi", "FedYogiMethod"),
        models="one",
        exports="global",
    )
)
register(
    MethodSpec(
        "fedadagrad",
        "FedAdagrad, Flower's class: Adagrad on the server over the mean update",
        _strategy_class("ripple_flwr.app.strategies.fedadagrad", "FedAdagradMethod"),
        models="one",
        exports="global",
    )
)
register(
    MethodSpec(
        "scaffold",
        "SCAFFOLD: server control c and client controls c_i correct every local step",
        _strategy_class("ripple_flwr.app.strategies.scaffold", "Scaffold"),
        models="one",
        exports="global",
        client_rule="scaffold",
    )
)
register(
    MethodSpec(
        "feddyn",
        "FedDyn: clients add -<g_k, theta> + alpha/2 ||theta - theta_prev||^2, server state h",
        _strategy_class("ripple_flwr.app.strategies.feddyn", "FedDyn"),
        models="one",
        exports="global",
        client_rule="feddyn",
    )
)
register(
    MethodSpec(
        "perfedavg",
        "Per-FedAvg (first order): MAML steps, scored after one alpha step on the train split",
        _strategy_class("ripple_flwr.app.strategies.perfedavg", "PerFedAvg"),
        models="one",
        exports="global",
        client_rule="perfedavg",
    )
)
register(
    MethodSpec(
        "pfedme",
        "pFedMe: Moreau-envelope personal models theta_tilde, server beta-mix of local models",
        _strategy_class("ripple_flwr.app.strategies.pfedme", "PFedMe"),
        models="one",
        exports="global",
        client_rule="pfedme",
    )
)
register(
    MethodSpec(
        "fedmedian",
        "FedMedian, Flower's class: coordinate-wise median of the replies (robust)",
        _strategy_class("ripple_flwr.app.strategies.fedmedian", "FedMedianMethod"),
        models="one",
        exports="global",
    )
)
register(
    MethodSpec(
        "fedtrimmedavg",
        "FedTrimmedAvg, Flower's class: coordinate-wise trimmed mean (robust)",
        _strategy_class("ripple_flwr.app.strategies.fedtrimmedavg", "FedTrimmedAvgMethod"),
        models="one",
        exports="global",
    )
)
register(
    MethodSpec(
        "krum",
        "Krum, Flower's class: the reply closest to its neighbours (robust)",
        _strategy_class("ripple_flwr.app.strategies.krum", "KrumMethod"),
        models="one",
        exports="global",
    )
)
register(
    MethodSpec(
        "ifca",
        "IFCA: all K models to each client, it trains the lowest-loss one (K x FedAvg down)",
        _ifca,
        models="clusters",
        exports="none",
    )
)
register(
    MethodSpec(
        "fesem",
        "FeSEM: each client trains the centre nearest (L2) its own last model; centre = mean",
        _fesem,
        models="clusters",
        exports="none",
    )
)
register(
    MethodSpec(
        "cfl",
        "CFL: one model, split by cosine similarity of updates when the joint one stalls",
        _cfl,
        models="clusters",
        exports="none",
    )
)
register(
    MethodSpec(
        "local",
        "local-only: each client trains alone, only in the rounds it is sampled",
        _strategy_class("ripple_flwr.app.strategies.local_only", "LocalOnly"),
        models="per-client",
        exports="none",
    )
)
