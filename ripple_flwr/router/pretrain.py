"""Phase 1: pre-train the GMM-VAE on synthetic clients, save and load checkpoints.

Everything a run needs to trust a checkpoint is in it: the weights (with
the normalisation statistics), the auxiliary set's per-component means (for
the mean-unmixing reference) and every setting that must match at
inference. Loading uses ``torch.load(weights_only=True)``: no arbitrary
objects are ever unpickled.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from ripple_flwr.data import (
    ImageDataset,
    fold_labels,
    load_dataset,
    mixture_of,
    sample_dirichlet_clients,
    server_aux_split,
)
from ripple_flwr.data.base import classes_hash
from ripple_flwr.data.local import local_dataset
from ripple_flwr.data.natural import natural_aux
from ripple_flwr.io.jsonable import to_jsonable
from ripple_flwr.router.checkpoint import (
    Checkpoint,
    checkpoint_settings,
    save_checkpoint,
)
from ripple_flwr.router.routers import MeanUnmixingRouter, UniformRouter, routing_l1
from ripple_flwr.router.run_embedding import run_embed_size
from ripple_flwr.router.synthetic import BankSettings, SyntheticBank, cached_bank
from ripple_flwr.router.training import TrainSettings, train_gmm_vae
from ripple_flwr.router.vae import GMMVAEConfig
from ripple_flwr.settings import LABEL_KINDS, RunSettings
from ripple_flwr.wst.embedder import PrototypeSettings, SpectralEmbedder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PretrainSettings:
    """Everything the pre-training job depends on."""

    dataset: str = "mnist-5k"
    data_root: str | None = None
    label_kind: str = "class"
    aux_size: int = 1000
    data_seed: int = 0
    num_components: int = 10
    J: int = 3
    L: int = 8
    svd_rank: int = 20
    explained_variance: float | None = None
    bank: BankSettings = field(default_factory=BankSettings)
    heldout_clients: int = 1000
    train: TrainSettings = field(default_factory=TrainSettings)
    vae_hidden: tuple[int, ...] = (1024, 512, 256, 128)
    latent_dim: int = 32
    seed: int = 0
    device: str = "auto"
    real_clients: int = 100
    real_client_size: int = 200
    real_alphas: tuple[float, ...] = (0.1, 1.0)
    cache_dir: str | None = None
    aux_data: str = ""  # the server's own D_aux files ("" = carved from ``dataset``)
    class_names: tuple[str, ...] = ()  # the run's classes ("" = the data's own)
    image_size: int = 0
    channels: int = 0
    embed_size: int = 0  # 0: the images' own size
    image_column: str = "image"
    label_column: str = "label"

    def __post_init__(self) -> None:
        if self.num_components < 2:
            raise ValueError(f"K (num-components) must be >= 2, got {self.num_components}")
        if self.label_kind not in LABEL_KINDS:
            raise ValueError(f"label-kind must be one of {LABEL_KINDS}, got {self.label_kind!r}")


def pretrain_settings_for(settings: RunSettings) -> PretrainSettings:
    """The :class:`PretrainSettings` a federated run pre-trains its router with."""
    data, emb, pre = settings.data, settings.embedding, settings.pretraining
    client_size = pre.client_size(data.partition_size)
    return PretrainSettings(
        dataset=data.dataset,
        data_root=data.data_root_or_none,
        label_kind=data.label_kind,
        aux_size=data.aux_size,
        data_seed=data.data_seed,
        num_components=emb.num_components,
        J=emb.J,
        L=emb.L,
        svd_rank=emb.svd_rank,
        explained_variance=emb.explained_variance_or_none,
        bank=BankSettings(num_clients=pre.pretrain_bank_size, client_size=client_size),
        heldout_clients=pre.heldout_clients,
        train=TrainSettings(steps=pre.pretrain_steps, eval_every=pre.eval_every),
        seed=settings.training.seed,
        real_clients=20,
        real_client_size=client_size,
        cache_dir=str(settings.outputs.cache_root() / "banks"),
        aux_data=data.aux_data,
        class_names=data.class_list,
        image_size=data.image_size,
        channels=data.channels,
        embed_size=run_embed_size(settings),
        image_column=data.image_column,
        label_column=data.label_column,
    )


def aux_source(settings: PretrainSettings) -> ImageDataset:
    """Where D_aux comes from: the server's own files (``aux-data``), else the dataset."""
    if settings.aux_data:
        return local_dataset(
            settings.aux_data,
            class_names=settings.class_names or None,
            channels=settings.channels,
            size=settings.image_size,
            image_column=settings.image_column,
            label_column=settings.label_column,
        )
    return load_dataset(settings.dataset, settings.data_root, image_size=settings.image_size)


def aux_rows(
    settings: PretrainSettings, dataset: ImageDataset, cluster: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(D_aux rows, rows left for the report's real clients).

    The server's own files are D_aux whole when ``aux-size`` covers them (else a
    balanced ``aux-size`` of them); a dataset with a natural split gives D_aux from
    its server rows (group -1) only, as its federation does.
    """
    if settings.aux_data and settings.aux_size >= len(cluster):
        every = np.arange(len(cluster), dtype=np.int64)
        return every, np.zeros(0, dtype=np.int64)
    if dataset.groups is not None and not settings.aux_data:
        aux = natural_aux(
            dataset, cluster, settings.aux_size, settings.label_kind, settings.data_seed
        )
        rest = np.setdiff1d(np.arange(len(cluster), dtype=np.int64), aux, assume_unique=True)
        return aux, rest
    return server_aux_split(cluster, settings.aux_size, settings.data_seed)


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available; use 'auto'")
    return device


# -- the whole job -----------------------------------------------------------------------
def _real_client_report(
    embedder: SpectralEmbedder,
    images_of: Callable[[np.ndarray], np.ndarray],
    labels: np.ndarray,
    routers: dict,
    settings: PretrainSettings,
) -> dict[str, float]:
    """Mean L1 routing error of each router on real clients drawn outside D_aux.

    ``images_of(rows)`` gives the images of rows of ``labels`` (decoded on demand: a
    lazily read dataset never holds the whole pool as floats).
    """
    report: dict[str, float] = {}
    k = settings.num_components
    if len(labels) < settings.real_client_size:
        return report  # D_aux is all the server has: no real clients to draw
    for alpha in settings.real_alphas:
        rng = np.random.default_rng([settings.seed, 7919, int(round(alpha * 1000))])
        clients = sample_dirichlet_clients(
            labels, settings.real_clients, settings.real_client_size, alpha, rng, num_components=k
        )
        truth = np.stack([mixture_of(labels[c], k) for c in clients])
        client_images = [images_of(c) for c in clients]
        phis = embedder.embed_many(client_images)
        means = np.stack([x.reshape(len(x), -1).mean(axis=0) for x in client_images])
        for name, router in routers.items():
            feats = phis if router.needs == "embedding" else means
            suffix = "" if name == "gmm-vae" else f"_{name.replace('-', '_')}"
            report[f"routing_l1_real_a{float(alpha)}{suffix}"] = routing_l1(
                router.route(feats), truth
            )
    return report


def _banks(
    settings: PretrainSettings,
    embedder: SpectralEmbedder,
    aux_images: np.ndarray,
    aux_comp: np.ndarray,
    progress: bool,
) -> tuple[SyntheticBank, SyntheticBank, bool]:
    """The training bank (and whether it came from the cache) and the held-out bank."""
    k = settings.num_components
    bank, cached = cached_bank(
        embedder,
        aux_images,
        aux_comp,
        k,
        settings.bank,
        cache_dir=settings.cache_dir,
        progress=progress,
    )
    held = BankSettings(
        **{
            **asdict(settings.bank),
            "num_clients": settings.heldout_clients,
            "seed": settings.bank.seed + 1_000_003,
        }
    )
    val_bank, _ = cached_bank(
        embedder, aux_images, aux_comp, k, held, cache_dir=settings.cache_dir, keep_means=True
    )
    return bank, val_bank, cached


def _heldout_report(routers: dict, val_bank: SyntheticBank) -> dict[str, float]:
    """Each router's mean L1 routing error on the held-out synthetic clients."""
    report = {}
    for name, router in routers.items():
        feats = val_bank.embeddings if router.needs == "embedding" else val_bank.means
        suffix = "" if name == "gmm-vae" else f"_{name.replace('-', '_')}"
        report[f"routing_l1_heldout{suffix}"] = routing_l1(router.route(feats), val_bank.targets)
    return report


def _embedder(
    settings: PretrainSettings, image_shape: tuple[int, int, int], device: str
) -> SpectralEmbedder:
    """The embedder the run's clients will use (same J, L, prototype and embed size)."""
    return SpectralEmbedder(
        image_shape,
        J=settings.J,
        L=settings.L,
        prototype=PrototypeSettings(settings.svd_rank, settings.explained_variance),
        device=device,
        embed_size=settings.embed_size or None,
    )


def _vae_config(settings: PretrainSettings, input_dim: int) -> GMMVAEConfig:
    return GMMVAEConfig(
        input_dim=input_dim,
        num_components=settings.num_components,
        hidden=tuple(settings.vae_hidden),
        latent_dim=settings.latent_dim,
    )


def pretrain(
    settings: PretrainSettings, output: str | Path, *, progress: bool = True
) -> tuple[Checkpoint, dict]:
    """Build the synthetic bank, train the GMM-VAE, save it, and measure routing.

    Returns the checkpoint and a JSON-able report (timings, routing errors of
    the GMM-VAE and of the uniform and mean-unmixing references on held-out
    synthetic clients and on real clients at each Dir(alpha)).
    """
    t_start = time.perf_counter()
    device = resolve_device(settings.device)
    dataset = aux_source(settings)
    cluster, _ = dataset.cluster_labels(settings.label_kind)
    aux, pool = aux_rows(settings, dataset, cluster)
    k = settings.num_components
    aux_images, aux_comp = dataset.rows(aux), fold_labels(cluster[aux], k)
    embedder = _embedder(settings, dataset.image_shape, device)
    t0 = time.perf_counter()
    bank, val_bank, bank_cached = _banks(settings, embedder, aux_images, aux_comp, progress)
    bank_seconds = time.perf_counter() - t0

    t0 = time.perf_counter()
    model, history = train_gmm_vae(
        bank,
        val_bank,
        _vae_config(settings, embedder.output_dim),
        settings.train,
        seed=settings.seed,
        device=device,
        progress=progress,
    )
    train_seconds = time.perf_counter() - t0
    model.cpu()
    unmix = MeanUnmixingRouter.from_aux(aux_images, aux_comp, k)
    stored = checkpoint_settings(
        settings, dataset.image_shape, embedder.output_dim, classes_hash(dataset.classes)
    )
    save_checkpoint(output, model, unmix.component_means, stored)
    checkpoint = Checkpoint(model, unmix.component_means.astype(np.float32), stored)

    routers = {
        "gmm-vae": checkpoint.router("gmm-vae"),
        "uniform": UniformRouter(k),
        "mean-unmixing": unmix,
    }
    report: dict = {"checkpoint": str(output), "settings": to_jsonable(asdict(settings))}
    report.update(_heldout_report(routers, val_bank))
    report.update(
        _real_client_report(
            embedder, lambda rows: dataset.rows(pool[rows]), cluster[pool], routers, settings
        )
    )
    report.update(
        {
            "bank_seconds": bank_seconds,
            "bank_cached": bank_cached,
            "bank_clients": len(bank),
            "train_seconds": train_seconds,
            "train_steps": history[-1]["step"] if history else 0,
            "train_batch_size": settings.train.for_device(device).batch_size,
            "pretrain_seconds": time.perf_counter() - t_start,
            "embedding_dim": embedder.output_dim,
            "device": device,
            "history": history,
        }
    )
    return checkpoint, report
