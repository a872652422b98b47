"""What a method sees of the engine and what the engine asks of a method, in one module
(light: no Flower).

- :class:`Method`: the interface as declared, every hook typed with its default and one
  line of doc; a method's class subclasses it and overrides what it needs.
- :class:`RunView`: the engine as a method sees it (``method.run``): the run's settings and
  clients, its seeded generator, the active rows, the round size, counting bytes and
  refusing an update.
- The values that pass between them: :class:`Accepted` (one valid training reply),
  :class:`QueryResult` (the clients of the one-shot round), :class:`Export` (what a saved
  run keeps) and :class:`Onboarding` (the new clients' zero-shot models).

docs/adding-a-method.md shows a method end to end.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from ripple_flwr.settings import RunSettings

if TYPE_CHECKING:  # a reply's message: Flower's, never imported here (methods are Flower-free)
    from flwr.app import Message


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
    concepts
        Class-conditional Ripple's concept templates (``counts``, ``variances``, ``means``)
        and ``min_label_count``: a newcomer with labels is unmixed on them.
    """

    models: dict[str, Any] | None
    descriptor: dict[str, Any] | None = None
    component_map: Any = None
    concepts: dict[str, Any] | None = None


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


# -- what the engine hands a method --------------------------------------------------------
@dataclass
class Accepted:
    """One valid training reply: the row (client) it came from and what it carried."""

    row: int
    state: dict[str, np.ndarray]
    num_examples: int
    train_loss: float
    message: Message
    # Extra ArrayRecords a method declared (SCAFFOLD's control delta), validated like the model.
    extras: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    # The reply's metrics, converted and checked (train_metrics): what methods read.
    metrics: dict[str, int | float] = field(default_factory=dict)


@dataclass(frozen=True)
class SummaryRows:
    """A one-shot summary of a varying number of rows (PACFL's Dirichlet budget).

    A reply sends any whole number of ``width``-float rows, at most ``most`` of them; the
    server checks that (and every value finite) before reading it, and pads the summary
    with zero rows to ``most x width`` floats so that every client's has one length. The
    bytes counted are the reply's own.
    """

    width: int
    most: int

    @property
    def size(self) -> int:
        """The padded length, ``most x width`` floats."""
        return int(self.width) * int(self.most)


@dataclass
class QueryResult:
    """The usable clients, ordered by partition id, and why the others were left out."""

    node_ids: list[int]
    partition_ids: list[int]
    num_examples: list[int]
    features: np.ndarray | None
    rejected: dict[int, str] = field(default_factory=dict)
    bytes_up: list[int] = field(default_factory=list)
    client_seconds: list[float] = field(default_factory=list)
    num_test: list[int] = field(default_factory=list)  # test split sizes (0: not reported)
    sources: list[str] = field(default_factory=list)  # "benchmark" | "local", by row
    names: list[str] = field(default_factory=list)  # the nodes' own names (local data)

    def __len__(self) -> int:
        return len(self.node_ids)

    def select(self, rows: Sequence[int]) -> QueryResult:
        """The clients at ``rows`` (in that order); no rejections carried over."""
        rows = [int(r) for r in rows]
        return QueryResult(
            node_ids=[self.node_ids[r] for r in rows],
            partition_ids=[self.partition_ids[r] for r in rows],
            num_examples=[self.num_examples[r] for r in rows],
            features=None if self.features is None else self.features[rows],
            bytes_up=[self.bytes_up[r] for r in rows] if self.bytes_up else [],
            client_seconds=[self.client_seconds[r] for r in rows] if self.client_seconds else [],
            num_test=[self.num_test[r] for r in rows] if self.num_test else [],
            sources=[self.sources[r] for r in rows] if self.sources else [],
            names=[self.names[r] for r in rows] if self.names else [],
        )

    def extend(self, other: QueryResult) -> None:
        """Append ``other``'s clients (late joiners) after the current ones."""
        self.node_ids += other.node_ids
        self.partition_ids += other.partition_ids
        self.num_examples += other.num_examples
        if other.features is not None:
            self.features = (
                other.features
                if self.features is None or not len(self.features)
                else np.concatenate([self.features, other.features])
            )
        self.bytes_up += other.bytes_up
        self.client_seconds += other.client_seconds
        self.num_test += other.num_test
        self.sources += other.sources
        self.names += other.names
        self.rejected.update(other.rejected)

    def cap_sizes(self, cap: int) -> list[int]:
        """Hold every reported size to ``cap`` (a multiple of the median); the rows capped."""
        capped = [
            r
            for r in range(len(self))
            if self.num_examples[r] > cap or (self.num_test and self.num_test[r] > cap)
        ]
        self.num_examples = [min(n, cap) for n in self.num_examples]
        self.num_test = [min(n, cap) for n in self.num_test]
        return capped

    def known_train(self, row: int) -> int | None:
        """The training split size the client reported once, in the query round."""
        n = self.num_examples[row] if row < len(self.num_examples) else 0
        return int(n) if n > 0 else None

    def known_tests(self) -> list[int | None]:
        """The test split sizes reported in the query round, by row (``None``: unknown)."""
        return [int(n) if n > 0 else None for n in self.num_test] or [None] * len(self)


class ClientDataView(Protocol):
    """What a method's client side (its folder's ``client.py``) reads of the node's data."""

    x_train: np.ndarray  # (n, C, H, W) float32 in [0, 1]
    y_train: np.ndarray  # (n,) int64
    num_classes: int
    image_shape: tuple[int, int, int]

    @property
    def images(self) -> np.ndarray:
        """Every image of the node (train + test), the input of a label-free summary."""
        ...


@runtime_checkable
class RunView(Protocol):
    """The engine as a method sees it (``method.run``): the run's settings and clients, and
    the few things a method may ask of the run. Nothing else of the engine is a method's."""

    settings: RunSettings
    num_rounds: int
    reference: dict[str, Any]
    grid: Any  # the grid of the last admission, for a method's own side rounds (FLUX)

    @property
    def clients(self) -> QueryResult | None:
        """The training clients, in row order."""
        ...

    @property
    def new_clients(self) -> QueryResult:
        """The held-out clients onboarded zero-shot after training."""
        ...

    @property
    def rng(self) -> np.random.Generator:
        """The run's seeded generator (the sampler's): every random choice a method makes."""
        ...

    def active_rows(self) -> np.ndarray:
        """Rows that may be sampled (not left out after ``max-failures`` failed rounds)."""
        ...

    def round_size(self, available: int) -> int:
        """Clients per round, fewer when fewer are usable."""
        ...

    def add_bytes(self, down: int, up: int) -> None:
        """Count bytes a method's own side round sent and received in this round."""
        ...

    def refuse(self, reason: str) -> None:
        """Refuse this round's update (the model stays as it was), with the reason."""
        ...


class Method:
    """What the engine runs: a method's hooks, each with its default and one line of doc.

    A method's class (its folder's ``server.METHOD``) subclasses this (directly or through
    a base in ``ripple_flwr/app/server/bases``) and overrides the hooks it needs; the engine
    calls every hook by name through this class, never by a string. Four are required
    (:meth:`aggregate`, :meth:`eval_payloads`, :meth:`state`, :meth:`restore`) and
    ``state_fields`` (what it keeps between rounds) must be declared. Registration refuses
    a public name that looks like a hook but is none (a misspelt ``sample_row``): the
    engine would never call it (:func:`misspelt_hooks`).
    """

    state_fields: ClassVar[tuple[str, ...]] = ()
    run: RunView
    # The one-shot summary the clients send in the query round (kind, length: a fixed number
    # of floats, or SummaryRows for a varying number of rows) and the extra ArrayRecords
    # every training reply must carry (SCAFFOLD's control delta).
    query_summary: tuple[str, int | SummaryRows | None] = ("none", None)
    extra_reply_references: dict[str, Any] = {}  # noqa: RUF012 - read-only, never mutated
    num_models: int = 1  # how many models the server holds (and could hand a new client)

    # -- required --------------------------------------------------------------------------
    def aggregate(self, server_round: int, accepted: list[Accepted]) -> Any:
        """Fold the round's validated replies in; the new global arrays, or ``None``."""
        raise NotImplementedError

    def eval_payloads(self, arrays: Any, rows: np.ndarray) -> list[Any]:
        """The model (or candidates) each client at ``rows`` is evaluated with, in order."""
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        """Its saved fields by name (``state_fields``, joined over its classes)."""
        raise NotImplementedError

    def restore(self, fields: dict[str, Any]) -> None:
        """Put back checked saved fields (and check what ties them together)."""
        raise NotImplementedError

    @classmethod
    def check_settings(cls, settings: RunSettings) -> None:
        """Its own rules on the run's settings, before any work: raise ``ConfigError`` with
        the fix (default: none)."""

    # -- who takes part ----------------------------------------------------------------------
    def setup(self, clients: QueryResult) -> None:
        """After the one-shot round: the training clients, in row order (default: nothing)."""

    def add_clients(self, joined: QueryResult, server_round: int) -> None:
        """Late joiners, who take part from ``server_round`` on (default: nothing)."""

    def before_training(self, grid: Any, timeout: float) -> None:
        """Once before round 1, not again on resume: a side round (default: nothing)."""

    # -- a training round ----------------------------------------------------------------------
    def sample_rows(self, server_round: int) -> np.ndarray | None:
        """This round's rows; ``None`` (the default): the engine's seeded uniform draw."""
        return None

    def round_opened(self, server_round: int, grid: Any) -> None:
        """The round's rows are drawn, before any message (default: nothing)."""

    def configure_train(
        self, server_round: int, rows: np.ndarray, arrays: Any, config: Any, grid: Any
    ) -> list[Any] | None:
        """Its own train messages (Flower's strategies); ``None`` (the default): the engine
        builds them from :meth:`train_payloads`."""
        return None

    def train_payloads(self, rows: np.ndarray, arrays: Any) -> list[Any]:
        """The model each sampled client trains, in row order (default: ``arrays`` to all)."""
        return [arrays] * len(rows)

    def extra_train_records(self, rows: np.ndarray) -> list[dict[str, Any]]:
        """Extra records for each train message, in row order (default: none)."""
        return [{} for _ in rows]

    # -- its replies -----------------------------------------------------------------------
    def sent_state(self, row: int) -> dict[str, np.ndarray] | None:
        """The model sent to ``row`` this round if it keeps it; ``None``: decoded (default)."""
        return None

    def update_origin(self, a: Accepted, sent: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model a reply's update is measured from (default: what was sent)."""
        return sent

    def check_reply(self, a: Accepted) -> str | None:
        """Its own check of a valid reply: the reason to drop it, or ``None`` (default)."""
        return None

    def scored(self, server_round: int, per_client: list[Any]) -> None:
        """The round's personalised evaluation, per client (default: nothing)."""

    # -- after training ----------------------------------------------------------------------
    def finish(self, arrays: Any) -> Any:
        """The arrays the run ends with; ``None`` (the default): the last aggregate."""
        return None

    def onboard(self, new: QueryResult) -> Onboarding:
        """The new clients' zero-shot models (default: none)."""
        return Onboarding(None)

    def reference_models(self) -> list[Any]:
        """Every model it holds, for the best-by-loss reference (default: none)."""
        return []

    def zero_shot_extras(self) -> dict[str, Any]:
        """Its additions to the zero-shot record (default: none)."""
        return {}

    def export(self) -> Export:
        """What a saved run keeps for onboarding outside the run (default: nothing)."""
        return Export(None)

    # -- results and logs --------------------------------------------------------------------
    def run_record(self, rec: dict[str, Any]) -> dict[str, Any]:
        """The results record with its own fields added (default: unchanged)."""
        return rec

    def summary(self) -> None:
        """Log its own settings line when the run starts (default: nothing)."""


REQUIRED_HOOKS = ("aggregate", "eval_payloads", "state", "restore")
HOOKS: tuple[str, ...] = tuple(
    name for name in vars(Method) if not name.startswith("_") and name not in ("run",)
)


def misspelt_hooks(cls: type) -> dict[str, str]:
    """Public names a method class defines that are near a hook's name but none: name ->
    the hook it looks like (``sample_row`` -> ``sample_rows``). The engine never calls them."""
    own = {
        name
        for klass in cls.__mro__
        if klass not in (Method, object)
        for name in vars(klass)
        if not name.startswith("_")
    }
    out = {}
    for name in sorted(own - set(HOOKS)):
        near = difflib.get_close_matches(name, HOOKS, n=1, cutoff=0.8)
        if near:
            out[name] = near[0]
    return out
