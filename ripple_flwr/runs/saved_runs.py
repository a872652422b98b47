"""A finished run saved for zero-shot onboarding (phase 4 of the spec), outside any Flower run.

Why: a client that never took part in training should get a personalised
model at once. It sends its one-shot summary (the WST embedding Phi_new,
or its mean image for the mean-unmixing reference), the frozen router maps
it to cluster weights w_new, and the client receives

    theta_new = sum_c w_new,c theta_c

over the trained cluster models. No gradient step, no evaluation of any
model: one forward pass of the router and one weighted sum of tensors.

A finished run is kept as a :class:`SavedRun` (``save_run`` / ``load_run``):
the stacked cluster models, the architecture, the router's name and the
GMM-VAE checkpoint it routed with (path plus SHA-256, so a replaced
checkpoint is caught rather than silently routing to the wrong clusters),
and, under Ripple-HDB, the map from the K router components to the M
meta-cluster models. The file holds only plain Python values and tensors and
is read with ``torch.load(weights_only=True)``: nothing is unpickled. It
carries a SHA-256 of its own content (``ripple_flwr.io.integrity``), checked on
load, so a damaged file is refused instead of onboarding with wrong weights.

Onboarding from it is :mod:`ripple_flwr.runs.onboarding`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ripple_flwr.io.checks import FileCheck
from ripple_flwr.io.integrity import HASH_KEY, IntegrityError, seal, verify
from ripple_flwr.io.jsonable import to_jsonable
from ripple_flwr.io.torch_files import load_weights_only

__all__ = [
    "SAVED_RUN_VERSION",
    "SavedRun",
    "file_sha256",
    "load_run",
    "save_run",
]

# 2: the payload carries its content SHA-256. Version 1 files (no hash) are read only
# with ``load_run(..., allow_unverified=True)``.
SAVED_RUN_VERSION = 2
_UNHASHED_VERSION = 1
_FORMAT = "ripple-flwr saved run"
ONBOARDING_ROUTERS = ("gmm-vae", "mean-unmixing", "none", "descriptor")
# What a FLUX run saves for its unseen clients (router "descriptor"), besides "model/<key>".
DESCRIPTOR_KEYS = ("centroids", "scale_low", "scale_high", "offset", "bound")
_HOW_TO_GET_ONE = (
    "a ripple-flwr run saves it next to its results JSON when it finishes; "
    "or write one with ripple_flwr.runs.saved_runs.save_run"
)
_RECREATE = (
    "restore the original file, or re-create it by running the federation again (a run "
    "saves <results>.run.pt when it finishes)"
)
# What a class-conditional run saves of its concepts (SavedRun.concepts).
CONCEPT_KEYS = ("counts", "variances", "means", "noise", "min_label_count")
# What save_run writes (and the content hash beside it).
_KEYS = (
    "format",
    "version",
    "cluster_states",
    "model",
    "image_shape",
    "num_classes",
    "router",
    "router_checkpoint",
    "router_sha256",
    "component_map",
    "settings",
)
# Pixels outside [0, 1] by more than this are taken as unscaled data.


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# -- the saved run -------------------------------------------------------------------------
@dataclass
class SavedRun:
    """What onboarding needs from a finished run.

    ``cluster_states``: each tensor of the M cluster models stacked on a
    leading model axis ``(M, ...)``, in ``state_dict`` order. ``router`` is
    ``gmm-vae``, ``mean-unmixing`` or ``none`` (one global model, e.g. FedAvg,
    nothing to route). ``component_map`` (Ripple-HDB) sends each of the K
    router components to a model index in ``[0, M)``; ``None`` means the
    identity (M == K). ``settings`` are the run's settings with dashed keys
    (``J``, ``L``, ``svd-rank``, ``explained-variance``, ``method`` ...).
    ``descriptor`` (router ``descriptor``, a FLUX run): the model descriptors are
    computed under (``model/<key>``) and the centroids, block scaler, offset and
    bound that assign an unseen client's label-free descriptor to a model.
    ``concepts`` (class-conditional Ripple): the concept templates ``counts`` (G, C),
    ``variances`` (G, C), ``means`` (G, C, D) and ``min_label_count``; the K router
    components are then G x (the router's) and a newcomer's w the product of its concept
    weights (from its labelled images) and the router's.
    """

    cluster_states: dict[str, np.ndarray]
    model: str
    image_shape: tuple[int, int, int]
    num_classes: int
    router: str
    router_checkpoint: str = ""
    router_sha256: str = ""
    component_map: np.ndarray | None = None
    settings: dict = field(default_factory=dict)
    descriptor: dict[str, np.ndarray] | None = None
    concepts: dict[str, np.ndarray] | None = None

    def __post_init__(self) -> None:
        self.cluster_states = {str(k): np.asarray(v) for k, v in self.cluster_states.items()}
        self.image_shape = tuple(int(s) for s in self.image_shape)  # type: ignore[assignment]
        self.num_classes = int(self.num_classes)
        if self.component_map is not None:
            cmap = np.asarray(self.component_map)
            if cmap.ndim != 1 or not (np.issubdtype(cmap.dtype, np.integer) or cmap.size == 0):
                raise ValueError(
                    f"component map must be a 1-D integer array (K,), got {cmap.dtype} "
                    f"shape {cmap.shape}"
                )
            self.component_map = cmap.astype(np.int64)
        self.settings = dict(self.settings)
        if self.descriptor is not None:
            self.descriptor = {str(k): np.asarray(v) for k, v in self.descriptor.items()}
        if self.concepts is not None:
            self.concepts = {str(k): np.asarray(v) for k, v in self.concepts.items()}
        self.validate()

    @property
    def num_concepts(self) -> int:
        """G, the concepts of a class-conditional run (1 otherwise)."""
        return 1 if self.concepts is None else int(self.concepts["means"].shape[0])

    @property
    def num_models(self) -> int:
        """M, the number of cluster models (1 for a global model)."""
        return int(np.shape(next(iter(self.cluster_states.values())))[0])

    @property
    def num_components(self) -> int:
        """K, the number of router outputs (the map's length, else M; 1 for ``none``)."""
        if self.router == "none":
            return 1
        if self.component_map is not None:
            return len(self.component_map)
        return self.num_models

    def validate(self) -> None:
        """Raise ValueError on anything onboarding could not use."""
        if self.router not in ONBOARDING_ROUTERS:
            raise ValueError(
                f"router {self.router!r} is not one of {', '.join(ONBOARDING_ROUTERS)}"
            )
        if len(self.image_shape) != 3 or min(self.image_shape) < 1:
            raise ValueError(
                f"image shape must be three positive ints (C, H, W), got {self.image_shape}"
            )
        if self.num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {self.num_classes}")
        if not self.cluster_states:
            raise ValueError("no cluster models (cluster_states is empty)")
        leading = {k: (v.shape[0] if v.ndim else None) for k, v in self.cluster_states.items()}
        flat = [k for k, m in leading.items() if m is None]
        if flat:
            raise ValueError(
                f"cluster tensor {flat[0]!r} has no leading model axis; stack the M models' "
                "copies of each tensor as (M, ...)"
            )
        if len(set(leading.values())) != 1:
            counts = sorted(set(leading.values()))
            first = {m: next(k for k, v in leading.items() if v == m) for m in counts}
            raise ValueError(
                "cluster tensors do not share one leading model axis M: "
                + ", ".join(f"{k!r} has {m}" for m, k in first.items())
            )
        m = self.num_models
        if m < 1:
            raise ValueError("cluster tensors have zero models (M = 0)")
        if self.router == "none":
            if m != 1:
                raise ValueError(
                    f"router 'none' serves one global model, but the run has M={m} models"
                )
            if self.component_map is not None:
                raise ValueError("router 'none' takes no component map")
        if (self.router == "descriptor") != (self.descriptor is not None):
            raise ValueError("a descriptor goes with router 'descriptor', and only with it")
        if self.router == "descriptor":
            self._validate_descriptor(m)
        if self.concepts is not None:
            self._validate_concepts()
        if self.router in ("none", "descriptor"):
            return
        if not self.router_checkpoint:
            raise ValueError(f"router {self.router!r} needs router_checkpoint (the GMM-VAE file)")
        if self.component_map is not None:
            cmap = self.component_map
            if len(cmap) < 1:
                raise ValueError("component map is empty")
            bad = cmap[(cmap < 0) | (cmap >= m)]
            if bad.size:
                raise ValueError(
                    f"component map values must lie in [0, {m}) (M={m} cluster models), "
                    f"got {sorted(set(bad.tolist()))}"
                )

    def _validate_concepts(self) -> None:
        c = self.concepts
        missing = [k for k in CONCEPT_KEYS if k not in c]
        if missing:
            raise ValueError(f"the concepts lack {missing[0]!r}")
        if self.router not in ("gmm-vae", "mean-unmixing"):
            raise ValueError("concepts go with a routed run (gmm-vae or mean-unmixing)")
        g, d = c["means"].shape[0], int(np.prod(self.image_shape))
        want = {k: (g, self.num_classes) for k in ("counts", "variances", "noise")}
        want["means"] = (g, self.num_classes, d)
        for key, shape in want.items():
            if c[key].shape != shape or not np.all(np.isfinite(c[key])):
                raise ValueError(f"concepts {key!r} must be finite of shape {shape}")
        if self.num_components % g:
            raise ValueError(f"{self.num_components} components do not split into {g} concepts")

    def _validate_descriptor(self, m: int) -> None:
        d = self.descriptor
        models = {k[len("model/") :]: v for k, v in d.items() if k.startswith("model/")}
        missing = [k for k in DESCRIPTOR_KEYS if k not in d]
        if missing:
            raise ValueError(f"the descriptor lacks {missing[0]!r}")
        if set(models) != set(self.cluster_states) or any(
            models[k].shape != v.shape[1:] for k, v in self.cluster_states.items()
        ):
            raise ValueError("the descriptor's model does not match the cluster models")
        cents, k = d["centroids"], int(d["offset"].shape[0]) if d["offset"].ndim == 1 else 0
        if cents.ndim != 2 or cents.shape[0] != m or k < 1 or cents.shape[1] < 2 * k:
            raise ValueError(
                f"descriptor centroids {cents.shape} do not fit M={m} models and k={k}"
            )
        if d["scale_low"].shape != d["scale_high"].shape or d["scale_low"].shape[0] < 2:
            raise ValueError("the descriptor's scaler needs two blocks or more")


def save_run(path: str | Path, run: SavedRun) -> Path:
    """Write ``run`` atomically (tmp file + replace); return the absolute path.

    The checkpoint path is stored absolute. A missing ``router_sha256`` is
    filled in from the checkpoint file, which must then exist. The file
    records the SHA-256 of its content, which :func:`load_run` checks.
    """
    run.validate()
    path = Path(path).expanduser().resolve()
    checkpoint, sha = run.router_checkpoint, run.router_sha256
    if run.router not in ("none", "descriptor"):
        ckpt_path = Path(checkpoint).expanduser().resolve()
        checkpoint = str(ckpt_path)
        if not sha:
            if not ckpt_path.is_file():
                raise FileNotFoundError(
                    f"GMM-VAE checkpoint {ckpt_path} not found; a saved run records its hash"
                )
            sha = file_sha256(ckpt_path)
    payload: dict[str, Any] = {
        "format": _FORMAT,
        "version": SAVED_RUN_VERSION,
        "cluster_states": {
            k: torch.from_numpy(np.array(v, order="C", copy=True))
            for k, v in run.cluster_states.items()
        },
        "model": str(run.model),
        "image_shape": [int(s) for s in run.image_shape],
        "num_classes": int(run.num_classes),
        "router": str(run.router),
        "router_checkpoint": checkpoint,
        "router_sha256": sha,
        "component_map": (
            None
            if run.component_map is None
            else torch.from_numpy(np.asarray(run.component_map, dtype=np.int64).copy())
        ),
        # Plain JSON types only, so weights_only loading accepts every value.
        "settings": json.loads(json.dumps(to_jsonable(run.settings))),
    }
    for extra in ("descriptor", "concepts"):
        arrays = getattr(run, extra)
        if arrays is not None:
            payload[extra] = {
                k: torch.from_numpy(np.array(v, order="C", copy=True)) for k, v in arrays.items()
            }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(seal(payload), tmp)
    tmp.replace(path)
    return path


def load_run(path: str | Path, *, allow_unverified: bool = False) -> SavedRun:
    """Read a file written by :func:`save_run` (weights only; content hash and shapes checked).

    A file whose content does not match its stored SHA-256 raises
    :class:`~ripple_flwr.io.integrity.IntegrityError` (a ValueError). Files of
    format version 1 carry no hash and are refused unless ``allow_unverified``
    (then ``save_run(path, load_run(path, allow_unverified=True))`` upgrades one).
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"saved run {path} not found; {_HOW_TO_GET_ONE}")
    payload = load_weights_only(path, "saved run", _RECREATE)
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        hint = ""
        if isinstance(payload, dict) and "vae_config" in payload:
            hint = (
                " (it is a GMM-VAE checkpoint, the router alone; pass the run file, "
                "which points to its checkpoint)"
            )
        raise ValueError(f"{path} is not a ripple-flwr saved run{hint}; {_HOW_TO_GET_ONE}")
    check = FileCheck(f"saved run {path}", _RECREATE)
    check.keys(payload, _KEYS, optional=(HASH_KEY, "descriptor", "concepts"))
    version = payload.get("version")
    if version == _UNHASHED_VERSION:
        if not allow_unverified:
            raise ValueError(
                f"{path} is a saved run of format version {version}, written before saved runs "
                "carried a content hash, so it cannot be checked for corruption; re-create it, "
                'or, if you trust the file, add the hash once with: python -c "from '
                "ripple_flwr.runs.saved_runs import load_run, save_run; p = '<file>'; "
                'save_run(p, load_run(p, allow_unverified=True))"'
            )
    elif version != SAVED_RUN_VERSION:
        raise ValueError(
            f"{path} is a saved run of version {version!r}; this code reads version "
            f"{SAVED_RUN_VERSION} (and {_UNHASHED_VERSION} with allow_unverified)"
        )
    elif not verify(payload, f"saved run {path}", _RECREATE):
        raise IntegrityError(
            f"saved run {path} is corrupted or was modified: its content hash is missing; "
            + _RECREATE
        )
    fields = _checked_fields(payload, check)
    try:
        return SavedRun(**fields)
    except (ValueError, TypeError) as err:
        raise ValueError(f"saved run {path} is inconsistent: {err}; {_RECREATE}") from err


def _checked_fields(payload: dict[str, Any], check: FileCheck) -> dict[str, Any]:
    """The :class:`SavedRun` fields of a loaded payload, each of the kind :func:`save_run` writes.

    Float tensors must be finite: a run never saves a NaN model (its update bound refuses
    one), so a NaN here was put there after the run.
    """
    states = check.tensors(payload["cluster_states"], "cluster_states")
    cmap = payload["component_map"]
    if cmap is not None:
        check.tensor(cmap, "component_map")
    for key in ("model", "router", "router_checkpoint", "router_sha256"):
        check.kind(payload[key], str, key)
    extras = {}
    for extra in ("descriptor", "concepts"):
        arrays = payload.get(extra)
        if arrays is not None:
            arrays = {k: v.numpy() for k, v in check.tensors(arrays, extra).items()}
        extras[extra] = arrays
    return {
        "cluster_states": {k: v.numpy() for k, v in states.items()},
        "model": payload["model"],
        "image_shape": tuple(check.int_list(payload["image_shape"], "image_shape", 3)),
        "num_classes": check.kind(payload["num_classes"], int, "num_classes"),
        "router": payload["router"],
        "router_checkpoint": payload["router_checkpoint"],
        "router_sha256": payload["router_sha256"],
        "component_map": None if cmap is None else cmap.numpy(),
        "settings": check.kind(payload["settings"], dict, "settings"),
        **extras,
    }


# -- onboarding ----------------------------------------------------------------------------
