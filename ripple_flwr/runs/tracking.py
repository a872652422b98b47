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

import contextlib
import importlib.util
import json
import logging
import math
import os
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ripple_flwr.io.jsonable import to_jsonable
from ripple_flwr.settings import TRACKERS, ConfigError, RunSettings

EXTRA = 'pip install "ripple-flwr[track]"'
# tracker -> (the module it imports, the package that provides it)
PACKAGES = {
    "mlflow": ("mlflow", "mlflow-skinny"),
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
}
log = logging.getLogger("flwr.ripple")

EXPERIMENT = "ripple-flwr"  # MLflow experiment, W&B project
MLFLOW_DB = "mlflow.db"


class TrackerError(ConfigError):
    """An unknown tracker, or one whose package is not installed: one line with the fix."""


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
        raise TrackerError(_missing(tracker, package))


def _missing(tracker: str, package: str) -> str:
    return f"tracker {tracker!r} needs the {package} package, which is not installed: {EXTRA}"


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
    writer = {"mlflow": _to_mlflow, "tensorboard": _to_tensorboard, "wandb": _to_wandb}[tracker]
    return writer(run, where, experiment)


# -- MLflow -------------------------------------------------------------------------------
def _to_mlflow(run: TrackedRun, where: Path, experiment: str) -> Path:
    """One MLflow run in the SQLite store ``where/mlflow.db`` (MLflow's file store is retired)."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # offline: nothing leaves
    try:
        from mlflow.entities import Metric, Param, RunStatus, RunTag
        from mlflow.tracking import MlflowClient
    except ImportError as err:
        raise TrackerError(_missing("mlflow", "mlflow-skinny")) from err

    db = where / MLFLOW_DB
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name(experiment)
    if exp is not None:
        experiment_id = exp.experiment_id
    else:
        artifacts = (where / "mlartifacts" / experiment).as_uri()
        try:
            experiment_id = client.create_experiment(experiment, artifact_location=artifacts)
        except Exception:  # made meanwhile by another process tracking to the same store
            exp = client.get_experiment_by_name(experiment)
            if exp is None:
                raise
            experiment_id = exp.experiment_id
    tags = {"ripple.method": str(run.settings.get("method", "")), "ripple.step": str(run.step)}
    created = client.create_run(experiment_id, run_name=run.name, tags=tags)
    run_id = created.info.run_id
    now = int(time.time() * 1000)
    params = [Param(k, str(v)) for k, v in run.settings.items()]
    metrics = [
        Metric(key, value, now, step)
        for key, points in run.series.items()
        for step, value in sorted(points.items())
    ]
    metrics += [Metric(key, value, now, run.step) for key, value in run.figures.items()]
    for i in range(0, len(params), 100):  # MLflow's batch limits: 100 params, 1000 metrics
        client.log_batch(run_id, params=params[i : i + 100])
    for i in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[i : i + 1000])
    client.log_batch(run_id, tags=[RunTag("ripple.figures", ",".join(sorted(run.figures)))])
    client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED))
    return db


# -- TensorBoard --------------------------------------------------------------------------
def _to_tensorboard(run: TrackedRun, where: Path, experiment: str) -> Path:
    """Event files in ``where/<name>`` (a new folder: ``-2``, ``-3`` when the name is taken)."""
    del experiment  # one folder is one TensorBoard experiment
    if importlib.util.find_spec("tensorboard") is None:
        raise TrackerError(_missing("tensorboard", "tensorboard"))
    try:  # torch's writer (torch is a dependency); it needs the tensorboard package
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams
    except ImportError as err:
        raise TrackerError(_missing("tensorboard", "tensorboard")) from err

    folder = _fresh_folder(where, run.name)
    writer = SummaryWriter(log_dir=str(folder))
    try:
        for key, points in run.series.items():
            for step, value in sorted(points.items()):
                writer.add_scalar(key, value, step)
        for key, value in run.figures.items():
            writer.add_scalar(key, value, run.step)
        settings = {k: _hparam(v) for k, v in run.settings.items()}
        metrics = {k: v for k, v in run.figures.items() if k.startswith("final/")}
        for summary in hparams(settings, metrics):  # the HParams dashboard's three records
            writer.file_writer.add_summary(summary)
        table = "\n".join(f"| {k} | {v} |" for k, v in run.settings.items())
        writer.add_text("settings", "| key | value |\n|---|---|\n" + table)
        writer.flush()
    finally:
        writer.close()
    return folder


def _hparam(value: Any) -> Any:
    """What the HParams plugin stores as is: str, number, bool; anything else as text."""
    return value if isinstance(value, str | int | float | bool) else json.dumps(value)


def _fresh_folder(where: Path, name: str) -> Path:
    """``where/<name>``, or ``<name>-2``, ``-3``, ... : a folder no other run writes to."""
    stem = re.sub(r"[^A-Za-z0-9._=+-]+", "_", name).strip("._") or "run"
    for n in range(1, 10_000):
        folder = where / (stem if n == 1 else f"{stem}-{n}")
        try:
            folder.mkdir(parents=True)  # not exist_ok: two processes never share one
            return folder
        except FileExistsError:
            continue
    raise TrackerError(f"no free TensorBoard folder for {stem!r} in {where}")


# -- Weights & Biases ---------------------------------------------------------------------
WANDB_FOLDERS = {
    "WANDB_CACHE_DIR": ".wandb-cache",
    "WANDB_CONFIG_DIR": ".wandb-config",
    "WANDB_DATA_DIR": ".wandb-data",
    "WANDB_ARTIFACT_DIR": ".wandb-artifacts",
}


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in ``os.environ`` for the block; the old values (or none) after it."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _to_wandb(run: TrackedRun, where: Path, experiment: str) -> Path:
    """An offline W&B run under ``where/wandb``; W&B's own folders under ``where`` too."""
    env = {k: str(where / sub) for k, sub in WANDB_FOLDERS.items()}
    env.update({"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(where)})
    with _environment(env):
        try:
            import wandb
        except ImportError as err:
            raise TrackerError(_missing("wandb", "wandb")) from err
        settings = wandb.Settings(
            mode="offline",
            silent=True,
            console="off",
            x_disable_stats=True,  # no system metrics: the run is over
            disable_git=True,
            save_code=False,
            disable_job_creation=True,
        )
        wb = wandb.init(
            project=experiment,
            name=run.name,
            dir=str(where),
            config=run.settings,
            settings=settings,
            reinit="create_new",
        )
        try:
            folder = Path(wb.settings.sync_dir)
            for step, row in run.steps():
                wb.log(row, step=step)
            wb.summary.update(run.figures)
        finally:
            wb.finish()
        if wandb.run is None:  # stop W&B's service unless the caller has a run of its own
            wandb.teardown()
    return folder


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
