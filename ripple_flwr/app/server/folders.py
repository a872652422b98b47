"""Where this server writes and caches, said at start, and whether it runs the submitted app.

The local SuperLink that ``flwr run .`` starts keeps the working folder, HOME and
environment of whoever started it first (docs/deployment.md, "The local SuperLink").
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from ripple_flwr.runs.outputs import OUTPUT_DIR_ENV, output_folder
from ripple_flwr.settings import Environment, RunSettings

log = logging.getLogger("flwr.ripple")


def app_folder() -> Path | None:
    """The folder of the app bundle this process runs (the loaded ``server_app.py``'s)."""
    module = sys.modules.get("server_app")
    where = getattr(module, "__file__", None)
    return Path(where).resolve().parent if where else None


def differs_from_app(app: Path | None, folder: Path, limit: int = 3) -> list[str]:
    """The bundle's Python files that ``folder`` lacks or holds otherwise (at most ``limit``).

    Empty when ``folder`` is the bundle itself, holds the same app, or the bundle is unknown.
    """
    if app is None or app == folder:
        return []
    files = [app / "server_app.py", app / "client_app.py", *sorted(app.glob("ripple_flwr/**/*.py"))]
    out = []
    for f in files:
        other = folder / f.relative_to(app)
        if f.is_file() and (not other.is_file() or other.read_bytes() != f.read_bytes()):
            out.append(str(f.relative_to(app)))
            if len(out) >= limit:
                break
    return out


def log_folders(settings: RunSettings) -> dict[str, Any]:
    """Say, at start, where this server writes and caches, and warn when it is not the app's.

    The local SuperLink that ``flwr run .`` starts keeps the working folder, HOME and
    environment of whoever started it first; a run submitted later from another checkout
    runs in that folder. Flower tells the ServerApp nothing of the folder a run was
    submitted from, so the check is the next best: the server's working folder must hold
    the submitted bundle's own app files (else it is another folder, or another version).
    """
    cwd = Path.cwd().resolve()
    app = app_folder()
    folders: dict[str, Any] = {
        "output_folder": str(output_folder().expanduser().resolve()),
        "output_folder_from": OUTPUT_DIR_ENV if Environment.read().output_dir else "cwd",
        "cache_folder": str(settings.outputs.cache_root().expanduser().resolve()),
        "working_folder": str(cwd),
        "home": str(Path.home()),
        "app_folder": None if app is None else str(app),
    }
    log.info(
        "Ripple server (pid %d): results under %s, caches under %s; working folder %s, "
        "HOME %s, app bundle %s",
        os.getpid(),
        folders["output_folder"],
        folders["cache_folder"],
        cwd,
        folders["home"],
        app or "(not known)",
    )
    differ = differs_from_app(app, cwd)
    folders["working_folder_differs_from_app"] = differ
    if differ and Environment.read().output_dir is None:
        log.warning(
            "this server's working folder %s is not the app folder that was submitted (its "
            "%s differ from the bundle's or are missing): results go to %s and caches to %s, "
            "the folders of the process that started this SuperLink. If that is not your "
            "checkout, stop the local SuperLink (docs/deployment.md, 'The local SuperLink') "
            "so that your next `flwr run .` starts one in your folder, or set %s before it "
            "starts.",
            cwd,
            ", ".join(differ),
            folders["output_folder"],
            folders["cache_folder"],
            OUTPUT_DIR_ENV,
        )
    return folders
