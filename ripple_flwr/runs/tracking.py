"""Send one finished run's results to an experiment tracker: MLflow, TensorBoard or W&B offline.

:func:`track_run` reads the results dict the server writes (``docs/results.md``, "The
results file") and records, under one folder and nowhere else:

- the run's settings: MLflow params, TensorBoard hparams (and a text summary), W&B config;
- per-round series, with the round as the step: personalised accuracy of each evaluation
  (``accuracy/weighted_mean``, ``accuracy/mean``, ``accuracy/std``, ``accuracy/min``,
  ``accuracy/max``, ``accuracy/coverage``, ``accuracy/scored``), the evaluation loss
  (``eval_loss/...``), the training loss (``train/loss``), replies and drops
  (``train/received``, ``train/dropped``), bytes (``bytes/down``, ``bytes/up``,
  ``bytes/eval_down``) and each round's wall time (``time/round_seconds``);
- one figure each, at the last round's step (W&B: the run's summary): ``final/accuracy``,
  ``final/accuracy_coverage``, ``final/zero_shot_accuracy`` (runs with new clients),
  ``final/num_models``, ``final/wall_seconds``, the time of each phase (``time/...``), total
  and model bytes, and whatever routing and clustering figures the file holds
  (``routing/l1``, ``routing/ari``, ``assignment/ari``, ``hdb/num_meta``,
  ``zero_shot/routing/l1``, ``router/routing_l1_heldout``, ``embedding_dp/sigma``, ...).

A figure that is missing or not finite (an evaluation that scored nobody) is left out.
Each tracker's package is imported only when it is used; ``pip install "ripple-flwr[track]"``
installs all three. Where the records go, under ``where``:

- ``mlflow``: the SQLite store ``where/mlflow.db`` (artifacts, none today, in
  ``where/mlartifacts``): ``mlflow ui --backend-store-uri sqlite:///<where>/mlflow.db``;
- ``tensorboard``: event files in ``where/<name>/``: ``tensorboard --logdir <where>``;
- ``wandb``: an offline run in ``where/wandb/offline-run-*`` (never online, no login), with
  W&B's cache, config and data folders under ``where/.wandb-*``: ``wandb sync <that folder>``.

The ``runs`` layer: no Flower, no app.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ripple_flwr.io.jsonable import to_jsonable
from ripple_flwr.runs.trackers import (
    EXPERIMENT,
    MLFLOW_DB,
    PACKAGES,
    WRITERS,
    TrackerError,
    missing_package,
)
from ripple_flwr.settings import TRACKERS, RunSettings

log = logging.getLogger("flwr.ripple")


# -- what is tracked ----------------------------------------------------------------------
@dataclass
class TrackedRun:
    """One run as a tracker sees it: settings, per-round series, one-off figures."""

    name: str
    settings: dict[str, Any]
    series: dict[str, dict[int, float]] = field(default_factory=dict)  # key -> round -> value
    figures: dict[str, float] = field(default_factory=dict)
    step: int = 0  # where TensorBoard and MLflow put the figures: the last round

    def add(self, key: str, step: int, value: Any) -> None:
        number = _number(value)
        if number is not None:
            self.series.setdefault(key, {})[int(step)] = number

    def figure(self, key: str, value: Any) -> None:
        number = _number(value)
        if number is not None:
            self.figures[key] = number

    def figures_of(self, prefix: str, block: Any, depth: int = 2) -> None:
        """Every number in ``block`` (a dict; nested dicts to ``depth``) as ``prefix/key``."""
        if not isinstance(block, Mapping):
            return
        for key, value in block.items():
            if isinstance(value, Mapping) and depth > 1:
                self.figures_of(f"{prefix}/{key}", value, depth - 1)
            else:
                self.figure(f"{prefix}/{key}", value)

    def steps(self) -> list[tuple[int, dict[str, float]]]:
        """The series as (round, {key: value}), rounds ascending (W&B logs one row a step)."""
        rows: dict[int, dict[str, float]] = {}
        for key, points in self.series.items():
            for step, value in points.items():
                rows.setdefault(step, {})[key] = value
        return sorted(rows.items())


def _number(value: Any) -> float | None:
    """A finite float from an int, float or bool; ``None`` for anything else."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def run_name(results: Mapping[str, Any]) -> str:
    """The results file's name when the settings give one, else ``<method>-seed<seed>``."""
    settings = results.get("settings") or {}
    path = str(settings.get("results-path") or "")
    if path:
        return Path(path).stem
    return f"{settings.get('method', 'run')}-seed{settings.get('seed', 0)}"


def tracked_run(results: Mapping[str, Any], name: str | None = None) -> TrackedRun:
    """What :func:`track_run` sends, read from one results dict (as the server writes it)."""
    res: dict[str, Any] = to_jsonable(dict(results))
    settings = dict(res.get("settings") or {})
    if not settings:
        raise ValueError("results has no 'settings': not a results file of this package")
    run = TrackedRun(name=name or run_name(res), settings=settings)

    evaluations = res.get("evaluations")
    if evaluations:
        for ev in evaluations:
            r = ev["round"]
            for stat, value in (ev.get("accuracy") or {}).items():
                run.add(f"accuracy/{stat}", r, value)
            for stat, value in (ev.get("loss") or {}).items():
                run.add(f"eval_loss/{stat}", r, value)
            run.add("accuracy/coverage", r, ev.get("coverage"))
            run.add("accuracy/scored", r, ev.get("scored"))
            run.add("bytes/eval_down", r, ev.get("bytes_down"))
    else:  # a file without the evaluations block: its per-round summary
        for r, acc in (res.get("accuracy_per_round") or {}).items():
            for stat in ("weighted_mean", "mean", "std", "coverage", "scored"):
                run.add(f"accuracy/{stat}", int(r), (acc or {}).get(stat))
    for r, loss in (res.get("train_loss_per_round") or {}).items():
        run.add("train/loss", int(r), loss)
    for r, sent in (res.get("bytes_per_round") or {}).items():
        run.add("bytes/down", int(r), (sent or {}).get("down"))
        run.add("bytes/up", int(r), (sent or {}).get("up"))
    for rnd in res.get("rounds") or []:
        r = rnd["round"]
        run.add("train/received", r, rnd.get("received"))
        run.add("train/dropped", r, len(rnd.get("dropped") or []))
        run.add("train/num_examples", r, rnd.get("num_examples"))
        run.add("time/round_seconds", r, rnd.get("wall_seconds"))

    run.figure("final/accuracy", res.get("final_accuracy"))
    run.figure("final/accuracy_coverage", res.get("final_accuracy_coverage"))
    run.figure("final/zero_shot_accuracy", res.get("zero_shot_accuracy"))
    run.figure("final/num_models", res.get("num_models"))
    timings = res.get("timings") or {}
    run.figure("final/wall_seconds", timings.get("total"))
    run.figures_of("time", timings)
    for direction in ("down", "up"):
        points = run.series.get(f"bytes/{direction}", {})
        if points:
            run.figure(f"bytes/total_{direction}", sum(points.values()))
    run.figure("bytes/model", res.get("model_bytes"))
    run.figure("bytes/embedding_per_client", res.get("embedding_bytes_per_client"))
    for block in ("routing", "assignment", "hdb", "embedding_dp", "flux"):
        run.figures_of(block, res.get(block))
    run.figures_of("zero_shot", res.get("zero_shot"), depth=3)  # and its best-by-loss reference
    run.figures_of("router", (res.get("checkpoint") or {}).get("report"), depth=1)

    rounds = [r for points in run.series.values() for r in points]
    run.step = max(rounds, default=int(settings.get("num-server-rounds") or 0))
    return run


# -- choosing a tracker -------------------------------------------------------------------
def check_tracker(tracker: str) -> None:
    """Raise :class:`TrackerError` (one line) unless ``tracker`` is known and installed.

    Looks the package up without importing it: cheap enough to call before a run's work.
    """
    if tracker not in TRACKERS:
        raise TrackerError(f"tracker={tracker!r} is not one of {', '.join(TRACKERS)}")
    if tracker == "none":
        return
    module, package = PACKAGES[tracker]
    if importlib.util.find_spec(module) is None:
        raise TrackerError(missing_package(tracker, package))


def open_command(tracker: str, where: str | Path) -> str:
    """The command that shows what :func:`track_run` wrote under ``where``."""
    where = Path(where)
    if tracker == "mlflow":
        return f"mlflow ui --backend-store-uri sqlite:///{where / MLFLOW_DB}"
    if tracker == "tensorboard":
        return f"tensorboard --logdir {where}"
    if tracker == "wandb":
        return f"wandb sync {where / 'wandb'}/offline-run-*  (or: wandb leet {where / 'wandb'})"
    return ""


def track_run(
    results: Mapping[str, Any],
    tracker: str,
    where: str | Path,
    *,
    name: str | None = None,
    experiment: str = EXPERIMENT,
) -> Path | None:
    """Send one finished run's ``results`` to ``tracker``, writing only under ``where``.

    ``tracker`` is one of ``none``, ``mlflow``, ``tensorboard``, ``wandb``; ``name`` names
    the run (default: the results file's stem, else ``<method>-seed<seed>``); ``experiment``
    is the MLflow experiment / W&B project. Returns what was written: the MLflow database,
    the TensorBoard run folder, the W&B offline run folder (``None`` for ``none``). An
    unknown tracker or a missing package raises :class:`TrackerError` before anything is
    written.
    """
    check_tracker(tracker)
    if tracker == "none":
        return None
    run = tracked_run(results, name)
    where = Path(where).expanduser().resolve()
    where.mkdir(parents=True, exist_ok=True)
    return WRITERS[tracker](run, where, experiment)


def track_results_file(path: str | Path, tracker: str, where: str | Path) -> Path | None:
    """:func:`track_run` of the results file at ``path`` (named after it), as it was written."""
    path = Path(path)
    return track_run(json.loads(path.read_text()), tracker, where, name=path.stem)


def tracker_folder(settings: RunSettings) -> Path | None:
    """Where a single run's ``tracker`` writes: ``tracker-dir``, else ``<outputs>/tracking``.

    ``None`` for ``tracker = "none"``. Checked before the run's work: the tracker's
    package must be installed, and ``tracker-dir`` must lie in the server's output folder
    (a run config may not write elsewhere on the server's disk).
    """
    check_tracker(settings.outputs.tracker)
    if settings.outputs.tracker == "none":
        return None
    from ripple_flwr.runs.outputs import OUTPUT_DIR_ENV, confined_path, output_folder

    if not settings.outputs.tracker_dir:
        return output_folder().expanduser().resolve() / "tracking"
    return confined_path(
        "tracker-dir",
        settings.outputs.tracker_dir,
        [output_folder()],
        f'leave tracker-dir="" (<output folder>/tracking), name a folder inside it, or, on the '
        f"server's machine, set {OUTPUT_DIR_ENV} to a folder that holds it",
    )


def track_finished_run(settings: RunSettings, path: str | Path) -> Path | None:
    """The server's call once it has written the results file at ``path``; never raises.

    The run is over and its results are on disk: a tracker that fails now (a store it
    cannot open, a full disk) is logged as a warning and loses nothing.
    """
    if settings.outputs.tracker == "none":
        return None
    try:
        where = tracker_folder(settings)
        out = track_results_file(path, settings.outputs.tracker, where)
    except Exception as err:
        log.warning(
            "could not send the run to %s (%s: %s); the results file %s is complete: "
            "track it later with ripple_flwr.runs.tracking.track_results_file",
            settings.outputs.tracker,
            type(err).__name__,
            " ".join(str(err).split()),
            path,
        )
        return None
    log.info(
        "run sent to %s: %s (%s)",
        settings.outputs.tracker,
        out,
        open_command(settings.outputs.tracker, where),
    )
    return out
