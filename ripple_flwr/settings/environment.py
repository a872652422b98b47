"""Every environment variable the package reads, read here and only here, with one rule.

Unset, empty or blank means the default; a path is ``~``-expanded. Who runs a process sets
these (never a run config): where results may be written (``RIPPLE_OUTPUT_DIR``), the
machine's cache (``RIPPLE_CACHE_DIR``), one more folder a ``checkpoint`` may name
(``RIPPLE_CHECKPOINT_DIR``), where datasets live (``RIPPLE_DATA_ROOT``,
``RIPPLE_FASHION_MNIST_DIR``), the server's node -> partition binding
(``RIPPLE_PARTITION_MAP``) and Hugging Face's offline switch (``HF_HUB_OFFLINE``).
:meth:`Environment.read` reads them all at once; it is cheap and reads the live
environment each time, so a test or a sweep that sets a variable is seen at once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

OUTPUT_DIR_ENV = "RIPPLE_OUTPUT_DIR"
CACHE_DIR_ENV = "RIPPLE_CACHE_DIR"
CHECKPOINT_DIR_ENV = "RIPPLE_CHECKPOINT_DIR"
DATA_ROOT_ENV = "RIPPLE_DATA_ROOT"
FASHION_MNIST_ENV = "RIPPLE_FASHION_MNIST_DIR"
PARTITION_MAP_ENV = "RIPPLE_PARTITION_MAP"
HF_OFFLINE_ENV = "HF_HUB_OFFLINE"
VARIABLES = (
    OUTPUT_DIR_ENV,
    CACHE_DIR_ENV,
    CHECKPOINT_DIR_ENV,
    DATA_ROOT_ENV,
    FASHION_MNIST_ENV,
    PARTITION_MAP_ENV,
    HF_OFFLINE_ENV,
)
DEFAULT_OUTPUT_DIR = Path("outputs")
DEFAULT_CACHE_ROOT = Path("~/.cache/ripple-flwr")


def _path(raw: str | None) -> Path | None:
    return Path(raw.strip()).expanduser() if raw and raw.strip() else None


@dataclass(frozen=True)
class Environment:
    """The variables of :data:`VARIABLES`, as this process sees them.

    Parameters
    ----------
    output_dir : Path or None
        ``RIPPLE_OUTPUT_DIR``: the folder results may be written to (None: unset).
    cache_dir : Path or None
        ``RIPPLE_CACHE_DIR``: the machine's cache root (None: unset).
    checkpoint_dir : Path or None
        ``RIPPLE_CHECKPOINT_DIR``: one more folder a run's ``checkpoint`` may name.
    data_root : Path or None
        ``RIPPLE_DATA_ROOT``: torchvision's datasets.
    fashion_mnist_dir : Path or None
        ``RIPPLE_FASHION_MNIST_DIR``: Fashion-MNIST's IDX files.
    partition_map : Path or None
        ``RIPPLE_PARTITION_MAP``: the server's node id -> partition id JSON file.
    hf_offline : bool
        ``HF_HUB_OFFLINE`` is 1, true, yes or on.
    """

    output_dir: Path | None = None
    cache_dir: Path | None = None
    checkpoint_dir: Path | None = None
    data_root: Path | None = None
    fashion_mnist_dir: Path | None = None
    partition_map: Path | None = None
    hf_offline: bool = False

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None) -> Environment:
        """Every variable from ``environ`` (default: this process's environment)."""
        env = os.environ if environ is None else environ
        offline = env.get(HF_OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")
        return cls(
            output_dir=_path(env.get(OUTPUT_DIR_ENV)),
            cache_dir=_path(env.get(CACHE_DIR_ENV)),
            checkpoint_dir=_path(env.get(CHECKPOINT_DIR_ENV)),
            data_root=_path(env.get(DATA_ROOT_ENV)),
            fashion_mnist_dir=_path(env.get(FASHION_MNIST_ENV)),
            partition_map=_path(env.get(PARTITION_MAP_ENV)),
            hf_offline=offline,
        )

    @property
    def output_folder(self) -> Path:
        """``RIPPLE_OUTPUT_DIR``, else ``outputs`` (relative to the working folder)."""
        return self.output_dir or DEFAULT_OUTPUT_DIR

    @property
    def cache_root(self) -> Path:
        """``RIPPLE_CACHE_DIR``, else ``~/.cache/ripple-flwr``."""
        return self.cache_dir or DEFAULT_CACHE_ROOT.expanduser()


def machine_cache_root() -> Path:
    """This machine's cache folder: ``$RIPPLE_CACHE_DIR``, else ``~/.cache/ripple-flwr``.

    Set by whoever runs the process, never by a run config (``cache-dir`` may only
    name a folder inside it or inside the output folder: :mod:`ripple_flwr.runs.outputs`).
    """
    return Environment.read().cache_root
