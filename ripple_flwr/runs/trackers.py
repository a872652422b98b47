"""The three trackers' writers: one finished run as MLflow, TensorBoard or W&B (offline) records.

Each writer takes a :class:`~ripple_flwr.runs.tracking.TrackedRun` and writes under one
folder only; each tracker's package is imported when its writer runs
(:func:`~ripple_flwr.runs.tracking.track_run` chooses the writer and checks the package).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ripple_flwr.settings import ConfigError

if TYPE_CHECKING:
    from ripple_flwr.runs.tracking import TrackedRun

EXTRA = 'pip install "ripple-flwr[track]"'
# tracker -> (the module it imports, the package that provides it)
PACKAGES = {
    "mlflow": ("mlflow", "mlflow-skinny"),
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
}

EXPERIMENT = "ripple-flwr"  # MLflow experiment, W&B project
MLFLOW_DB = "mlflow.db"


class TrackerError(ConfigError):
    """An unknown tracker, or one whose package is not installed: one line with the fix."""


def missing_package(tracker: str, package: str) -> str:
    """The one line that says which package a tracker needs, and how to install it."""
    return f"tracker {tracker!r} needs the {package} package, which is not installed: {EXTRA}"


# -- MLflow -------------------------------------------------------------------------------
def _to_mlflow(run: TrackedRun, where: Path, experiment: str) -> Path:
    """One MLflow run in the SQLite store ``where/mlflow.db`` (MLflow's file store is retired)."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # offline: nothing leaves
    try:
        from mlflow.entities import Metric, Param, RunStatus, RunTag
        from mlflow.tracking import MlflowClient
    except ImportError as err:
        raise TrackerError(missing_package("mlflow", "mlflow-skinny")) from err

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
        raise TrackerError(missing_package("tensorboard", "tensorboard"))
    try:  # torch's writer (torch is a dependency); it needs the tensorboard package
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams
    except ImportError as err:
        raise TrackerError(missing_package("tensorboard", "tensorboard")) from err

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
            raise TrackerError(missing_package("wandb", "wandb")) from err
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


WRITERS = {"mlflow": _to_mlflow, "tensorboard": _to_tensorboard, "wandb": _to_wandb}
