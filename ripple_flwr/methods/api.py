"""What a method hands the rest of the run, as typed values (light: no Flower, no torch).

The server's setup and the zero-shot round read a method's results through these, never
through a method's own attributes: :class:`Export` (what a saved run keeps for onboarding
outside the run) and :class:`Onboarding` (the zero-shot models of the new clients).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
