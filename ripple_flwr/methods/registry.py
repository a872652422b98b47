"""The registry of federated methods: one folder per method, found by :func:`discover`.

Config validation, the ServerApp, the ClientApp, the benchmarks and the README's method
list all read :data:`METHODS`. Every package under ``ripple_flwr/methods/`` whose name does
not start with ``_`` is a method folder: its ``spec.py`` holds ``SPECS``, the
:class:`MethodSpec` entries (the run-config keys each reads, whether it needs the router,
how many models the server holds, what a saved run exports), its ``server.py`` what runs it
on the server and its ``client.py``, where it has one, its clients' training rule. Only
``spec.py`` is imported here, so a client reads the registry without importing a strategy
or Flower's strategy classes.

Adding a method: one new folder (docs/adding-a-method.md).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import ripple_flwr.methods as methods_package
from ripple_flwr.methods.spec import (
    Export,
    Family,
    MethodInputs,
    MethodSpec,
    ModelCount,
)
from ripple_flwr.settings import Option, RunSettings

METHODS: dict[str, MethodSpec] = {}


def register(spec: MethodSpec) -> MethodSpec:
    """Add ``spec`` to the registry; a duplicate name or an incomplete entry is an error.

    An option key may be shared by several methods only as the same declaration
    (FedOpt's), and never clash with a :class:`RunSettings` field.

    Parameters
    ----------
    spec
        The method's entry (docs/adding-a-method.md), with its folder's ``package``.

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


def discover() -> tuple[str, ...]:
    """Register every method folder's ``SPECS`` not registered yet, in (rank, name) order.

    Looks through ``ripple_flwr.methods.__path__`` (a test may append a folder to it), imports
    each folder's ``spec.py`` and nothing else.

    Returns
    -------
    tuple of str
        The names it registered.
    """
    found: list[MethodSpec] = []
    for info in pkgutil.iter_modules(methods_package.__path__):
        if not info.ispkg or info.name.startswith("_"):
            continue
        package = f"{methods_package.__name__}.{info.name}"
        module = importlib.import_module(f"{package}.spec")
        specs = getattr(module, "SPECS", None)
        if not isinstance(specs, tuple) or not specs:
            raise ValueError(f"{package}.spec has no SPECS: a tuple of MethodSpec entries")
        for spec in specs:
            if not isinstance(spec, MethodSpec):
                raise ValueError(f"{package}.spec: SPECS holds {spec!r}, not a MethodSpec")
            if spec.name not in METHODS:
                found.append(dataclasses.replace(spec, package=package))
    for spec in sorted(found, key=lambda s: (s.rank, s.name)):
        register(spec)
    if found:  # every entry sorted again, so a late folder takes its rank's place
        ordered = sorted(METHODS.values(), key=lambda s: (s.rank, s.name))
        METHODS.clear()
        METHODS.update((s.name, s) for s in ordered)
    return tuple(s.name for s in found)


def forget(name: str) -> None:
    """Remove ``name`` from the registry (a test's toy method, after the test)."""
    METHODS.pop(name, None)


discover()


__all__ = [
    "METHODS",
    "Export",
    "Family",
    "MethodInputs",
    "MethodSpec",
    "ModelCount",
    "all_options",
    "discover",
    "forget",
    "get_method",
    "method_names",
    "register",
]
