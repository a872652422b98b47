"""Zero-shot onboarding of a new client from a saved run: :class:`Onboarder`.

A client that never took part in training sends its one-shot summary (the WST
embedding, or its mean image for the mean-unmixing reference); the frozen
router maps it to cluster weights w_new and the client receives the w_new-mix
of the trained cluster models: one forward pass and one weighted sum, no
gradient step. An :class:`Onboarder` is built once per saved run
(:mod:`ripple_flwr.runs.saved_runs`: router, scattering filters and model
skeleton are reused) and onboards any number of clients; ``onboard.py`` is the
command-line front end.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ripple_flwr.aggregation.concepts import (
    Concepts,
    LabelStacks,
    combine,
    label_block,
    place,
)
from ripple_flwr.aggregation.descriptors import (
    BlockScaler,
    Layout,
    assemble,
    client_statistics,
    clip_statistics,
    nearest_centroid,
)
from ripple_flwr.aggregation.hdb import collapse_weights
from ripple_flwr.aggregation.mixing import mix_model, mix_stacked, unstack
from ripple_flwr.io.torch_files import load_weights_only
from ripple_flwr.privacy.label_means import LabelMechanism
from ripple_flwr.router.checkpoint import load_checkpoint
from ripple_flwr.router.pretrain import resolve_device
from ripple_flwr.runs.saved_runs import SavedRun, file_sha256, load_run
from ripple_flwr.training.latent import latent_features
from ripple_flwr.training.models import build_model, set_state
from ripple_flwr.wst.embedder import PrototypeSettings, SpectralEmbedder

__all__ = ["Onboarder", "Onboarding", "load_model", "save_model"]

_RANGE_TOL = 1e-3  # images may exceed [0, 1] by this much (rounding of a float pipeline)


@dataclass
class Onboarding:
    """One onboarded client.

    ``summary``: what the client sends (Phi or its mean image; None for router
    ``none``); ``weights``: the router's (K,) output; ``model_weights``: the
    (M,) mixing weights after the component map (== ``weights`` without one);
    ``state``: the personalised model theta_new; ``fallback``: why the router did not read
    the summary and gave the uniform w = 1/K instead (e.g. an embedding outside its domain:
    images unlike any it was trained on), ``None`` when it routed normally.
    """

    summary: np.ndarray | None
    weights: np.ndarray
    model_weights: np.ndarray
    state: dict[str, np.ndarray]
    fallback: str | None = None


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
        self.concepts: Concepts | None = None
        if run.concepts is not None:
            c = run.concepts
            t = LabelStacks(*(np.asarray(c[k], dtype=np.float64) for k in LabelStacks.FIELDS))
            self.concepts = Concepts(t, np.zeros(0, dtype=np.int64), "saved")
        self.label_dp = label_dp_of(run)  # the run's per-label DP release, if any
        if run.router not in ("none", "descriptor"):
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
        self._describer: torch.nn.Module | None = None
        if run.router == "descriptor":  # FLUX: the model descriptors are computed under
            d = run.descriptor
            self._describer = self.build_model(
                {k[len("model/") :]: v for k, v in d.items() if k.startswith("model/")}
            )
            self._free = Layout(int(d["offset"].shape[0]), run.num_classes, labelled=False)

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
        k = run.num_components // run.num_concepts
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
        """``embedding``, ``mean``, ``descriptor`` or ``none``: what a client computes and sends."""
        if self._describer is not None:
            return "descriptor"
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
                + (f" or (N, {shape[1]}, {shape[2]})" if shape[0] == 1 else "")
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
        if self._describer is not None:  # FLUX's label-free statistics: no label is read
            z = latent_features(self._describer, x, device=str(self.device))
            return client_statistics(z, None, self.run.num_classes, self._free.k)
        if self.router is None:
            return None
        if self.router.needs == "mean":
            return x.reshape(len(x), -1).mean(axis=0).astype(np.float32)
        assert self.embedder is not None
        return self.embedder.embed(x).astype(np.float32)

    def label_summary(self, images: np.ndarray, labels: np.ndarray | None) -> np.ndarray | None:
        """A class-conditional run's per-label block of labelled images (``None``: no labels,
        or the run is not class-conditional)."""
        if self.concepts is None or labels is None:
            return None
        x = self.check_images(images)
        y = np.asarray(labels)
        if y.ndim != 1 or len(y) != len(x) or not np.issubdtype(y.dtype, np.integer):
            raise ValueError(
                f"labels must be one integer per image ({len(x)}), got {y.dtype} {y.shape}"
            )
        if len(y) and not 0 <= y.min() <= y.max() < self.run.num_classes:
            raise ValueError(f"labels must lie in [0, {self.run.num_classes}) (the run's classes)")
        count = int(np.ravel(self.run.concepts["min_label_count"])[0])
        return label_block(x, y, self.run.num_classes, count, self.label_dp)

    def concept_weights(self, blocks: list[np.ndarray | None]) -> tuple[np.ndarray, list]:
        """(B, G) concept weights of these per-label blocks; a client without one (no labels)
        or whose block is unusable gets 1/G, and its reason."""
        g = self.run.num_concepts
        w = np.full((len(blocks), g), 1.0 / g)
        reasons: list[str | None] = [None] * len(blocks)
        rows = [i for i, b in enumerate(blocks) if b is not None]
        for i in set(range(len(blocks))) - set(rows):
            reasons[i] = (
                "no labels: this class-conditional run cannot tell the client's concept, so it "
                "is placed by its label-free summary alone (concept weights 1/G)"
            )
        if rows and self.concepts is not None:
            c, d = self.run.num_classes, int(np.prod(self.run.image_shape))
            count = int(np.ravel(self.run.concepts["min_label_count"])[0])
            noise = None if self.label_dp is None else self.label_dp.sigmas
            got, why = place(
                np.stack([blocks[i] for i in rows]), self.concepts, c, d, count, noise_sd=noise
            )
            for j, i in enumerate(rows):
                w[i] = got[j]
                reasons[i] = None if why[j] is None else f"{why[j]}: concept weights 1/G"
        return w, reasons

    # -- server side ------------------------------------------------------------------
    def route(self, summaries: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """``(B, F)`` summaries -> weights ``(B, K)`` and model weights ``(B, M)``.

        :meth:`route_with_reasons` also says which clients the router fell back on 1/K for.
        """
        weights, model_weights, _ = self.route_with_reasons(summaries)
        return weights, model_weights

    def route_with_reasons(
        self, summaries: np.ndarray | None, blocks: list[np.ndarray | None] | None = None
    ) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
        """``(B, F)`` summaries -> weights ``(B, K)``, model weights ``(B, M)`` and, per
        client, why the router routed it uniformly (``None``: it read the summary).

        One batched forward pass of the router. For router ``none`` the
        summaries are ignored (pass None for one client, or any ``(B, ...)``
        array) and every weight is 1. A FLUX run (router ``descriptor``) gives
        each client weight 1 on the model of the centroid nearest its
        label-free descriptor, as the run assigned its own new clients. A class-conditional
        run multiplies the router's weights by the concept weights of ``blocks`` (one per
        client, ``None`` where it has no labels: then 1/G, with its reason).
        """
        if self._describer is not None:
            weights, model_weights = self._nearest(summaries)
            return weights, model_weights, [None] * len(weights)
        if self.router is None:
            b = 1 if summaries is None else len(summaries)
            ones = np.ones((b, 1), dtype=np.float64)
            return ones, ones.copy(), [None] * b
        if summaries is None:
            raise ValueError(f"router {self.run.router!r} needs the clients' summaries")
        x = np.asarray(summaries, dtype=np.float32)
        if x.ndim == 1:
            x = x[None]
        both = getattr(self.router, "route_with_reasons", None)
        with torch.no_grad():
            if both is None:  # a router without a domain check
                weights, reasons = self.router.route(x), [None] * len(x)
            else:
                weights, reasons = both(x)
        weights = np.asarray(weights, dtype=np.float64)
        if self.concepts is not None:
            cw, why = self.concept_weights(list(blocks) if blocks is not None else [None] * len(x))
            weights = combine(cw, weights)
            reasons = [
                "; ".join(r for r in (a, b) if r) or None for a, b in zip(reasons, why, strict=True)
            ]
        if self._map is None:
            return weights, weights.copy(), list(reasons)
        return weights, collapse_weights(weights, self._map, self.run.num_models), list(reasons)

    def _nearest(self, summaries: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        if summaries is None:
            raise ValueError("a FLUX run needs the clients' descriptors")
        d, layout = self.run.descriptor, self._free
        stats = np.atleast_2d(np.asarray(summaries, dtype=np.float64))
        stats, _ = clip_statistics(stats, layout, float(np.ravel(d["bound"])[0]))
        raw = np.stack([assemble(v, layout, d["offset"]) for v in stats])
        scaled = BlockScaler(layout.k, d["scale_low"], d["scale_high"]).transform(raw)
        labels, _ = nearest_centroid(scaled, d["centroids"])
        weights = np.eye(self.run.num_models)[labels]
        return weights, weights.copy()

    def _mix_one(self, model_weights: np.ndarray) -> dict[str, np.ndarray]:
        if self.run.router in ("none", "descriptor"):  # one model: the global or the nearest
            c = int(np.argmax(model_weights))
            return {k: np.array(v[c], copy=True) for k, v in self.run.cluster_states.items()}
        return mix_model(model_weights, self.run.cluster_states)

    def onboard(self, images: np.ndarray, labels: np.ndarray | None = None) -> Onboarding:
        """One new client, end to end: summary, one router pass, one mix. ``labels`` (one per
        image) place it among a class-conditional run's concepts."""
        summary = self.summarise(images)
        weights, model_weights, reasons = self.route_with_reasons(
            None if summary is None else summary[None], [self.label_summary(images, labels)]
        )
        state = self._mix_one(model_weights[0])
        return Onboarding(summary, weights[0], model_weights[0], state, reasons[0])

    def onboard_many(
        self, clients: Sequence[np.ndarray], labels: Sequence[np.ndarray | None] | None = None
    ) -> list[Onboarding]:
        """Several clients: a summary each, one batched router pass, one batched mix.
        ``labels``: each client's labels (``None`` where it has none), for a class-conditional
        run."""
        summaries, blocks = [], []
        labels = [None] * len(clients) if labels is None else list(labels)
        if len(labels) != len(clients):
            raise ValueError(f"{len(labels)} label arrays for {len(clients)} clients")
        for i, images in enumerate(clients):
            try:
                summaries.append(self.summarise(images))
                blocks.append(self.label_summary(images, labels[i]))
            except ValueError as err:
                raise ValueError(f"client {i}: {err}") from err
        if not summaries:
            return []
        if self.run.router == "none":
            weights, model_weights, reasons = self.route_with_reasons(np.zeros((len(summaries), 0)))
            states = [self._mix_one(model_weights[0]) for _ in summaries]
        elif self._describer is not None:
            weights, model_weights, reasons = self.route_with_reasons(np.stack(summaries))
            states = [self._mix_one(w) for w in model_weights]
        else:
            weights, model_weights, reasons = self.route_with_reasons(np.stack(summaries), blocks)
            states = unstack(mix_stacked(model_weights, self.run.cluster_states))
        rows = zip(summaries, weights, model_weights, states, reasons, strict=True)
        return [Onboarding(s, w, mw, st, r) for s, w, mw, st, r in rows]

    def build_model(self, state: Mapping[str, np.ndarray]) -> torch.nn.Module:
        """The run's architecture with ``state`` loaded, in eval mode, on this device."""
        model = copy.deepcopy(self._skeleton)
        set_state(model, dict(state))
        return model.to(self.device).eval()


def label_dp_of(run: SavedRun) -> LabelMechanism | None:
    """A class-conditional run's per-label DP release, from its saved settings."""
    if run.concepts is None:
        return None
    keys = run.settings
    return LabelMechanism.of(
        float(keys.get("label-dp-epsilon") or 0.0),
        float(keys.get("label-dp-delta", 1e-5)),
        float(keys.get("label-dp-clip") or 0.0),
        run.image_shape,
    )


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
    fix = f"re-create it with `python onboard.py <run.pt> --images <images> --out {path}`"
    payload = load_weights_only(path, "onboarded model", fix)
    model = build_model(
        payload["model"],
        tuple(payload["image_shape"]),
        payload["num_classes"],
        pretrained=bool(payload.get("pretrained", False)),
    )
    model.load_state_dict(payload["state_dict"])
    return model.to(resolve_device(device)).eval()
