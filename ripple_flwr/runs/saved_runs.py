"""Zero-shot onboarding (phase 4 of the spec), outside any Flower run.

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

An :class:`Onboarder` is built once per saved run (router, scattering
filters and model skeleton are reused) and onboards any number of clients;
``onboard.py`` is the command-line front end.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ripple_flwr.aggregation.hdb import collapse_weights
from ripple_flwr.aggregation.mixing import mix_model, mix_stacked, unstack
from ripple_flwr.io.checks import FileCheck
from ripple_flwr.io.integrity import HASH_KEY, IntegrityError, seal, verify
from ripple_flwr.io.jsonable import to_jsonable
from ripple_flwr.router.pretrain import load_checkpoint, resolve_device
from ripple_flwr.training.models import build_model, set_state
from ripple_flwr.wst.embedder import PrototypeSettings, SpectralEmbedder

__all__ = [
    "SAVED_RUN_VERSION",
    "Onboarder",
    "Onboarding",
    "SavedRun",
    "file_sha256",
    "load_model",
    "load_run",
    "save_model",
    "save_run",
]

# 2: the payload carries its content SHA-256. Version 1 files (no hash) are read only
# with ``load_run(..., allow_unverified=True)``.
SAVED_RUN_VERSION = 2
_UNHASHED_VERSION = 1
_FORMAT = "ripple-flwr saved run"
ONBOARDING_ROUTERS = ("gmm-vae", "mean-unmixing", "none")
_HOW_TO_GET_ONE = (
    "a ripple-flwr run saves it next to its results JSON when it finishes; "
    "or write one with ripple_flwr.runs.saved_runs.save_run"
)
_RECREATE = (
    "restore the original file, or re-create it by running the federation again (a run "
    "saves <results>.run.pt when it finishes)"
)
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
_RANGE_TOL = 1e-3


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
        self.validate()

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


def save_run(path: str | Path, run: SavedRun) -> Path:
    """Write ``run`` atomically (tmp file + replace); return the absolute path.

    The checkpoint path is stored absolute. A missing ``router_sha256`` is
    filled in from the checkpoint file, which must then exist. The file
    records the SHA-256 of its content, which :func:`load_run` checks.
    """
    run.validate()
    path = Path(path).expanduser().resolve()
    checkpoint, sha = run.router_checkpoint, run.router_sha256
    if run.router != "none":
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
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for corrupt or unsafe files
        raise ValueError(
            f"cannot read saved run {path}: it is corrupted, truncated or not a torch file "
            f"({err}); {_RECREATE}"
        ) from err
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        hint = ""
        if isinstance(payload, dict) and "vae_config" in payload:
            hint = (
                " (it is a GMM-VAE checkpoint, the router alone; pass the run file, "
                "which points to its checkpoint)"
            )
        raise ValueError(f"{path} is not a ripple-flwr saved run{hint}; {_HOW_TO_GET_ONE}")
    check = FileCheck(f"saved run {path}", _RECREATE)
    check.keys(payload, _KEYS, optional=(HASH_KEY,))
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
    }


# -- onboarding ----------------------------------------------------------------------------
@dataclass
class Onboarding:
    """One onboarded client.

    ``summary``: what the client sends (Phi or its mean image; None for router
    ``none``); ``weights``: the router's (K,) output; ``model_weights``: the
    (M,) mixing weights after the component map (== ``weights`` without one);
    ``state``: the personalised model theta_new.
    """

    summary: np.ndarray | None
    weights: np.ndarray
    model_weights: np.ndarray
    state: dict[str, np.ndarray]


def _setting(settings: Mapping[str, Any], fallback: Mapping[str, Any], key: str) -> Any:
    """A run setting by its dashed key, else the checkpoint's (underscored) value."""
    if key in settings:
        return settings[key]
    return fallback.get(key.replace("-", "_"))


class Onboarder:
    """Built once per saved run: router, embedder (scattering filters) and model skeleton
    are reused for every client."""

    def __init__(self, run: SavedRun, device: str = "cpu") -> None:
        run.validate()
        self.run = run
        self.device = resolve_device(device)
        self.router = None
        self.embedder: SpectralEmbedder | None = None
        self._map = run.component_map
        if run.router != "none":
            self._load_router()
        # The skeleton is built once (construction draws from torch's global RNG,
        # copies do not) and checked against the cluster states right away.
        self._skeleton = build_model(
            run.model,
            run.image_shape,
            run.num_classes,
            pretrained=bool(run.settings.get("pretrained", False)),
        )
        try:
            set_state(self._skeleton, {k: v[0] for k, v in run.cluster_states.items()})
        except ValueError as err:
            raise ValueError(
                f"the saved cluster models do not fit model {run.model!r} for "
                f"{run.image_shape} images and {run.num_classes} classes: {err}"
            ) from err
        self._skeleton.eval()

    def _load_router(self) -> None:
        run = self.run
        path = Path(run.router_checkpoint)
        if not path.is_file():
            raise FileNotFoundError(
                f"GMM-VAE checkpoint {path} of this saved run is missing; restore it there "
                "(the run routed with that exact file)"
            )
        if run.router_sha256:
            sha = file_sha256(path)
            if sha != run.router_sha256:
                raise ValueError(
                    f"GMM-VAE checkpoint {path} changed after the run was saved (sha256 "
                    f"{sha[:12]}... instead of {run.router_sha256[:12]}...); the cluster "
                    "models were trained with the original router, restore that file"
                )
        expected: dict[str, Any] = {"image_shape": list(run.image_shape)}
        for key in ("J", "L", "svd-rank", "explained-variance"):
            if key in run.settings:
                value = run.settings[key]
                if key == "explained-variance":
                    value = value if value else None
                expected[key.replace("-", "_")] = value
        # A checkpoint that predates content hashes is still pinned by the file hash above.
        ckpt = load_checkpoint(path, expected=expected, allow_unverified=bool(run.router_sha256))
        self.router = ckpt.router(run.router, device=self.device)
        k = run.num_components
        if self.router.num_components != k:
            what = "component map length" if self._map is not None else "number of models M"
            raise ValueError(
                f"router {run.router!r} of {path} has K={self.router.num_components} "
                f"components but the saved run's {what} is {k}"
            )
        if self.router.needs == "embedding":
            ev = _setting(run.settings, ckpt.settings, "explained-variance")
            self.embedder = SpectralEmbedder(
                run.image_shape,
                J=int(_setting(run.settings, ckpt.settings, "J")),
                L=int(_setting(run.settings, ckpt.settings, "L")),
                prototype=PrototypeSettings(
                    int(_setting(run.settings, ckpt.settings, "svd-rank")),
                    float(ev) if ev else None,
                ),
                device=self.device,
                # The side the router's embeddings were made at (older checkpoints: the image's).
                embed_size=int(ckpt.settings.get("embed_size") or 0) or None,
            )
            if self.embedder.output_dim != self.router.input_dim:
                raise ValueError(
                    f"embeddings have {self.embedder.output_dim} features but the router "
                    f"reads {self.router.input_dim}; the checkpoint does not match this run"
                )
        elif self.router.input_dim != int(np.prod(run.image_shape)):
            raise ValueError(
                f"mean-unmixing reads {self.router.input_dim} pixels but images "
                f"{run.image_shape} have {int(np.prod(run.image_shape))}"
            )

    @classmethod
    def from_path(cls, path: str | Path, device: str = "cpu") -> Onboarder:
        """Load a saved run and build its onboarder."""
        return cls(load_run(path), device=device)

    @property
    def summary_kind(self) -> str:
        """``embedding``, ``mean`` or ``none``: what a client computes and sends."""
        return "none" if self.router is None else self.router.needs

    # -- client side ------------------------------------------------------------------
    def check_images(self, images: np.ndarray) -> np.ndarray:
        """Validated float32 ``(N, C, H, W)`` images in [0, 1] of the run's shape."""
        x = np.asarray(images)
        shape = self.run.image_shape
        if x.ndim == 3 and shape[0] == 1:
            x = x[:, None]
        if x.ndim != 4 or tuple(x.shape[1:]) != shape:
            raise ValueError(
                f"images have shape {np.shape(images)} but this run's model takes images of "
                f"shape (N, {', '.join(map(str, shape))})"
                + (" or (N, H, W)" if shape[0] == 1 else "")
            )
        if len(x) == 0:
            raise ValueError("no images: a client needs at least one (two for an embedding)")
        if not np.issubdtype(x.dtype, np.floating):
            raise ValueError(
                f"images are {x.dtype}; scale them to float32 in [0, 1] first "
                "(e.g. images.astype(np.float32) / 255 for 8-bit pixels)"
            )
        x = x.astype(np.float32, copy=False)
        if not np.all(np.isfinite(x)):
            raise ValueError("images contain NaN or Inf")
        lo, hi = float(x.min()), float(x.max())
        if lo < -_RANGE_TOL or hi > 1 + _RANGE_TOL:
            raise ValueError(
                f"images must be scaled to [0, 1] like the run's training data, got values "
                f"in [{lo:.3g}, {hi:.3g}] (divide 0-255 pixels by 255)"
            )
        return x

    def summarise(self, images: np.ndarray) -> np.ndarray | None:
        """The client-side computation: its embedding Phi, its mean image, or None."""
        x = self.check_images(images)
        if self.router is None:
            return None
        if self.router.needs == "mean":
            return x.reshape(len(x), -1).mean(axis=0).astype(np.float32)
        assert self.embedder is not None
        return self.embedder.embed(x).astype(np.float32)

    # -- server side ------------------------------------------------------------------
    def route(self, summaries: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """``(B, F)`` summaries -> weights ``(B, K)`` and model weights ``(B, M)``.

        One batched forward pass of the router. For router ``none`` the
        summaries are ignored (pass None for one client, or any ``(B, ...)``
        array) and every weight is 1.
        """
        if self.router is None:
            b = 1 if summaries is None else len(summaries)
            ones = np.ones((b, 1), dtype=np.float64)
            return ones, ones.copy()
        if summaries is None:
            raise ValueError(f"router {self.run.router!r} needs the clients' summaries")
        x = np.asarray(summaries, dtype=np.float32)
        if x.ndim == 1:
            x = x[None]
        with torch.no_grad():
            weights = np.asarray(self.router.route(x), dtype=np.float64)
        if self._map is None:
            return weights, weights.copy()
        return weights, collapse_weights(weights, self._map, self.run.num_models)

    def _mix_one(self, model_weights: np.ndarray) -> dict[str, np.ndarray]:
        if self.router is None:
            return {k: np.array(v[0], copy=True) for k, v in self.run.cluster_states.items()}
        return mix_model(model_weights, self.run.cluster_states)

    def onboard(self, images: np.ndarray) -> Onboarding:
        """One new client, end to end: summary, one router pass, one mix."""
        summary = self.summarise(images)
        weights, model_weights = self.route(None if summary is None else summary[None])
        return Onboarding(summary, weights[0], model_weights[0], self._mix_one(model_weights[0]))

    def onboard_many(self, clients: Sequence[np.ndarray]) -> list[Onboarding]:
        """Several clients: a summary each, one batched router pass, one batched mix."""
        summaries = []
        for i, images in enumerate(clients):
            try:
                summaries.append(self.summarise(images))
            except ValueError as err:
                raise ValueError(f"client {i}: {err}") from err
        if not summaries:
            return []
        if self.router is None:
            weights, model_weights = self.route(np.zeros((len(summaries), 0)))
            states = [self._mix_one(model_weights[0]) for _ in summaries]
        else:
            weights, model_weights = self.route(np.stack(summaries))
            states = unstack(mix_stacked(model_weights, self.run.cluster_states))
        return [
            Onboarding(s, w, mw, st)
            for s, w, mw, st in zip(summaries, weights, model_weights, states, strict=True)
        ]

    def build_model(self, state: Mapping[str, np.ndarray]) -> torch.nn.Module:
        """The run's architecture with ``state`` loaded, in eval mode, on this device."""
        model = copy.deepcopy(self._skeleton)
        set_state(model, dict(state))
        return model.to(self.device).eval()


def save_model(path: str | Path, onboarding: Onboarding, run: SavedRun) -> Path:
    """Write the personalised model atomically; return the absolute path.

    The file holds ``state_dict`` (torch tensors), ``model``, ``image_shape``,
    ``num_classes``, ``pretrained``, ``weights`` and ``model_weights``; it loads with
    ``torch.load(weights_only=True)`` and into
    ``build_model(model, image_shape, num_classes, pretrained=pretrained).load_state_dict``.
    """
    path = Path(path).expanduser().resolve()
    payload = {
        "state_dict": {
            k: torch.from_numpy(np.array(v, order="C", copy=True))
            for k, v in onboarding.state.items()
        },
        "model": str(run.model),
        "image_shape": [int(s) for s in run.image_shape],
        "num_classes": int(run.num_classes),
        "pretrained": bool(run.settings.get("pretrained", False)),  # the architecture's stem
        "weights": [float(v) for v in np.asarray(onboarding.weights).ravel()],
        "model_weights": [float(v) for v in np.asarray(onboarding.model_weights).ravel()],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)
    return path


def load_model(path: str | Path, device: str = "cpu") -> torch.nn.Module:
    """A model written by :func:`save_model`, built and loaded, in eval mode."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"model file {path} not found")
    payload = torch.load(path, map_location="cpu", weights_only=True)
    model = build_model(
        payload["model"],
        tuple(payload["image_shape"]),
        payload["num_classes"],
        pretrained=bool(payload.get("pretrained", False)),
    )
    model.load_state_dict(payload["state_dict"])
    return model.to(resolve_device(device)).eval()
