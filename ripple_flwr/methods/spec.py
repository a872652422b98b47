"""What one federated method is: :class:`MethodSpec`, and what building it may use.

Flower-free and light: a client reads it to parse its run config. A method is one folder,
``ripple_flwr/methods/<name>/``: ``spec.py`` (its entries and options, light), ``server.py``
(``METHOD``, the class that runs it, and optionally ``build(spec, inputs)``) and, where its
clients do more than plain SGD, ``client.py`` (:data:`CLIENT_HOOKS`: its training rule,
its own one-shot summary, its answer to its own side query). The
registry finds the folders (:func:`ripple_flwr.methods.registry.discover`); the server side
is imported only when the server builds the method, the client side only in the client.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np

from ripple_flwr.methods.api import REQUIRED_HOOKS, Method, declared_fields, misspelt_hooks
from ripple_flwr.settings import Option, RunSettings

if TYPE_CHECKING:  # the registry stays light: routers are the server's
    from ripple_flwr.router.routers import Router

ModelCount = Literal["clusters", "one", "per-client"]
Export = Literal["clusters", "global", "descriptors", "none"]
# The paper's groups of methods (its Table 1), in the order the benchmarks draw them.
Family = Literal["ripple", "global", "personalised", "clustered"]


# The benchmarks beyond Table 1 that a method may list itself in (MethodSpec.benchmarks).
BENCHMARKS = ("table2", "map")


# What a method's client.py may define (each optional): ``rule(settings) -> ClientRule``, its
# clients' training rule (default: plain SGD); ``summary(settings, data) -> array``, its own
# one-shot summary, sent in the query round when its server asks for kind "method";
# ``answer(settings, data, model, config, device) -> array``, its answer to its own side
# query (FLUX's descriptor under the model sent).
CLIENT_HOOKS = ("rule", "summary", "answer")


@dataclass(frozen=True)
class ClientSide:
    """A method's client-side hooks (:data:`CLIENT_HOOKS`); ``None``: not defined."""

    rule: Callable[[RunSettings], Any] | None = None
    summary: Callable[..., np.ndarray] | None = None
    answer: Callable[..., np.ndarray] | None = None


@dataclass(frozen=True)
class MethodInputs:
    """What building a strategy may use: settings, initial model, pi*, the router.

    Parameters
    ----------
    settings
        The run's settings.
    initial_state
        The seeded initial model, as numpy arrays by parameter name.
    true_mixtures
        The clients' true mixtures pi* (benchmarks only), for entries with ``needs_truth``.
    router
        The pre-trained router, for entries with ``needs_router``.
    fresh_state
        ``i`` -> the i-th distinct seeded initialisation (i = 0 is ``initial_state``):
        IFCA's K models start from different ones.
    image_shape, num_classes
        The run's images ``(C, H, W)`` and number of classes, for a method whose clients'
        summary is sized by them (PACFL's subspaces).
    true_concepts
        The clients' true concept mixtures (benchmarks with concept shift only), for a
        concept step's ARI; never for routing.
    """

    settings: RunSettings
    initial_state: dict[str, np.ndarray]
    true_mixtures: np.ndarray | None = None
    router: Router | None = None
    fresh_state: Callable[[int], dict[str, np.ndarray]] | None = None
    image_shape: tuple[int, int, int] | None = None
    num_classes: int | None = None
    true_concepts: np.ndarray | None = None

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
    name : str
        The ``method`` run-config value.
    summary : str
        One line for the generated method table (README, docs/methods.md).
    models : str
        How many models the server holds: ``clusters`` (K, or K_hat), ``one`` (a
        global model) or ``per-client``.
    exports : str
        What a saved run keeps for onboarding outside the run: ``clusters`` (with
        the router), ``global``, ``descriptors`` (the cluster models with what
        assigns a label-free descriptor to one: FLUX) or ``none``.
    options : tuple of Option
        The run-config keys the method reads (besides the run's settings).
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
    benchmarks : tuple of str
        The paper's benchmarks that give the method rows besides Table 1 (which has every
        method): ``table2`` (zero-shot new clients) and ``map`` (the heterogeneity map).
        The rows are read from here; a new method lists itself, nothing else changes.
    rank : int
        Where the method sorts among the registered ones (the method tables, the
        configuration reference and ``--methods all`` follow it; ties by name).
    unread : callable, optional
        ``settings -> {key: why}``: the keys of its own options the method does not read
        under these settings (Ripple's ``strat-order`` with uniform sampling); a run that
        sets one away from its default is refused, a table leaves it out of that row.
    package : str
        The method's folder as a package (``ripple_flwr.methods.ifca``); set by
        :func:`~ripple_flwr.methods.registry.discover` from where ``spec.py`` was found.
    presets : mapping, optional
        ``name -> {key: value}``: run configurations a user sets with ``preset = "<name>"``
        (Ripple's ``recommended`` and ``paper``); the method must declare a ``preset``
        option whose choices are these names.
    """

    name: str
    summary: str
    models: ModelCount
    exports: Export
    options: tuple[Option, ...] = ()
    needs_router: bool = False
    routing_weights: bool = False
    needs_truth: bool = False
    family: str = ""
    sweeps_k: bool = False
    benchmarks: tuple[str, ...] = ()
    rank: int = 1000
    package: str = ""
    unread: Callable[[RunSettings], dict[str, str]] | None = None
    presets: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False, compare=False)

    @property
    def server(self) -> ModuleType:
        """The folder's ``server.py``, imported on first use (the server side only)."""
        if not self.package:
            raise ValueError(f"method {self.name!r} has no folder: register it through discover()")
        return importlib.import_module(f"{self.package}.server")

    @property
    def method_class(self) -> type:
        """The method's class (``server.METHOD``), which the engine runs; an incomplete folder
        is refused."""
        cls = getattr(self.server, "METHOD", None)
        if not isinstance(cls, type) or not issubclass(cls, Method):
            raise ValueError(
                f"method {self.name!r}: {self.package}.server has no METHOD class to run it "
                "(a subclass of ripple_flwr.methods.api.Method, with "
                f"{', '.join(REQUIRED_HOOKS)})"
            )
        missing = [h for h in REQUIRED_HOOKS if getattr(cls, h) is getattr(Method, h)]
        if missing:
            raise ValueError(
                f"method {self.name!r}: {cls.__name__} does not define {', '.join(missing)} "
                "(every method does: docs/adding-a-method.md)"
            )
        misspelt = misspelt_hooks(cls)
        if misspelt:
            name, hook = next(iter(misspelt.items()))
            raise ValueError(
                f"method {self.name!r}: {cls.__name__}.{name} is no hook the engine knows "
                f"(did you mean {hook}?); the engine would never call it. Rename it, or make "
                "a helper private (_name)"
            )
        if "state_fields" not in vars(cls):
            raise ValueError(
                f"method {self.name!r}: {cls.__name__} does not declare state_fields "
                "(what it keeps between rounds, saved for resume; () if nothing of its own)"
            )
        return cls

    @property
    def state(self) -> tuple[str, ...]:
        """What the method keeps between rounds and a checkpoint saves (imports the server side)."""
        return declared_fields(self.method_class)

    def check_settings(self, settings: RunSettings) -> None:
        """The method's own rules on the run's settings (its class's ``check_settings``)."""
        self.method_class.check_settings(settings)

    def make(self, inputs: MethodInputs) -> Any:
        """The method for one run (the engine holds it): ``server.build(spec, inputs)`` if
        the folder has one, else ``METHOD(settings, initial_state)``."""
        build = getattr(self.server, "build", None)
        if build is not None:
            return build(self, inputs)
        return self.method_class(inputs.settings, inputs.initial_state)

    def client_side(self) -> ClientSide:
        """What the method's clients do beyond plain SGD (its folder's ``client.py``), read
        once per process (clients ask on every message).

        A module that defines none of :data:`CLIENT_HOOKS`, or a public function whose name
        is near one but none (``summery``), is refused: the client would never call it.
        """
        return _client_side(self.name, self.package)

    @property
    def client_rule(self) -> str:
        """The clients' rule's name: the folder's name if ``client.py`` has ``rule``, else
        ``sgd``."""
        return self.package.rpartition(".")[2] if self.client_side().rule else "sgd"

    def check(self) -> None:
        """Refuse an incomplete or inconsistent entry, naming what is wrong (no import)."""
        if not self.name or self.name != self.name.strip().lower() or " " in self.name:
            raise ValueError(f"method name {self.name!r} must be a lower-case word")
        if not self.summary.strip():
            raise ValueError(f"method {self.name!r} has no summary")
        for opt in self.options:
            if not isinstance(opt, Option):
                raise ValueError(f"method {self.name!r}: option {opt!r} is not an Option")
        if self.models not in get_args(ModelCount):
            raise ValueError(f"method {self.name!r}: models={self.models!r} not in {ModelCount}")
        if self.exports not in get_args(Export):
            raise ValueError(f"method {self.name!r}: exports={self.exports!r} not in {Export}")
        if self.exports == "clusters" and not self.needs_router:
            raise ValueError(f"method {self.name!r} exports clusters but has no router")
        if not self.family:
            raise ValueError(f"method {self.name!r} has no family: one of {get_args(Family)}")
        if self.family not in get_args(Family):
            raise ValueError(f"method {self.name!r}: family={self.family!r} not in {Family}")
        unknown = sorted(set(self.benchmarks) - set(BENCHMARKS))
        if unknown:
            raise ValueError(
                f"method {self.name!r}: benchmarks {unknown} not in {', '.join(BENCHMARKS)}"
            )
        if self.sweeps_k and self.models != "clusters":
            raise ValueError(
                f"method {self.name!r} sweeps K but holds models={self.models!r}, not clusters"
            )


@functools.cache
def _client_side(name: str, package: str) -> ClientSide:
    """:meth:`MethodSpec.client_side` of the method ``name`` in the folder ``package``."""
    if not package or importlib.util.find_spec(f"{package}.client") is None:
        return ClientSide()
    module = importlib.import_module(f"{package}.client")
    own = {
        key
        for key, value in vars(module).items()
        if not key.startswith("_")
        and callable(value)
        and getattr(value, "__module__", None) == module.__name__
    }
    for key in sorted(own - set(CLIENT_HOOKS)):
        near = difflib.get_close_matches(key, CLIENT_HOOKS, n=1, cutoff=0.8)
        if near:
            raise ValueError(
                f"method {name!r}: {module.__name__}.{key} is no client hook (did you mean "
                f"{near[0]}?); the client would never call it"
            )
    hooks = {key: vars(module)[key] for key in CLIENT_HOOKS if key in own}
    if not hooks:
        raise ValueError(
            f"method {name!r}: {module.__name__} defines none of {', '.join(CLIENT_HOOKS)} "
            "(docs/adding-a-method.md)"
        )
    return ClientSide(**hooks)
