"""Typed run settings read from Flower's run config: parsing, types and ranges, nothing else.

A leaf: this package imports nothing else of ``ripple_flwr`` and nothing heavy, so every
layer may read settings. Every key of ``[tool.flwr.app.config]`` in pyproject.toml is
either a field of one of :class:`RunSettings`' groups (:mod:`.groups`: data, embedding,
training, evaluation, robustness, outputs, pre-training; dashes become underscores),
declared with its one-line doc and range by :func:`option`, or an :class:`Option`
(:mod:`.options`) that a method's registry entry declares and that lands in
:attr:`RunSettings.options`.
Which methods, datasets and models exist, and the rules that need them, are checked by the
app (:func:`ripple_flwr.app.run_config.parse_run_config`). The environment variables the
package reads are read in :mod:`.environment`, and only there.
"""

from ripple_flwr.settings.environment import (
    CACHE_DIR_ENV,
    CHECKPOINT_DIR_ENV,
    DATA_ROOT_ENV,
    FASHION_MNIST_ENV,
    OUTPUT_DIR_ENV,
    PARTITION_MAP_ENV,
    Environment,
    machine_cache_root,
)
from ripple_flwr.settings.groups import (
    CLIENT_DATAS,
    GROUPS,
    LABEL_KINDS,
    REFINES,
    ROUTERS,
    SAMPLINGS,
    TRACKERS,
    ClientData,
    DataSettings,
    EmbeddingSettings,
    EvaluationSettings,
    LabelKind,
    OutputSettings,
    PretrainingSettings,
    Refine,
    RobustnessSettings,
    Router,
    Sampling,
    ScoreWeighting,
    Tracker,
    TrainingSettings,
)
from ripple_flwr.settings.options import ConfigError, Option, option
from ripple_flwr.settings.run import RunSettings

__all__ = [
    "CACHE_DIR_ENV",
    "CHECKPOINT_DIR_ENV",
    "CLIENT_DATAS",
    "DATA_ROOT_ENV",
    "FASHION_MNIST_ENV",
    "GROUPS",
    "LABEL_KINDS",
    "OUTPUT_DIR_ENV",
    "PARTITION_MAP_ENV",
    "REFINES",
    "ROUTERS",
    "SAMPLINGS",
    "TRACKERS",
    "ClientData",
    "ConfigError",
    "DataSettings",
    "EmbeddingSettings",
    "Environment",
    "EvaluationSettings",
    "LabelKind",
    "Option",
    "OutputSettings",
    "PretrainingSettings",
    "Refine",
    "RobustnessSettings",
    "Router",
    "RunSettings",
    "Sampling",
    "ScoreWeighting",
    "Tracker",
    "TrainingSettings",
    "machine_cache_root",
    "option",
]
