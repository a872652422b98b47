"""Setting a run up: the router checkpoint (loaded, or pre-trained and cached), the initial
model, the engine from the registry, and the saved run for onboarding outside the run.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ripple_flwr.app.server.engine import Engine
from ripple_flwr.app.server.run_data import RunData
from ripple_flwr.data import Federation
from ripple_flwr.methods.registry import MethodInputs, MethodSpec, get_method
from ripple_flwr.router.checkpoint import (
    CHECKPOINT_VERSION,
    Checkpoint,
    checkpoint_settings,
    load_checkpoint,
)
from ripple_flwr.router.pretrain import pretrain, pretrain_settings_for
from ripple_flwr.router.synthetic import BANK_FORMAT_VERSION
from ripple_flwr.runs.outputs import (
    confined_checkpoint,
)
from ripple_flwr.settings import ConfigError, RunSettings
from ripple_flwr.training.models import build_model, get_state
from ripple_flwr.wst.shapes import embedding_dim

log = logging.getLogger("flwr.ripple")


def checkpoint_cache_path(settings: RunSettings) -> Path:
    """Where the run's pre-trained checkpoint is cached: a hash of the pretrain settings."""
    ps = asdict(pretrain_settings_for(settings))
    for volatile in ("cache_dir", "device"):
        ps.pop(volatile, None)
    # A change of the bank's sampling or of the checkpoint format invalidates it too.
    ps["versions"] = [CHECKPOINT_VERSION, BANK_FORMAT_VERSION]
    key = hashlib.sha256(json.dumps(ps, sort_keys=True, default=str).encode()).hexdigest()[:20]
    return settings.outputs.cache_root() / "checkpoints" / f"gmm-vae-{key}.pt"


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
        embedding_dim(
            image_shape, settings.embedding.J, settings.embedding.L, ps.embed_size or None
        ),
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
            info = {"checkpoint": str(path), "source": "cache"}
            report = _report_summary(path.with_suffix(".json"))
            # The pre-training that made the cached file: the same record whichever run made it.
            return ckpt, {**info, "report": report} if report is not None else info
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
    summary = _report_summary(path.with_suffix(".json"))
    return ckpt, {"checkpoint": str(path), "source": "pretrained", "report": summary}


def _report_summary(path: Path) -> dict[str, Any] | None:
    """What a results file records of a pre-training report: routing L1s and timings."""
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # a cache filled before reports were kept beside it
    if not isinstance(report, dict):
        return None
    return {k: v for k, v in report.items() if k.startswith("routing_l1") or "seconds" in k}


def initial_state(
    settings: RunSettings, image_shape, num_classes: int, index: int = 0
) -> dict[str, np.ndarray]:
    """One seeded build: every cluster (and client) model starts from it.

    ``index`` > 0 gives further, distinct seeded initialisations (IFCA's and
    FeSEM's K models); index 0 is the run's one initial model. With
    ``pretrained`` the backbone is torchvision's ImageNet ResNet-18 in every
    one of them (only the new head differs by seed).
    """
    seed = settings.training.seed
    if index:
        seed = int(np.random.SeedSequence([settings.training.seed, index]).generate_state(1)[0])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(
            settings.training.model,
            image_shape,
            num_classes,
            pretrained=settings.training.pretrained,
        )
    if settings.training.pretrained:
        # Imported here: torchvision (~1 s) only for the runs that use its ResNet-18.
        from ripple_flwr.training.pretrained import load_imagenet_weights

        load_imagenet_weights(model, settings.training.pretrained_weights or None)
    return get_state(model)


def pretrained_report(settings: RunSettings) -> dict[str, Any] | None:
    """Find (or download) the ImageNet weights before any expensive work; what they are.

    Offline with no file, the run stops here with the exact path to put the file at.
    """
    if not settings.training.pretrained:
        return None
    from ripple_flwr.training.pretrained import PretrainedWeightsError, load_imagenet_weights

    model = build_model(settings.training.model, (3, 64, 64), 2, pretrained=True)
    try:
        report = load_imagenet_weights(model, settings.training.pretrained_weights or None)
    except (PretrainedWeightsError, ValueError) as err:
        raise ConfigError(" ".join(str(err).split())) from err
    return {k: report[k] for k in ("path", "sha256", "official", "loaded") if k in report}


def build_engine(settings: RunSettings, state, data: RunData | Federation, router=None):
    """The engine around ``settings.method``, the method built by its registry entry."""
    if isinstance(data, Federation):
        data = RunData.of_federation(settings, data)
    shape, classes = data.image_shape, data.num_classes
    inputs = MethodInputs(
        settings,
        state,
        true_mixtures=data.true_mixtures,
        router=router,
        fresh_state=lambda i: initial_state(settings, shape, classes, index=i),
        image_shape=tuple(int(v) for v in shape),
        num_classes=int(classes),
        true_concepts=data.true_concepts,
    )
    return make_engine(get_method(settings.method), inputs)


def make_engine(spec: MethodSpec, inputs: MethodInputs) -> Engine:
    """The run's engine holding the method ``spec`` builds from ``inputs``."""
    return Engine(inputs.settings, inputs.initial_state, spec.make(inputs))


def save_for_onboarding(
    engine, settings: RunSettings, dataset, path: Path, checkpoint_info: dict | None
) -> Path | None:
    """Write what zero-shot onboarding outside the run needs (``onboard.py`` reads it).

    What is written is the method's registry entry's ``exports``: the cluster
    models with the router checkpoint and the HDB map, a global model (router
    ``none``), FLUX's cluster models with what assigns a descriptor to one
    (router ``descriptor``), or nothing (a method with no model a new client could use).
    """
    from ripple_flwr.runs.saved_runs import SavedRun, save_run

    exports = get_method(settings.method).exports
    export = engine.export()
    models = export.models
    if exports == "none" or models is None:
        return None
    router: dict = {"router": "none"}
    descriptor = export.descriptor if exports == "descriptors" else None
    if descriptor is not None:  # FLUX after its clustering: centroids, scaler, its model
        router = {"router": "descriptor", "descriptor": descriptor}
    if exports == "clusters":
        ckpt = Path(checkpoint_info["checkpoint"]).expanduser().resolve()
        router = {
            "router": settings.embedding.router,
            "router_checkpoint": str(ckpt),  # save_run records its SHA-256
            "component_map": export.component_map,
            "concepts": export.concepts,
        }
    run = SavedRun(
        cluster_states=models,
        model=settings.training.model,
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
