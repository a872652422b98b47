"""The run's typed settings: :class:`RunSettings`, the method, its options and one of each group.

Every run-config key is a field of one group (:mod:`.groups`; dashes become underscores)
or a method's declared :class:`Option` (in :attr:`RunSettings.options`); the keys and
``pyproject.toml`` do not show the groups. In code a value is read through its group:
``settings.data.alpha``, ``settings.training.lr``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from ripple_flwr.settings.groups import (
    GROUPS,
    DataSettings,
    EmbeddingSettings,
    EvaluationSettings,
    OutputSettings,
    PretrainingSettings,
    RobustnessSettings,
    TrainingSettings,
)
from ripple_flwr.settings.options import (
    ConfigError,
    Option,
    field_option,
    option,
    unknown_keys_message,
)


@dataclass(frozen=True)
class RunSettings:
    """One run, as typed values in groups (defaults: the paper's where they fit a CPU).

    Each field's doc and range are in its group's declaration (the configuration
    reference, ``docs/configuration.md``, is generated from them); method options
    (FedProx's mu, Krum's f, ...) are in :attr:`options`, declared by the methods'
    registry entries. :meth:`of` builds settings from flat field names, as the run
    config names them.
    """

    method: str = option("ripple", "a registered method (docs/methods.md)")
    data: DataSettings = field(default_factory=DataSettings)
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    training: TrainingSettings = field(default_factory=TrainingSettings)
    evaluation: EvaluationSettings = field(default_factory=EvaluationSettings)
    robustness: RobustnessSettings = field(default_factory=RobustnessSettings)
    outputs: OutputSettings = field(default_factory=OutputSettings)
    pretraining: PretrainingSettings = field(default_factory=PretrainingSettings)
    options: Mapping[str, Any] = field(default_factory=dict, compare=True)
    """Method options by dashed key (declared by the methods' registry entries)."""

    def __post_init__(self) -> None:
        self.validate()

    # -- building ----------------------------------------------------------------------
    @classmethod
    def of(cls, options: Mapping[str, Any] | None = None, **values: Any) -> RunSettings:
        """Settings from flat field names (``alpha=0.1, lr=0.05``), each routed to its group.

        Parameters
        ----------
        options
            Method options by dashed key, as :attr:`options`.
        **values
            Fields of any group, or ``method``; an unknown name is a ``TypeError``.
        """
        method = values.pop("method", cls.__dataclass_fields__["method"].default)
        groups = {g: cls._group_values(g, values) for g in GROUPS}
        if values:
            raise TypeError(f"RunSettings has no field(s) {', '.join(sorted(values))}")
        built = {g: GROUPS[g](**v) for g, v in groups.items()}
        return cls(method=method, **built, options=dict(options or {}))

    @staticmethod
    def _group_values(group: str, values: dict[str, Any]) -> dict[str, Any]:
        names = [f.name for f in fields(GROUPS[group])]
        return {n: values.pop(n) for n in names if n in values}

    def updated(self, **values: Any) -> RunSettings:
        """A copy with flat field names replaced in their groups (``num_partitions=8``)."""
        changes: dict[str, Any] = {}
        if "method" in values:
            changes["method"] = values.pop("method")
        for g in GROUPS:
            own = self._group_values(g, values)
            if own:
                changes[g] = replace(getattr(self, g), **own)
        if values:
            raise TypeError(f"RunSettings has no field(s) {', '.join(sorted(values))}")
        return replace(self, **changes)

    # -- parsing -----------------------------------------------------------------------
    @classmethod
    def fields_as_options(cls) -> tuple[Option, ...]:
        """Every field of every group as an :class:`Option` (its doc, default and range)."""
        return tuple(_FIELD_OPTIONS.values())

    @classmethod
    def attribute_of(cls, key: str) -> str:
        """Where a run-config key is read in code: ``alpha`` -> ``data.alpha``.

        A method option (not a field of any group) reads ``option("<key>")``.
        """
        return _ATTRIBUTE.get(key, f'option("{key}")')

    @classmethod
    def from_run_config(
        cls, run_config: Mapping[str, Any], options: Iterable[Option] = ()
    ) -> RunSettings:
        """Parse Flower's run config (dashed keys, TOML scalars) into typed settings.

        ``options`` are the methods' declared options: their values land in
        :attr:`options`, defaults filled in. Unknown keys are refused (a typo
        would otherwise silently keep a default); ints are accepted where floats
        are expected, never the reverse.
        """
        declared = {o.key: o for o in options}
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        unknown = []
        for key, raw in run_config.items():
            key = str(key)
            if key in _FIELD_OPTIONS:
                values[_FIELD_OPTIONS[key].name] = _FIELD_OPTIONS[key].coerce(raw)
            elif key in declared:
                extra[key] = declared[key].parse(raw)
            else:
                unknown.append(key)
        if unknown:
            raise ConfigError(unknown_keys_message(unknown, [*_FIELD_OPTIONS, *declared]))
        for o in declared.values():
            extra.setdefault(o.key, o.default)
        return cls.of(options=extra, **values)

    def to_dict(self) -> dict[str, Any]:
        """Dashed keys, as in pyproject.toml: what the results file records."""
        out = {"method": self.method}
        for g in GROUPS:
            group = getattr(self, g)
            out |= {f.name.replace("_", "-"): getattr(group, f.name) for f in fields(group)}
        return out | dict(self.options)

    def option(self, key: str) -> Any:
        """A method option's value by key (as parsed; see :meth:`Option.of` for defaults)."""
        try:
            return self.options[key]
        except KeyError:
            raise KeyError(f"option {key!r} is not set; known: {', '.join(self.options)}") from None

    # -- validation --------------------------------------------------------------------
    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the key and the allowed values.

        Each group checks its own fields when it is built; what spans groups is here.
        """
        _FIELD_OPTIONS["method"].check(self.method)
        for g, cls in GROUPS.items():
            if not isinstance(getattr(self, g), cls):
                raise TypeError(f"RunSettings.{g} must be a {cls.__name__}")
        data, training = self.data, self.training
        if data.num_partitions and training.clients_per_round > data.num_partitions:
            raise ConfigError(
                f"clients-per-round={training.clients_per_round} exceeds num-partitions="
                f"{data.num_partitions}"
            )

    # -- derived -----------------------------------------------------------------------
    def with_nodes(self, num_nodes: int) -> RunSettings:
        """``num-partitions = 0`` settled: ``num_nodes`` SuperNodes, less the new clients, train.

        ``clients-per-round`` is capped at that number. Settings with an explicit
        ``num-partitions`` are returned unchanged.
        """
        data = self.data
        if not data.partitions_from_nodes:
            return self
        train = int(num_nodes) - data.new_clients
        if train < 1:
            raise ConfigError(
                f"num-partitions=0 takes the nodes that connect, less new-clients="
                f"{data.new_clients}; {num_nodes} node(s) leave no training client"
            )
        return self.updated(
            num_partitions=train, clients_per_round=min(self.training.clients_per_round, train)
        )

    def federation_kwargs(self) -> dict[str, Any]:
        """Arguments of :func:`ripple_flwr.data.build_federation` (besides the dataset)."""
        data = self.data
        kwargs: dict[str, Any] = {
            "num_partitions": data.num_partitions,
            "partition_size": data.partition_size,
            "alpha": float(data.alpha),
            "aux_size": data.aux_size,
            "num_components": self.embedding.num_components,
            "label_kind": data.label_kind,
            "test_fraction": float(data.test_fraction),
            "seed": data.data_seed,
        }
        if data.client_concepts != "none":  # absent when none: earlier caches stay valid
            kwargs["client_concepts"] = data.client_concepts
        if data.partition_size_spread != 1:  # absent when equal: earlier caches stay valid
            kwargs["size_spread"] = float(data.partition_size_spread)
        if data.new_clients:  # absent when 0, so runs without new clients share a cache
            kwargs["new_partitions"] = data.new_clients
            kwargs["alpha_new"] = float(data.alpha_new)
            if data.new_partition_size:  # absent when 0: earlier caches stay valid
                kwargs["new_partition_size"] = data.new_partition_size
        return kwargs

    def key(self) -> str:
        """A short hash of all settings (in-process cache key)."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def _field_options() -> dict[str, Option]:
    out = {"method": field_option(RunSettings, RunSettings.__dataclass_fields__["method"])}
    for cls in GROUPS.values():
        out |= {o.key: o for o in (field_option(cls, f) for f in fields(cls))}
    return out


_FIELD_OPTIONS = _field_options()
_ATTRIBUTE = {"method": "method"} | {
    f.name.replace("_", "-"): f"{g}.{f.name}" for g, cls in GROUPS.items() for f in fields(cls)
}
