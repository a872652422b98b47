"""ServerApp logic: settings, router checkpoint (loaded or pre-trained, cached), run, results.

``server_app.py`` only calls :func:`run_server`; everything here is plain
Python over a Flower ``Grid``, so the tests drive it with an in-process grid.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.serverapp import Grid

from ripple_flwr.app.protocol.records import mechanism_records, state_to_record
from ripple_flwr.app.run_config import (
    check_image_shape,
    check_run,
    parse_run_config,
    settings_defaults,
)
from ripple_flwr.app.server.run_data import RunData, resolve_run_data
from ripple_flwr.app.server.strategies.core.admission import wait_for_settled_nodes
from ripple_flwr.app.server.strategies.core.claims import load_partition_map
from ripple_flwr.app.server.strategies.core.zero_shot import onboard_new_clients
from ripple_flwr.data import Federation
from ripple_flwr.io.integrity import IntegrityError
from ripple_flwr.methods.registry import MethodInputs, get_method
from ripple_flwr.router.pretrain import (
    CHECKPOINT_VERSION,
    Checkpoint,
    checkpoint_settings,
    load_checkpoint,
    pretrain,
    pretrain_settings_for,
)
from ripple_flwr.router.run_embedding import run_embedder
from ripple_flwr.router.synthetic import BANK_FORMAT_VERSION
from ripple_flwr.runs.outputs import (
    OUTPUT_DIR_ENV,
    RESUME_AUTO,
    confined_checkpoint,
    confined_results_path,
    output_folder,
    resume_source,
)
from ripple_flwr.runs.results import tail_mean, write_results, write_status
from ripple_flwr.runs.resume import load_server_state
from ripple_flwr.settings import ConfigError, Environment, RunSettings
from ripple_flwr.training.models import build_model, get_state
from ripple_flwr.training.pretrained import load_imagenet_weights
from ripple_flwr.wst.embedder import embedding_dim

log = logging.getLogger("flwr.ripple")


def checkpoint_cache_path(settings: RunSettings) -> Path:
    """Where the run's pre-trained checkpoint is cached: a hash of the pretrain settings."""
    ps = asdict(pretrain_settings_for(settings))
    for volatile in ("cache_dir", "device"):
        ps.pop(volatile, None)
    # A change of the bank's sampling or of the checkpoint format invalidates it too.
    ps["versions"] = [CHECKPOINT_VERSION, BANK_FORMAT_VERSION]
    key = hashlib.sha256(json.dumps(ps, sort_keys=True, default=str).encode()).hexdigest()[:20]
    return settings.cache_root() / "checkpoints" / f"gmm-vae-{key}.pt"


def resolve_checkpoint(
    settings: RunSettings, image_shape: tuple[int, int, int], classes: str = ""
) -> tuple[Checkpoint, dict[str, Any]]:
    """Load ``checkpoint`` (checked against the run), or pre-train one and cache it.

    ``classes`` is the hash of the run's class list: a checkpoint trained on
    other classes (or another image shape) is refused before round 1.
    """
    ps = pretrain_settings_for(settings)
    expected = checkpoint_settings(
        ps,
        image_shape,
        embedding_dim(image_shape, settings.J, settings.L, ps.embed_size or None),
        classes,
    )
    path = confined_checkpoint(settings)
    if path is not None:
        try:
            ckpt = load_checkpoint(path, expected)
        except (FileNotFoundError, ValueError) as err:
            raise ConfigError(str(err)) from err
        return ckpt, {"checkpoint": str(path), "source": "config"}
    path = checkpoint_cache_path(settings)
    if path.is_file():
        try:
            ckpt = load_checkpoint(path, expected)
            log.info("GMM-VAE checkpoint from cache %s", path)
            return ckpt, {"checkpoint": str(path), "source": "cache"}
        except ValueError as err:
            log.warning("cached checkpoint %s unusable (%s); pre-training again", path, err)
    log.info(
        "pre-training the GMM-VAE (%d synthetic clients, %d steps); cached at %s",
        ps.bank.num_clients,
        ps.train.steps,
        path,
    )
    _, report = pretrain(ps, path, progress=False)
    # The router as saved, as every later run of these settings loads it: the first run routes
    # bit for bit like the ones after it.
    ckpt = load_checkpoint(path, expected)
    path.with_suffix(".json").write_text(json.dumps(report, indent=2, default=str))
    summary = {k: v for k, v in report.items() if k.startswith("routing_l1") or "seconds" in k}
    return ckpt, {"checkpoint": str(path), "source": "pretrained", "report": summary}


def initial_state(
    settings: RunSettings, image_shape, num_classes: int, index: int = 0
) -> dict[str, np.ndarray]:
    """One seeded build: every cluster (and client) model starts from it.

    ``index`` > 0 gives further, distinct seeded initialisations (IFCA's and
    FeSEM's K models); index 0 is the run's one initial model. With
    ``pretrained`` the backbone is torchvision's ImageNet ResNet-18 in every
    one of them (only the new head differs by seed).
    """
    seed = settings.seed
    if index:
        seed = int(np.random.SeedSequence([settings.seed, index]).generate_state(1)[0])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(
            settings.model, image_shape, num_classes, pretrained=settings.pretrained
        )
    if settings.pretrained:
        load_imagenet_weights(model, settings.pretrained_weights or None)
    return get_state(model)


def pretrained_report(settings: RunSettings) -> dict[str, Any] | None:
    """Find (or download) the ImageNet weights before any expensive work; what they are.

    Offline with no file, the run stops here with the exact path to put the file at.
    """
    if not settings.pretrained:
        return None
    from ripple_flwr.training.pretrained import PretrainedWeightsError

    model = build_model(settings.model, (3, 64, 64), 2, pretrained=True)
    try:
        report = load_imagenet_weights(model, settings.pretrained_weights or None)
    except (PretrainedWeightsError, ValueError) as err:
        raise ConfigError(" ".join(str(err).split())) from err
    return {k: report[k] for k in ("path", "sha256", "official", "loaded") if k in report}


def build_strategy(settings: RunSettings, state, data: RunData | Federation, router=None):
    """The strategy of ``settings.method``, built by its registry entry."""
    if isinstance(data, Federation):
        data = RunData.of_federation(settings, data)
    shape, classes = data.image_shape, data.num_classes
    inputs = MethodInputs(
        settings,
        state,
        true_mixtures=data.true_mixtures,
        router=router,
        fresh_state=lambda i: initial_state(settings, shape, classes, index=i),
    )
    return get_method(settings.method).make(inputs)


def save_for_onboarding(
    strategy, settings: RunSettings, dataset, path: Path, checkpoint_info: dict | None
) -> Path | None:
    """Write what zero-shot onboarding outside the run needs (``onboard.py`` reads it).

    What is written is the method's registry entry's ``exports``: the cluster
    models with the router checkpoint and the HDB map, a global model (router
    ``none``), FLUX's cluster models with what assigns a descriptor to one
    (router ``descriptor``), or nothing (a method with no model a new client could use).
    """
    from ripple_flwr.runs.saved_runs import SavedRun, save_run

    exports = get_method(settings.method).exports
    models = strategy.saved_models()
    if exports == "none" or models is None:
        return None
    router: dict = {"router": "none"}
    descriptor = strategy.saved_descriptor() if exports == "descriptors" else None
    if descriptor is not None:  # FLUX after its clustering: centroids, scaler, its model
        router = {"router": "descriptor", "descriptor": descriptor}
    if exports == "clusters":
        ckpt = Path(checkpoint_info["checkpoint"]).expanduser().resolve()
        router = {
            "router": settings.router,
            "router_checkpoint": str(ckpt),  # save_run records its SHA-256
            "component_map": strategy.component_map,
        }
    run = SavedRun(
        cluster_states=models,
        model=settings.model,
        image_shape=tuple(int(v) for v in dataset.image_shape),
        num_classes=int(dataset.num_classes),
        settings=settings.to_dict(),
        **router,
    )
    path = save_run(path, run)
    log.info(
        "saved run for zero-shot onboarding: %s (python onboard.py %s --images ...)", path, path
    )
    return path


# Settings a resumed run may change; every other one must equal the interrupted run's. The
# held-out clients (drawn after, and apart from, the training clients) may change too: a
# finished run resumed with other new clients onboards them without training again.
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
    auto = settings.resume.strip() == RESUME_AUTO
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
    done = int(state["round"]) >= settings.num_server_rounds
    last = int(state["round"]) == settings.num_server_rounds
    if done and last and auto:
        log.info("%s is after the last round: writing the run's results", path)
    elif done and settings.new_clients and last:
        log.info("%s is a finished run: onboarding its new clients only", path)
    elif done:
        raise ConfigError(
            f"{path} is after round {state['round']}, but num-server-rounds="
            f"{settings.num_server_rounds}: nothing left to run (raise num-server-rounds)"
        )
    return state


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


def ship_embedding_dp(settings: RunSettings, ckpt, data: RunData, strategy) -> dict[str, Any]:
    """Fix the public DP mechanism from D_aux and the checkpoint; send it with every query."""
    from ripple_flwr.privacy.release import public_mechanism

    t0 = time.perf_counter()
    mech = public_mechanism(
        ckpt,
        data,
        run_embedder(settings, data.image_shape),
        epsilon=settings.embedding_dp_epsilon,
        delta=settings.embedding_dp_delta,
        clip=settings.embedding_dp_clip,
        seed=settings.data_seed,
        client_size=settings.partition_size,
    )
    strategy.roster.query_records.update(mechanism_records(mech))
    info = {
        "epsilon": mech.epsilon,
        "delta": mech.delta,
        "clip": mech.clip,
        "clip_source": "run config" if settings.embedding_dp_clip else "server reference (q=0.9)",
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
        "cache_folder": str(settings.cache_root().expanduser().resolve()),
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


def settle_partitions(grid: Grid, settings: RunSettings) -> RunSettings:
    """``num-partitions = 0``: wait for the node count to settle and take it.

    The benchmark partitions are then built for that many nodes (less the new
    clients); each simulated node builds the same from its own node config's
    ``num-partitions``. An explicit ``num-partitions`` is returned unchanged.
    """
    if not settings.partitions_from_nodes:
        return settings
    nodes = wait_for_settled_nodes(grid, settings.node_wait_timeout)
    resolved = settings.with_nodes(nodes)
    check_run(resolved)  # e.g. mnist-5k's 5,000 images for that many partitions
    log.info(
        "num-partitions=0: %d node(s) connected; the run has %d training partitions%s and "
        "trains %d a round",
        nodes,
        resolved.num_partitions,
        f" and {resolved.new_clients} new clients" if resolved.new_clients else "",
        resolved.clients_per_round,
    )
    return resolved


def run_server(grid: Grid, run_config: dict[str, Any]) -> Path:
    """The whole ServerApp: validate, route, federate, evaluate, write results.

    From the moment its results path is known the run keeps ``<results>.status`` up
    to date (``running``, then ``failed`` with the error, or ``completed``).
    """
    t_start = time.perf_counter()
    avoid_hugepage_stalls()
    settings = parse_run_config(run_config)
    log.info("Ripple run: %s", json.dumps(settings.to_dict()))
    results_path = confined_results_path(settings)  # before any work
    confined_checkpoint(settings)  # (cache-dir: parse_run_config, on clients too)
    from ripple_flwr.runs.tracking import tracker_folder

    tracker_folder(settings)  # the tracker installed, tracker-dir confined: before any work
    resume_file = resume_source(settings, results_path)  # confined, before any work
    folders = log_folders(settings)
    stage = {"stage": "starting"}
    write_status(results_path, "running", **stage, folders=folders)
    try:
        path = _run_server(grid, settings, results_path, resume_file, folders, stage, t_start)
    except BaseException as err:
        own = results_path.with_suffix(".resume.npz")
        write_status(
            results_path,
            "failed",
            **stage,
            error=f"{type(err).__name__}: {' '.join(str(err).split())}",
            resume_file=str(own) if own.is_file() else None,
            folders=folders,
        )
        raise
    write_status(results_path, "completed", stage="done", folders=folders)
    return path


def _run_server(
    grid: Grid,
    settings: RunSettings,
    results_path: Path,
    resume_file: Path | None,
    folders: dict[str, Any],
    stage: dict[str, str],
    t_start: float,
) -> Path:
    stage["stage"] = "waiting for nodes"
    requested_partitions = settings.num_partitions
    settings = settle_partitions(grid, settings)
    stage["stage"] = "preparing"
    bound = load_partition_map(settings.total_partitions)  # a bad file: one line, before work
    saved_state = None if resume_file is None else load_resume_state(settings, resume_file)

    pretrained = pretrained_report(settings)
    t0 = time.perf_counter()
    data = resolve_run_data(settings)
    check_image_shape(settings, data.image_shape)
    data_seconds = time.perf_counter() - t0

    t0 = time.perf_counter()
    router, checkpoint_info, ckpt = None, None, None
    if get_method(settings.method).needs_router:
        ckpt, checkpoint_info = resolve_checkpoint(settings, data.image_shape, data.classes_hash)
        router = ckpt.router(settings.router)
    pretrain_seconds = time.perf_counter() - t0

    state = initial_state(settings, data.image_shape, data.num_classes)
    strategy = build_strategy(settings, state, data, router)
    strategy.roster.query_records.update(data.query_records())
    strategy.roster.local = data.local(settings)
    strategy.roster.known_sizes = data.partition_sizes()
    strategy.roster.bound = bound
    embedding_dp = None
    if settings.embedding_dp_epsilon:
        embedding_dp = ship_embedding_dp(settings, ckpt, data, strategy)
    if resume_file is not None:
        log.info("resume=%r: continuing from %s", settings.resume, resume_file)
    if settings.checkpoint_every:
        strategy.checkpoint_path = results_path.with_suffix(".resume.npz")
    if saved_state is not None:
        # This process's query round asks who is connected now, but no saved client for its
        # summary again: a second DP release would cost it a second epsilon.
        strategy.roster.resume_from(saved_state)
        strategy.prepare(grid)
        try:
            strategy.restore_server_state(saved_state)
        except (ValueError, TypeError, KeyError) as err:  # a state this run cannot continue
            raise ConfigError(f"cannot resume from {resume_file}: {err}") from err
        state = saved_state["fields"].get("latest_global") or state
        log.info("resumed after round %d from %s", strategy.round_offset, resume_file)
    stage["stage"] = "rounds"
    result = strategy.start(
        grid,
        state_to_record(state),
        num_rounds=settings.num_server_rounds,
        timeout=settings.round_timeout,
    )
    del result
    stage["stage"] = "finishing"
    zero_shot = onboard_new_clients(strategy, grid) if settings.new_clients else {}

    record = {**strategy.run_record(), "zero_shot": zero_shot}
    if embedding_dp is not None:  # how often each client released, over every process
        embedding_dp.update(
            strategy.roster.releases.record(embedding_dp["epsilon"], embedding_dp["delta"])
        )
    saved_run = save_for_onboarding(
        strategy, settings, data, results_path.with_suffix(".run.pt"), checkpoint_info
    )
    clients = strategy.clients
    model_bytes = int(sum(v.nbytes for v in state.values()))
    # The headline: each client's accuracy counts once, unless the run asks for example weights.
    score = "weighted_mean" if settings.headline_weighting == "examples" else "mean"
    accuracy = [e["accuracy"][score] for e in record["evaluations"]]
    results = {
        "status": "completed",
        "settings": settings.to_dict(),
        # num-partitions=0: the settings record the count the run settled on.
        "num_partitions_from": "nodes" if requested_partitions == 0 else "run config",
        "server_folders": folders,
        "federation": data.record(),
        "checkpoint": checkpoint_info,
        "pretrained": pretrained,
        "embedding_dp": embedding_dp,
        "model_bytes": model_bytes,
        "embedding_bytes_per_client": (
            int(np.mean(clients.bytes_up)) if clients and clients.bytes_up else 0
        ),
        "final_accuracy": tail_mean(accuracy, 3),
        # The share of clients the final figure covers (its last three evaluations).
        "final_accuracy_coverage": min(
            (e["coverage"] for e in record["evaluations"][-3:]), default=0.0
        ),
        "accuracy_per_round": {
            str(e["round"]): {
                "weighted_mean": e["accuracy"]["weighted_mean"],
                "mean": e["accuracy"]["mean"],
                "std": e["accuracy"]["std"],
                "scored": e["scored"],
                "expected": e["expected"],
                "population": e["population"],
                "coverage": e["coverage"],
            }
            for e in record["evaluations"]
        },
        "saved_run": None if saved_run is None else str(saved_run),
        "num_models": strategy.num_models,
        "final_accuracy_weighting": settings.headline_weighting,
        "zero_shot_accuracy": (zero_shot.get("accuracy") or {}).get(score),
        "train_loss_per_round": {str(r["round"]): r["train_loss"] for r in record["rounds"]},
        "bytes_per_round": {
            str(r["round"]): {"down": r["bytes_down"], "up": r["bytes_up"]}
            for r in record["rounds"]
        },
        **record,
    }
    timings = record["timings"]
    results["timings"] = {
        "data": data_seconds,
        "pretrain_or_load": pretrain_seconds,
        "query": timings["query"],
        "rounds": timings["rounds"],
        "evaluation": timings["evaluation"],
        "total": time.perf_counter() - t_start,
    }
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
