"""A saved server state, checked against this run before any work: which settings may differ."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ripple_flwr.app.run_config import (
    settings_defaults,
)
from ripple_flwr.app.server.resume.file import load_server_state
from ripple_flwr.io.integrity import IntegrityError
from ripple_flwr.runs.outputs import (
    RESUME_AUTO,
)
from ripple_flwr.settings import ConfigError, RunSettings

log = logging.getLogger("flwr.ripple")


RESUME_MAY_CHANGE = (
    "resume",
    "checkpoint-every",
    "num-server-rounds",
    "results-path",
    "overwrite-results",
    "round-timeout",
    "node-wait-timeout",
    "client-threads",
    "cache-dir",
    "new-clients",
    "alpha-new",
    "best-by-loss",
    "headline-weighting",
    "tracker",
    "tracker-dir",
)


AUTO_FIX = (
    '\n(resume="auto" continues the run of this results-path; to start it afresh set '
    'resume="fresh" and overwrite-results=true, or choose another results-path)'
)


def load_resume_state(settings: RunSettings, path: Path) -> dict[str, Any]:
    """The server state to resume from (``path``), checked against this run before any work.

    ``path`` comes from :func:`~ripple_flwr.runs.outputs.resume_source`: with
    ``resume = "auto"`` it is the run's own ``<results>.resume.npz``, and a checkpoint
    of the final round (the run died after it, before its results were written) is
    finished: the run writes its results without training again.
    """
    auto = settings.outputs.resume.strip() == RESUME_AUTO
    try:
        state = load_server_state(path)
    except (FileNotFoundError, IntegrityError) as err:
        raise ConfigError(str(err)) from err
    mine = settings.to_dict()
    # A key added after the checkpoint was written (a new method's option) stands at its
    # default there: the interrupted run ran as if it had been set so.
    theirs = {**settings_defaults(), **state["settings"]}
    differ = [
        f"{k}: checkpoint has {theirs.get(k)!r}, run has {v!r}"
        for k, v in mine.items()
        if k not in RESUME_MAY_CHANGE and theirs.get(k) != v
    ]
    if differ:
        raise ConfigError(
            f"cannot resume from {path}: the run's settings differ from the interrupted run's:\n  "
            + "\n  ".join(differ)
            + (AUTO_FIX if auto else "")
        )
    done = int(state["round"]) >= settings.training.num_server_rounds
    last = int(state["round"]) == settings.training.num_server_rounds
    if done and last and auto:
        log.info("%s is after the last round: writing the run's results", path)
    elif done and settings.data.new_clients and last:
        log.info("%s is a finished run: onboarding its new clients only", path)
    elif done:
        raise ConfigError(
            f"{path} is after round {state['round']}, but num-server-rounds="
            f"{settings.training.num_server_rounds}: nothing left to run (raise num-server-rounds)"
        )
    return state
