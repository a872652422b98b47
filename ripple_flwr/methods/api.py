"""What a method is to the engine, and what it hands the rest of the run (light: no Flower).

:class:`Method` is the protocol the server's engine runs (structural: a method does not
subclass it, so its lineage stays short); the server's setup and the zero-shot round read
a method's results through typed values, never through its attributes: :class:`Export`
(what a saved run keeps for onboarding outside the run) and :class:`Onboarding` (the
zero-shot models of the new clients). docs/adding-a-method.md lists the optional hooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable


def declared_fields(cls: type) -> tuple[str, ...]:
    """A method class's saved fields: the ``state_fields`` of it and its bases, base first."""
    out: list[str] = []
    for klass in reversed(cls.__mro__):
        out += [n for n in klass.__dict__.get("state_fields", ()) if n not in out]
    return tuple(out)


@dataclass(frozen=True)
class Export:
    """What a finished run saves for onboarding outside it (``onboard.py``).

    Attributes
    ----------
    models
        The models a new client could be given, stacked on a leading axis (``None``: none).
    descriptor
        FLUX's descriptor assignment (centroids, scaler, its model), once it clustered.
    component_map
        Ripple's map from the router's components to the cluster models (HDBSCAN).
    """

    models: dict[str, Any] | None
    descriptor: dict[str, Any] | None = None
    component_map: Any = None


@dataclass(frozen=True)
class Onboarding:
    """The zero-shot models of the new clients.

    Attributes
    ----------
    payloads
        One model (or list of candidates) per new client, in their order; ``None``: the
        method has no zero-shot model.
    routed_uniformly
        The new clients the router did not recognise and gave the uniform w = 1/K, each
        ``{"partition", "reason"}``.
    """

    payloads: list[Any] | None
    routed_uniformly: list[dict[str, Any]] = field(default_factory=list)


@runtime_checkable
class Method(Protocol):
    """The hooks every method has; the engine asks the optional ones only if present.

    ``run`` is the engine (set when it takes the method): the method reads the run's
    ``settings``, ``clients``, ``num_rounds``, ``reference``, ``grid``, ``sampler`` and
    ``book`` there. Payloads are one model (an ``ArrayRecord``) or a list of candidates.
    """

    state_fields: ClassVar[tuple[str, ...]]
    run: Any

    def aggregate(self, server_round: int, accepted: list[Any]) -> Any:
        """Fold the round's validated replies in; the new global arrays, or ``None``."""
        ...

    def eval_payloads(self, arrays: Any) -> list[Any]:
        """The model (or candidates) each client is evaluated with, in client order."""
        ...

    def state(self) -> dict[str, Any]:
        """Its saved fields by name (``state_fields``, joined over its classes)."""
        ...

    def restore(self, fields: dict[str, Any]) -> None:
        """Put back checked saved fields (and check what ties them together)."""
        ...
