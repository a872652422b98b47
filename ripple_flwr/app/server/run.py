"""ServerApp logic: settings, router checkpoint (loaded or pre-trained, cached), run, results.

``server_app.py`` only calls :func:`run_server`; everything here is plain
Python over a Flower ``Grid``, so the tests drive it with an in-process grid.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from flwr.serverapp import Grid

from ripple_flwr import data as data_package
from ripple_flwr.app.flower_internals import nodes_fixed_at_start
from ripple_flwr.app.protocol.records import mechanism_records, state_to_record
from ripple_flwr.app.run_config import (
    check_image_shape,
    check_run,
    parse_run_config,
)
from ripple_flwr.app.server.evaluation.zero_shot import onboard_new_clients
from ripple_flwr.app.server.folders import log_folders
from ripple_flwr.app.server.results import results_record
from ripple_flwr.app.server.resume.check import load_resume_state
from ripple_flwr.app.server.roster.claims import load_partition_map
from ripple_flwr.app.server.roster.node_wait import (
    NotEnoughClientsError,
    wait_for_nodes,
    wait_for_settled_nodes,
)
from ripple_flwr.app.server.run_data import RunData, resolve_run_data
from ripple_flwr.app.server.setup import (
    build_engine,
    initial_state,
    pretrained_report,
    resolve_checkpoint,
    save_for_onboarding,
)
from ripple_flwr.data.images import ImageFormatError
from ripple_flwr.data.local import LocalDataError
from ripple_flwr.methods.registry import get_method
from ripple_flwr.router.run_embedding import run_embedder
from ripple_flwr.runs.outputs import (
    confined_checkpoint,
    confined_results_path,
    failed_run_results_path,
    resume_source,
)
from ripple_flwr.runs.results import write_results, write_status
from ripple_flwr.settings import ConfigError, RunSettings

log = logging.getLogger("flwr.ripple")

# Stages of a run (in <results>.status) that expected_failure tells apart.
CONFIG_STAGE = "checking the run config"
DATA_STAGE = "loading the data"
ROUTER_STAGE = "loading or pre-training the router"
_DATA_PACKAGE = Path(data_package.__file__).resolve().parent
_REPORTED = "_ripple_reported_line"  # set on an expected failure once it is logged


def avoid_hugepage_stalls() -> None:
    """Stop numpy from asking for transparent huge pages for its large arrays.

    The server allocates a few (K, P) arrays per round. numpy marks arrays of
    4 MB and more MADV_HUGEPAGE; with the kernel's usual ``defrag=madvise``
    each first touch may then compact memory synchronously, which in a
    process fragmented by torch cost 20 ms per 12 MB array here (more than
    the arithmetic). Same as ``NUMPY_MADVISE_HUGEPAGE=0``, which must be set
    before numpy is imported and so cannot be set from a ServerApp.
    """
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # pragma: no cover - numpy < 2
        return
    _set_madvise_hugepage(False)


def ship_embedding_dp(settings: RunSettings, ckpt, data: RunData, engine) -> dict[str, Any]:
    """Fix the public DP mechanism from D_aux and the checkpoint; send it with every query."""
    from ripple_flwr.privacy.release import public_mechanism

    t0 = time.perf_counter()
    mech = public_mechanism(
        ckpt,
        data,
        run_embedder(settings, data.image_shape),
        epsilon=settings.embedding.embedding_dp_epsilon,
        delta=settings.embedding.embedding_dp_delta,
        clip=settings.embedding.embedding_dp_clip,
        seed=settings.data.data_seed,
        client_size=settings.data.partition_size,
    )
    engine.roster.expect(query_records=mechanism_records(mech))
    info = {
        "epsilon": mech.epsilon,
        "delta": mech.delta,
        "clip": mech.clip,
        "clip_source": "run config"
        if settings.embedding.embedding_dp_clip
        else "server reference (q=0.9)",
        "sigma": mech.sigma,
        "dims_noised": int(mech.basis.shape[1]),
        "mechanism": "Gaussian (analytic), ridge projection in the GMM-VAE input space",
        "seconds": time.perf_counter() - t0,
    }
    log.info(
        "embedding DP: (%.3g, %.1g) per client, clip %.3f, sigma %.3f on %d coordinates",
        mech.epsilon,
        mech.delta,
        mech.clip,
        mech.sigma,
        info["dims_noised"],
    )
    return info


def settle_partitions(grid: Grid, settings: RunSettings) -> RunSettings:
    """``num-partitions = 0``: wait for the node count to settle and take it.

    The benchmark partitions are then built for that many nodes (less the new
    clients); each simulated node builds the same from its own node config's
    ``num-partitions``. An explicit ``num-partitions`` is returned unchanged once that many
    nodes are connected (:class:`NotEnoughClientsError` if they never are).
    """
    if not settings.data.partitions_from_nodes:
        # Too few nodes is found here, before the data, the router's pre-training or the
        # query round: one line within node-wait-timeout (in simulation, once the count of
        # SuperNodes has settled: a few seconds).
        wait_for_nodes(
            grid,
            settings.data.num_partitions,
            settings.robustness.node_wait_timeout,
            allowed=settings.data.total_partitions,
            local=settings.data.client_data == "local",
            final_once_settled=nodes_fixed_at_start(grid),
        )
        return settings
    nodes = wait_for_settled_nodes(grid, settings.robustness.node_wait_timeout)
    resolved = settings.with_nodes(nodes)
    check_run(resolved)  # e.g. mnist-5k's 5,000 images for that many partitions
    log.info(
        "num-partitions=0: %d node(s) connected; the run has %d training partitions%s and "
        "trains %d a round",
        nodes,
        resolved.data.num_partitions,
        f" and {resolved.data.new_clients} new clients" if resolved.data.new_clients else "",
        resolved.training.clients_per_round,
    )
    return resolved


@dataclass
class PreparedRun:
    """What a run has before its rounds: data, router checkpoint, engine, initial model."""

    data: RunData
    engine: Any
    state: dict[str, np.ndarray]
    checkpoint_info: dict[str, Any] | None
    pretrained: dict[str, Any] | None
    embedding_dp: dict[str, Any] | None
    data_seconds: float
    pretrain_seconds: float


def prepare_run(
    settings: RunSettings, bound: dict[int, int] | None, stage: dict[str, str] | None = None
) -> PreparedRun:
    """The run's data, its router (loaded or pre-trained), the engine and its roster.

    ``stage["stage"]`` (when given) says ``loading the data`` while the data loads.
    """
    stage = {"stage": "preparing"} if stage is None else stage
    pretrained = pretrained_report(settings)
    t0 = time.perf_counter()
    before = stage.get("stage", "preparing")
    stage["stage"] = DATA_STAGE
    data = resolve_run_data(settings)
    stage["stage"] = before
    check_image_shape(settings, data.image_shape)
    data_seconds = time.perf_counter() - t0

    t0 = time.perf_counter()
    router, checkpoint_info, ckpt = None, None, None
    if get_method(settings.method).needs_router:
        stage["stage"] = ROUTER_STAGE
        ckpt, checkpoint_info = resolve_checkpoint(settings, data.image_shape, data.classes_hash)
        router = ckpt.router(settings.embedding.router)
        stage["stage"] = before
    pretrain_seconds = time.perf_counter() - t0

    state = initial_state(settings, data.image_shape, data.num_classes)
    engine = build_engine(settings, state, data, router)
    engine.roster.expect(
        query_records=data.query_records(),
        local=data.local(settings),
        known_sizes=data.partition_sizes(),
        bound=bound,
    )
    embedding_dp = None
    if settings.embedding.embedding_dp_epsilon:
        embedding_dp = ship_embedding_dp(settings, ckpt, data, engine)
    return PreparedRun(
        data,
        engine,
        state,
        checkpoint_info,
        pretrained,
        embedding_dp,
        data_seconds,
        pretrain_seconds,
    )


def resume_engine(
    engine: Any, grid: Grid, saved_state: dict[str, Any], resume_file: Path | None
) -> dict[str, np.ndarray] | None:
    """Restore the engine from a saved state; the saved global model, if it kept one.

    This process's query round asks who is connected now, but no saved client for its
    summary again: a second DP release would cost it a second epsilon.
    """
    engine.roster.resume_from(saved_state)
    engine.prepare(grid)
    try:
        engine.restore_server_state(saved_state)
    except (ValueError, TypeError, KeyError) as err:  # a state this run cannot continue
        raise ConfigError(f"cannot resume from {resume_file}: {err}") from err
    log.info("resumed after round %d from %s", engine.round_offset, resume_file)
    return saved_state["fields"].get("latest_global")


def run_server(grid: Grid, run_config: dict[str, Any]) -> Path:
    """The whole ServerApp: validate, route, federate, evaluate, write results.

    The run keeps ``<results>.status`` up to date (``running``, then ``failed`` with the
    stage and the error, or ``completed``). A run config that does not pass still leaves
    a ``failed`` status: at the results path it names when that path is safe, else at a
    default results path (:func:`failed_run_results_path`). An expected failure (a bad
    run config, missing or unreadable data: :func:`expected_failure`) is logged in one
    line; every failure is re-raised (``server_app.py`` raises the expected ones as
    :class:`RunFailed`, which Flower logs without a traceback).
    """
    t_start = time.perf_counter()
    avoid_hugepage_stalls()
    stage = {"stage": CONFIG_STAGE}
    results_path: Path | None = None
    try:
        settings = parse_run_config(run_config)
        log.info("Ripple run: %s", json.dumps(settings.to_dict()))
        results_path = confined_results_path(settings)  # before any work
        confined_checkpoint(settings)  # (cache-dir: parse_run_config, on clients too)
        from ripple_flwr.runs.tracking import tracker_folder

        tracker_folder(settings)  # the tracker installed, tracker-dir confined: before any work
        resume_file = resume_source(settings, results_path)  # confined, before any work
        folders = log_folders(settings)
    except BaseException as err:
        if results_path is None:
            results_path = _failed_run_path(run_config)
        _report_failure(err, stage["stage"], results_path)
        raise
    stage = LiveStage(results_path, folders)
    stage["stage"] = "starting"
    try:
        path = _run_server(grid, settings, results_path, resume_file, folders, stage, t_start)
    except BaseException as err:
        _report_failure(err, stage["stage"], results_path, folders)
        raise
    write_status(results_path, "completed", stage="done", folders=folders)
    return path


class LiveStage(dict):
    """``{"stage": ...}`` that rewrites ``<results>.status`` (``running``) whenever the stage
    changes, so ``ripple-status`` says where a running run is (waiting for nodes,
    pre-training, rounds...), not ``starting`` for the whole run."""

    def __init__(self, results_path: Path, folders: dict[str, Any]) -> None:
        super().__init__()
        self.results_path, self.folders = results_path, folders

    def __setitem__(self, key: str, value: str) -> None:
        changed = self.get(key) != value
        super().__setitem__(key, value)
        if changed:
            write_status(self.results_path, "running", stage=value, folders=self.folders)


# -- failures ------------------------------------------------------------------------------
class RunFailed(Exception):  # noqa: N818 - what the user reads: "RunFailed: <the reason>"
    """An expected failure that :func:`run_server` has logged and written to the status.

    ``server_app.py`` raises it in place of the original error (its message is that
    error's one line) so that Flower marks the run ``finished:failed``;
    :func:`quiet_reported_failures` keeps Flower from printing its traceback.
    """


def one_line(err: BaseException) -> str:
    """``Type: message`` on one line: what ``<results>.status`` and the log say."""
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


def _raised_in_data_layer(err: BaseException) -> bool:
    """Whether ``err`` was raised by the package's data layer itself (its innermost frame)."""
    tb = err.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    try:
        return Path(tb.tb_frame.f_code.co_filename).resolve().is_relative_to(_DATA_PACKAGE)
    except (OSError, RuntimeError, ValueError):
        return False


def expected_failure(err: BaseException, stage: str) -> bool:
    """Whether ``err`` is one a user fixes from its message alone (no traceback needed).

    A :class:`ConfigError` at any stage (a run config, path or file the server refuses,
    each with the fix in its message); while the run's data loads, the data layer's own
    errors: a missing or unreadable dataset (:class:`FileNotFoundError` and the other
    ``OSError``, ``ValueError`` and ``RuntimeError`` the data layer raises with the fix,
    :class:`LocalDataError`, :class:`ImageFormatError`); at any stage, too few nodes or
    usable clients (:class:`NotEnoughClientsError`, its message names the fix). Anything
    else is unexpected and keeps its traceback.
    """
    if isinstance(err, ConfigError | NotEnoughClientsError):
        return True
    if stage == DATA_STAGE:
        if isinstance(err, LocalDataError | ImageFormatError):
            return True
        return isinstance(err, OSError | ValueError | RuntimeError) and _raised_in_data_layer(err)
    return False


def reported_failure(err: BaseException) -> str | None:
    """The one line :func:`run_server` logged for ``err`` (an expected failure), else ``None``."""
    line = getattr(err, _REPORTED, None)
    return line if isinstance(line, str) else None


def _failed_run_path(run_config: dict[str, Any]) -> Path | None:
    """The results path of a run that did not pass its checks (``None``: no status written)."""
    try:
        return failed_run_results_path(run_config)
    except Exception as err:  # noqa: BLE001 - finding a place for the status must not mask
        log.debug("no results path for the failed run's status: %s", err)
        return None


def _report_failure(
    err: BaseException,
    stage: str,
    results_path: Path | None,
    folders: dict[str, Any] | None = None,
) -> None:
    """Write the ``failed`` status; log an expected failure in one line (no traceback)."""
    line = one_line(err)
    status = None
    if results_path is not None:
        own = results_path.with_suffix(".resume.npz")
        status = write_status(
            results_path,
            "failed",
            stage=stage,
            error=line,
            resume_file=str(own) if own.is_file() else None,
            folders=folders,
        )
    if not expected_failure(err, stage):
        return  # Flower logs the traceback of the exception the run raises
    where = f"ripple-status {status}" if status is not None else "no status file written"
    log.error("Ripple run failed (%s): %s [%s]", stage, line, where)
    try:
        setattr(err, _REPORTED, line)
    except AttributeError:  # pragma: no cover - an exception type without a __dict__
        pass


class _ReportedFailureFilter(logging.Filter):
    """Drops the traceback from Flower's log of a :class:`RunFailed` (its line is logged)."""

    name_tag = "ripple-reported-failure"

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, RunFailed):
            record.exc_info, record.exc_text = None, None
        return True


def quiet_reported_failures(logger: logging.Logger | None = None) -> None:
    """Keep Flower's logger (``flwr``) from printing a traceback for a :class:`RunFailed`.

    Flower logs a ServerApp's exception with its traceback ("ServerApp raised an
    exception" in a deployment, "Simulation raised an exception" in a simulation); for an
    expected failure :func:`run_server` has already said why, in one line. Idempotent.
    """
    logger = logger or logging.getLogger("flwr")
    tag = _ReportedFailureFilter.name_tag
    if not any(getattr(f, "name_tag", None) == tag for f in logger.filters):
        logger.addFilter(_ReportedFailureFilter())


def _run_server(
    grid: Grid,
    settings: RunSettings,
    results_path: Path,
    resume_file: Path | None,
    folders: dict[str, Any],
    stage: dict[str, str],
    t_start: float,
) -> Path:
    requested_partitions = settings.data.num_partitions
    prepared, settings, state = _run_rounds(grid, settings, results_path, resume_file, stage)
    stage["stage"] = "finishing"
    sources = {
        # num-partitions=0: the settings record the count the run settled on.
        "num_partitions_from": "nodes" if requested_partitions == 0 else "run config",
        "server_folders": folders,
    }
    results = _results(grid, prepared, settings, state, results_path, sources, t_start)
    path = write_results(results_path, results)
    log.info(
        "Ripple run finished: final personalised accuracy %.4f (mean of last 3 evaluations, "
        "coverage %.2f of clients); results written to %s (plot %s)",
        results["final_accuracy"],
        results["final_accuracy_coverage"],
        path,
        path.with_suffix(".png"),
    )
    from ripple_flwr.runs.tracking import track_finished_run

    track_finished_run(settings, path)  # a tracker that fails is logged; the results stay
    return path


def _run_rounds(
    grid: Grid,
    settings: RunSettings,
    results_path: Path,
    resume_file: Path | None,
    stage: dict[str, str],
) -> tuple[PreparedRun, RunSettings, dict[str, np.ndarray]]:
    """Settle the nodes, prepare (or resume) the method, and run its rounds."""
    stage["stage"] = "waiting for nodes"
    settings = settle_partitions(grid, settings)
    stage["stage"] = "preparing"
    bound = load_partition_map(settings.data.total_partitions)  # a bad file: one line, before work
    saved_state = None if resume_file is None else load_resume_state(settings, resume_file)

    prepared = prepare_run(settings, bound, stage)
    engine, state = prepared.engine, prepared.state
    if resume_file is not None:
        log.info("resume=%r: continuing from %s", settings.outputs.resume, resume_file)
    if settings.outputs.checkpoint_every:
        engine.checkpoint_path = results_path.with_suffix(".resume.npz")
    if saved_state is not None:
        state = resume_engine(engine, grid, saved_state, resume_file) or state
    stage["stage"] = "rounds"
    engine.start(
        grid,
        state_to_record(state),
        num_rounds=settings.training.num_server_rounds,
        timeout=settings.robustness.round_timeout,
    )
    return prepared, settings, state


def _results(
    grid: Grid,
    prepared: PreparedRun,
    settings: RunSettings,
    state: dict[str, np.ndarray],
    results_path: Path,
    sources: dict[str, Any],
    t_start: float,
) -> dict[str, Any]:
    """After the rounds: zero-shot onboarding, the saved run, and the results record."""
    engine, data = prepared.engine, prepared.data
    zero_shot = onboard_new_clients(engine, grid) if settings.data.new_clients else {}
    record = {**engine.run_record(), "zero_shot": zero_shot}
    embedding_dp = prepared.embedding_dp
    if embedding_dp is not None:  # how often each client released, over every process
        embedding_dp.update(
            engine.roster.releases.record(embedding_dp["epsilon"], embedding_dp["delta"])
        )
    saved_run = save_for_onboarding(
        engine, settings, data, results_path.with_suffix(".run.pt"), prepared.checkpoint_info
    )
    return results_record(
        engine,
        settings,
        record,
        model_bytes=int(sum(v.nbytes for v in state.values())),
        sources={
            **sources,
            "federation": data.record(),
            "checkpoint": prepared.checkpoint_info,
            "pretrained": prepared.pretrained,
            "embedding_dp": embedding_dp,
            "saved_run": None if saved_run is None else str(saved_run),
        },
        timings={
            "data": prepared.data_seconds,
            "pretrain_or_load": prepared.pretrain_seconds,
            "total": time.perf_counter() - t_start,
        },
    )
