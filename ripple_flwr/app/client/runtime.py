"""What a client process keeps between messages, in one object: :data:`RUNTIME`.

Flower starts a ClientApp process per message in a deployment and reuses one in
simulation; either way, what is expensive to build is built once per process and kept
here, never in scattered module globals: the parsed run config, the node's settings, the
embedder (its scattering filters), the model skeleton, the node's own decoded files and
the torch thread count (the run's dataset and federation are the data layer's
:data:`~ripple_flwr.data.cache.PROCESS_DATA`, which :meth:`ClientRuntime.clear` clears
too). Each slot holds one value for one key (one run, one node, one
shape at a time), so memory stays bounded; :meth:`ClientRuntime.clear` forgets all of it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ripple_flwr.data.cache import PROCESS_DATA

T = TypeVar("T")


@dataclass
class Slot(Generic[T]):
    """One value, kept for the key it was built for; another key rebuilds it."""

    key: Hashable = None
    value: T | None = None

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        """The value for ``key``, built by ``build()`` if the slot holds another key's."""
        if self.value is None or self.key != key:
            self.value, self.key = None, None  # drop the old one before building
            self.value, self.key = build(), key
        return self.value

    def clear(self) -> None:
        self.key, self.value = None, None


@dataclass
class ClientRuntime:
    """The client process's caches, each a :class:`Slot`.

    Parameters
    ----------
    settings : Slot
        The parsed run config, keyed by the config's JSON.
    node_settings : dict
        ``num-partitions = 0`` settled per node count: count -> (run settings, node settings).
    embedder : Slot
        The SpectralEmbedder for the run's scattering and image shape.
    model : Slot
        The model skeleton (weights always overwritten by the received ones).
    local_data : Slot
        The node's own files, decoded and split.
    threads : int or None
        The torch thread count this process was set to.
    """

    settings: Slot[Any] = field(default_factory=Slot)
    node_settings: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    embedder: Slot[Any] = field(default_factory=Slot)
    model: Slot[Any] = field(default_factory=Slot)
    local_data: Slot[Any] = field(default_factory=Slot)
    threads: int | None = None

    def clear(self) -> None:
        """Forget everything (a new run in the same process starts from nothing)."""
        for slot in (self.settings, self.embedder, self.model, self.local_data):
            slot.clear()
        self.node_settings.clear()
        self.threads = None
        PROCESS_DATA.clear()


RUNTIME = ClientRuntime()
