"""Where a run may write and read: folders chosen by whoever runs the process, not the run.

In a deployment the run config is written by whoever submits the run, but
the ServerApp writes on the SuperLink's machine; so ``results-path`` may
only name a file inside ``$RIPPLE_OUTPUT_DIR`` (default: ``outputs`` under
the server process's working folder), and an existing results file is kept
unless the run says ``overwrite-results = true``. Checked before any work.

The paths a run config names on the server's disk are confined the same way, so a
submitter can neither write folders anywhere nor probe which files exist: ``cache-dir``
must lie inside the output folder or this machine's cache root (``$RIPPLE_CACHE_DIR``,
else ``~/.cache/ripple-flwr``; the ClientApp checks it against its own machine's),
``checkpoint`` inside those or ``$RIPPLE_CHECKPOINT_DIR``, ``resume`` inside the output
folder. A path outside is refused from its text alone, before anything is looked up, with
one message whether or not the file exists.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ripple_flwr.runs.results import default_results_path
from ripple_flwr.settings import (
    CACHE_DIR_ENV,
    CHECKPOINT_DIR_ENV,
    OUTPUT_DIR_ENV,
    ConfigError,
    Environment,
    RunSettings,
    machine_cache_root,
)

# Written beside the results file; each is kept unless the run says overwrite-results = true.
SIDE_FILES = (".png", ".assignment.png", ".run.pt", ".resume.npz")
# Folders an output folder may not be (nor lie in): the filesystem's own.
SYSTEM_FOLDERS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib64",
    "/proc",
    "/sbin",
    "/sys",
    "/usr",
)


def output_folder() -> Path:
    """``$RIPPLE_OUTPUT_DIR``, else ``outputs``, as given (:func:`output_root` resolves it)."""
    return Environment.read().output_folder


def output_root() -> Path:
    """``$RIPPLE_OUTPUT_DIR``, else ``./outputs`` of the server process (resolved)."""
    return output_folder().expanduser().resolve()


def _relative_hint(raw: str, root: Path) -> str:
    """The relative form of the refusal's example, when the output folder has one."""
    if Path(raw).expanduser().is_absolute():
        return ""
    try:
        rel = root.relative_to(Path.cwd().resolve())
    except ValueError:
        return f" (a relative path resolves against the server's working folder {Path.cwd()})"
    return f" or '{rel / Path(raw).name}'"


def confined_results_path(settings: RunSettings) -> Path:
    """The results file of this run, or a :class:`ConfigError` naming the problem and the fix.

    A relative ``results-path`` resolves against the server's working folder
    (as before); the resolved file, ``..`` and links included, must lie in
    the output folder.
    """
    root = output_root()
    if root == Path(root.anchor) or any(root.is_relative_to(f) for f in SYSTEM_FOLDERS):
        raise ConfigError(
            f"{OUTPUT_DIR_ENV}={root} is the filesystem root or a system folder; point it at a "
            "folder made for this server's results (e.g. /srv/ripple/outputs)"
        )
    raw = settings.outputs.results_path or str(
        default_results_path(settings.method, settings.training.seed, root=root)
    )
    path = Path(raw).expanduser().resolve()
    if not path.is_relative_to(root):
        raise ConfigError(
            f"results-path={settings.outputs.results_path!r} resolves to {path}, outside the "
            f"server's output folder {root}. Use a path inside it, e.g. "
            f"results-path='{root / path.name}'{_relative_hint(raw, root)}, or, on the "
            f"machine that runs the server, set {OUTPUT_DIR_ENV} to the folder results may "
            "be written to."
        )
    if path.suffix != ".json":
        raise ConfigError(f"results-path must name a .json file, got {path.name!r}")
    raw_path = Path(raw).expanduser().absolute()
    files = [raw_path, *(raw_path.with_suffix(s) for s in (*SIDE_FILES, ".status"))]
    links = [f for f in files if f.is_symlink()]
    if links:
        raise ConfigError(
            f"{links[0]} is a symbolic link; the server never writes through one (it could "
            "point anywhere). Remove the link or choose another results-path"
        )
    if path.is_dir():
        raise ConfigError(f"results-path {path} is a folder; name a .json file inside it")
    resumed = resume_source(settings, path)
    existing = [
        p
        for p in (path, *(path.with_suffix(s) for s in SIDE_FILES))
        if p.exists() and p != resumed  # the checkpoint being resumed is the run's own
    ]
    if existing and not settings.outputs.overwrite_results:
        raise ConfigError(
            f"{existing[0]} exists already; choose another results-path, or set "
            "overwrite-results=true to replace it (and the .png / .assignment.png / .run.pt / "
            ".resume.npz beside it)"
        )
    return path


# The keys confined_results_path reads (method and seed name the default file), less
# overwrite-results: a run that never started must not replace a finished run's status.
RESULTS_KEYS = ("results-path", "resume", "checkpoint-every", "method", "seed")
_PLAIN_WORD = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def failed_run_results_path(run_config: Mapping[str, Any]) -> Path | None:
    """Where a run whose settings did not pass writes its ``<results>.status``, or ``None``.

    The results path the run config names, found as :func:`confined_results_path` finds
    a parsed run's: each key it reads (:data:`RESULTS_KEYS`) is taken from the raw run
    config when that key parses on its own, else left at its default; a ``method`` names
    the default file only when it is a plain word. ``overwrite-results`` is never taken:
    a path whose results (or side files) exist belongs to another run. If that path is
    refused (it is the bad key, lies outside the output folder, is another run's, ...),
    the default results path (a fresh name in the output folder); ``None`` when even that
    is refused (the output folder itself is). Never a path outside the output folder.
    """
    values: dict[str, Any] = {}
    for key in RESULTS_KEYS:
        if key not in run_config:
            continue
        try:
            RunSettings.from_run_config({key: run_config[key]})
        except (ValueError, TypeError):  # ConfigError is a ValueError
            continue
        values[key] = run_config[key]
    if not (isinstance(values.get("method"), str) and _PLAIN_WORD.fullmatch(values["method"])):
        values.pop("method", None)
    fallback = {k: v for k, v in values.items() if k in ("method", "seed")}
    for attempt in (values, fallback):
        try:
            return confined_results_path(RunSettings.from_run_config(attempt))
        except (ValueError, TypeError, OSError, RuntimeError):  # RuntimeError: a link loop
            continue
    return None


def confined_path(option: str, raw: str, roots: Sequence[Path], fix: str) -> Path:
    """``raw`` resolved, if it lies in one of ``roots``; else a :class:`ConfigError`.

    Decided from the text first (``~`` expanded, made absolute against the working
    folder, ``..`` folded), so a path outside is refused before the filesystem is asked
    anything and the message is the same whether or not it exists; a path inside must
    still resolve inside (a link there may not lead out).
    """
    lexical = Path(os.path.normpath(Path(raw).expanduser().absolute()))
    resolved_roots = [r.expanduser().resolve() for r in roots]
    forms = [*(Path(os.path.normpath(r.expanduser().absolute())) for r in roots), *resolved_roots]
    if any(lexical.is_relative_to(f) for f in forms):
        path = lexical.resolve()
        if any(path.is_relative_to(r) for r in resolved_roots):
            return path
    where = " or ".join(str(r) for r in resolved_roots)
    raise ConfigError(f"{option}={raw!r} is outside the folders it may name ({where}); {fix}")


def confined_cache_dir(settings: RunSettings) -> Path | None:
    """The run's ``cache-dir`` resolved (``None`` if unset), or a :class:`ConfigError`.

    It must lie inside the output folder or this machine's cache root: the ServerApp and
    every ClientApp check it (through the run-config check both call) on their own machine.
    """
    if not settings.outputs.cache_dir:
        return None
    return confined_path(
        "cache-dir",
        settings.outputs.cache_dir,
        [output_folder(), machine_cache_root()],
        f'leave cache-dir="" (the machine\'s own cache), name a folder inside these, or, on '
        f"the machine, set {CACHE_DIR_ENV} or {OUTPUT_DIR_ENV} to one that holds it",
    )


RESUME_AUTO = "auto"
RESUME_FRESH = ("", "fresh")


def resume_source(settings: RunSettings, results_path: Path) -> Path | None:
    """The server checkpoint this run continues from, or ``None`` (it starts afresh).

    ``resume = "auto"`` (the default): ``<results>.resume.npz`` when the run checkpoints
    (``checkpoint-every > 0``), does not ask to overwrite its results, and that file
    exists; ``"fresh"`` (or ``""``): never; any other value: that file, which must lie
    in the output folder (refused from its text alone otherwise).
    """
    mode = settings.outputs.resume.strip()
    if mode in RESUME_FRESH:
        return None
    if mode == RESUME_AUTO:
        own = results_path.with_suffix(".resume.npz")
        keep = settings.outputs.checkpoint_every > 0 and not settings.outputs.overwrite_results
        return own if keep and own.is_file() else None
    return confined_path(
        "resume",
        settings.outputs.resume,
        [output_folder()],
        "resume from the <results>.resume.npz a run wrote there",
    )


def confined_checkpoint(settings: RunSettings) -> Path | None:
    """The run's ``checkpoint`` resolved (``None`` if unset), or a :class:`ConfigError`.

    Allowed: the output folder, the server's cache root, and ``$RIPPLE_CHECKPOINT_DIR``.
    """
    if not settings.pretraining.checkpoint:
        return None
    roots = [output_folder(), machine_cache_root()]
    extra = Environment.read().checkpoint_dir
    if extra is not None:
        roots.append(extra)
    return confined_path(
        "checkpoint",
        settings.pretraining.checkpoint,
        roots,
        f"put the GMM-VAE checkpoint in one of them, or, on the server's machine, set "
        f"{CHECKPOINT_DIR_ENV} to the folder that holds it",
    )
