"""The GMM-VAE router's checkpoint: what it stores, saving it sealed, loading it checked.

A checkpoint carries the settings a run must share with it (:data:`MATCHING_KEYS`); a run
whose settings differ is refused with every differing key named, and a file whose content
does not match its seal is refused before anything in it is used.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from ripple_flwr.io.checks import FileCheck
from ripple_flwr.io.integrity import HASH_KEY, seal, verify
from ripple_flwr.io.torch_files import load_weights_only
from ripple_flwr.router.routers import GMMVAERouter, MeanUnmixingRouter
from ripple_flwr.router.vae import GMMVAE, GMMVAEConfig

if TYPE_CHECKING:
    from ripple_flwr.router.pretrain import PretrainSettings

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1
# Settings a run must share with the checkpoint it routes with.
MATCHING_KEYS = (
    "checkpoint_version",
    "image_shape",
    "J",
    "L",
    "svd_rank",
    "explained_variance",
    "num_components",
    "embedding_dim",
    "label_kind",
    "classes",
    "embed_size",
)
# Keys that checkpoints written before them lack: not compared there.
NEWER_KEYS = ("classes", "embed_size")
# What save_checkpoint writes (and the content hash beside it).
_CHECKPOINT_KEYS = ("state_dict", "component_means", "vae_config", "settings")


# -- checkpoints -------------------------------------------------------------------------
def checkpoint_settings(
    settings: PretrainSettings, image_shape: tuple[int, ...], p: int, classes: str = ""
) -> dict:
    """The settings stored in (and checked against) a checkpoint.

    ``classes`` is the hash of the class list D_aux's labels index
    (:func:`ripple_flwr.data.base.classes_hash`); ``aux_data`` names the server's own
    files when they were D_aux.
    """
    return {
        "checkpoint_version": CHECKPOINT_VERSION,
        "dataset": settings.dataset,
        "aux_data": settings.aux_data,
        "classes": classes,
        "embed_size": settings.embed_size,
        "label_kind": settings.label_kind,
        "image_shape": list(image_shape),
        "J": settings.J,
        "L": settings.L,
        "svd_rank": settings.svd_rank,
        "explained_variance": settings.explained_variance,
        "num_components": settings.num_components,
        "embedding_dim": p,
        "aux_size": settings.aux_size,
        "data_seed": settings.data_seed,
        "prune": settings.train.prune,
        "supervised": settings.train.loss.supervised,
    }


def save_checkpoint(
    path: str | Path, model: GMMVAE, component_means: np.ndarray, settings: dict
) -> None:
    """Write atomically; the payload records the SHA-256 of its content (checked on load)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "component_means": torch.from_numpy(np.asarray(component_means, dtype=np.float32)),
        "vae_config": model.config.to_dict(),
        "settings": dict(settings),
    }
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(seal(payload), tmp)
    tmp.replace(path)


@dataclass
class Checkpoint:
    model: GMMVAE
    component_means: np.ndarray
    settings: dict

    def router(self, name: str = "gmm-vae", device: str = "cpu"):
        """The router of this checkpoint by name (``gmm-vae`` or ``mean-unmixing``)."""
        if name == "gmm-vae":
            return GMMVAERouter(self.model, prune=self.settings.get("prune", 0.01), device=device)
        if name == "mean-unmixing":
            return MeanUnmixingRouter(self.component_means)
        raise ValueError(f"unknown router {name!r}; choose 'gmm-vae' or 'mean-unmixing'")


def check_settings(saved: dict, expected: dict) -> None:
    """Raise a clear error listing every setting where checkpoint and run differ."""
    diffs = []
    for key in MATCHING_KEYS:
        if key in NEWER_KEYS and (key not in saved or expected.get(key) in ("", None)):
            continue  # an older checkpoint, or a caller that does not know the run's classes
        if key in expected and _norm(saved.get(key)) != _norm(expected[key]):
            diffs.append(f"{key}: checkpoint has {saved.get(key)!r}, run has {expected[key]!r}")
    if diffs:
        raise ValueError(
            "GMM-VAE checkpoint does not match this run:\n  "
            + "\n  ".join(diffs)
            + "\nPre-train a matching one (python pretrain_vae.py with the run's settings) "
            "or point the run at a checkpoint made with these settings."
        )


def _norm(v):
    if isinstance(v, tuple):
        return list(v)
    return v


def load_checkpoint(
    path: str | Path, expected: dict | None = None, *, allow_unverified: bool = False
) -> Checkpoint:
    """Load weights only (no pickled objects); check the content hash and the settings.

    A payload that does not match its stored SHA-256 raises
    :class:`~ripple_flwr.io.integrity.IntegrityError` (a ValueError). Checkpoints
    written before they carried a hash are refused unless ``allow_unverified``
    (the caller checked the file some other way, e.g. a saved run's file hash).
    """
    path = Path(path)
    recreate = (
        f"re-create it with `python pretrain_vae.py --output {path}` and the settings it was "
        "made with, or restore the original file"
    )
    if not path.is_file():
        raise FileNotFoundError(
            f"GMM-VAE checkpoint {path} not found; run `python pretrain_vae.py --output {path}`"
        )
    payload = load_weights_only(path, "GMM-VAE checkpoint", recreate)
    if not isinstance(payload, dict):
        raise ValueError(f"{path} is not a ripple-flwr GMM-VAE checkpoint (not a dict)")
    for key in ("state_dict", "component_means", "vae_config", "settings"):
        if key not in payload:
            raise ValueError(f"{path} is not a ripple-flwr GMM-VAE checkpoint (missing {key!r})")
    check = FileCheck(f"GMM-VAE checkpoint {path}", recreate)
    check.keys(payload, _CHECKPOINT_KEYS, optional=(HASH_KEY,))
    if not verify(payload, f"GMM-VAE checkpoint {path}", recreate) and not allow_unverified:
        raise ValueError(
            f"GMM-VAE checkpoint {path} carries no content hash (written before checkpoints "
            f"had one), so it cannot be checked for corruption; {recreate}"
        )
    settings = check.kind(payload["settings"], dict, "settings")
    if expected is not None:
        check_settings(settings, expected)
    model = _checked_model(payload, check)
    return Checkpoint(model, payload["component_means"].numpy(), settings)


def _checked_model(payload: dict, check: FileCheck) -> GMMVAE:
    """The checkpoint's GMM-VAE, once every tensor is finite and of the shape its config says.

    The shapes are compared on a model built on the ``meta`` device (no memory), so a
    config edited to absurd sizes is refused before anything is allocated.
    """
    state = check.tensors(payload["state_dict"], "state_dict")
    means = check.tensor(payload["component_means"], "component_means", floating=True)
    try:
        config = GMMVAEConfig.from_dict(check.kind(payload["vae_config"], dict, "vae_config"))
        with torch.device("meta"):
            expected = GMMVAE(config).state_dict()
    except (TypeError, ValueError, KeyError) as err:
        check.fail(f"vae_config is not a GMM-VAE configuration ({err})")
    for key, ref in expected.items():
        got = state.get(key)
        if got is None or got.shape != ref.shape or got.dtype != ref.dtype:
            found = "missing" if got is None else f"{got.dtype} {tuple(got.shape)}"
            check.fail(f"state_dict[{key!r}] is {found}, the config needs {tuple(ref.shape)}")
    if set(state) != set(expected):
        check.fail(f"state_dict holds {sorted(set(state) - set(expected))[0]!r}, no GMM-VAE key")
    if means.ndim != 2 or means.shape[0] != config.num_components:
        check.fail(
            f"component_means has shape {tuple(means.shape)}, expected "
            f"({config.num_components}, pixels)"
        )
    model = GMMVAE(config)
    model.load_state_dict(state)
    return model.eval()
