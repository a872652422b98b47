"""Where the ServerApp may write: one output folder, chosen by whoever runs the server.

In a deployment the run config is written by whoever submits the run, but
the ServerApp writes on the SuperLink's machine; so ``results-path`` may
only name a file inside ``$RIPPLE_OUTPUT_DIR`` (default: ``outputs`` under
the server process's working folder), and an existing results file is kept
unless the run says ``overwrite-results = true``. Checked before any work.
"""

from __future__ import annotations

import os
from pathlib import Path

from ripple_flwr.runs.results import default_results_path
from ripple_flwr.settings import ConfigError, RunSettings

OUTPUT_DIR_ENV = "RIPPLE_OUTPUT_DIR"
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


def output_root() -> Path:
    """``$RIPPLE_OUTPUT_DIR``, else ``./outputs`` of the server process (resolved)."""
    return Path(os.environ.get(OUTPUT_DIR_ENV) or "outputs").expanduser().resolve()


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
    raw = settings.results_path or str(
        default_results_path(settings.method, settings.seed, root=root)
    )
    path = Path(raw).expanduser().resolve()
    if not path.is_relative_to(root):
        raise ConfigError(
            f"results-path={settings.results_path!r} resolves to {path}, outside the server's "
            f"output folder {root}. Use a path inside it (a relative path such as "
            f"'outputs/run.json'), or, on the machine that runs the server, set "
            f"{OUTPUT_DIR_ENV} to the folder results may be written to."
        )
    if path.suffix != ".json":
        raise ConfigError(f"results-path must name a .json file, got {path.name!r}")
    raw_path = Path(raw).expanduser().absolute()
    files = [raw_path, *(raw_path.with_suffix(s) for s in SIDE_FILES)]
    links = [f for f in files if f.is_symlink()]
    if links:
        raise ConfigError(
            f"{links[0]} is a symbolic link; the server never writes through one (it could "
            "point anywhere). Remove the link or choose another results-path"
        )
    if path.is_dir():
        raise ConfigError(f"results-path {path} is a folder; name a .json file inside it")
    resumed = Path(settings.resume).expanduser().resolve() if settings.resume else None
    existing = [
        p
        for p in (path, *(path.with_suffix(s) for s in SIDE_FILES))
        if p.exists() and p != resumed  # the checkpoint being resumed is the run's own
    ]
    if existing and not settings.overwrite_results:
        raise ConfigError(
            f"{existing[0]} exists already; choose another results-path, or set "
            "overwrite-results=true to replace it (and the .png / .assignment.png / .run.pt / "
            ".resume.npz beside it)"
        )
    return path
