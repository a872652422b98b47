"""ResNet-18 started from torchvision's ImageNet weights (the paper's Office-Home and GLDv2 runs).

Two halves, kept apart so that clients never touch the disk:

- :class:`ImageNetResNet18`, the architecture the weights fit, built by
  ``build_model("resnet18", shape, classes, pretrained=True)`` with a random
  initialisation (the server loads the weights, then sends them as any state);
- :func:`load_imagenet_weights`, which the server calls once on that model.

The architecture is torchvision's ``resnet18`` with three decisions:

- **Stem.** Images with both sides >= 64 keep torchvision's stem (7x7 stride-2
  conv and max-pool), so every ImageNet weight loads; the paper runs GLDv2 at
  64x64 and Office-Home at 224x224 this way. Smaller images (CIFAR-sized) keep
  the small-image stem of the model zoo (3x3 stride-1 conv, no max-pool): its
  ``conv1`` does not fit the 7x7 filters and is trained from scratch, the rest
  loads.
- **Head.** The paper's head is AdaptiveAvgPool -> Dropout(0) -> Linear(512, C).
  Dropout(0) is the identity, so it is left out and the head is torchvision's
  ``fc = nn.Linear(512, C)`` (keys ``fc.weight``/``fc.bias``), freshly initialised.
- **Input normalisation.** The first operation of ``forward`` maps [0, 1] images
  to ImageNet statistics, ``(x - mean) / std`` with torchvision's mean
  (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225). They are non-persistent
  buffers: part of the architecture (they follow ``.to(device)``), never part of
  ``state_dict()``, so never aggregated or sent; a client's skeleton has them too.

Grey (1-channel) images: ``conv1``'s ImageNet filter is summed over its three RGB
input channels (the response of the RGB filter to a grey image replicated to
RGB), and the grey input is normalised with the mean of the three means and the
mean of the three stds (0.449, 0.226). The sum is exact for replicated grey
images up to the channels' slightly different stds.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, ResNet

from ripple_flwr.io.torch_files import load_weights_only

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "IMAGENET_STEM_MIN_SIDE",
    "RESNET18_FILE",
    "RESNET18_URL",
    "ImageNetResNet18",
    "PretrainedWeightsError",
    "load_imagenet_weights",
    "pretrained_weights_path",
]

log = logging.getLogger(__name__)

# torchvision's ResNet18_Weights.IMAGENET1K_V1: its file, its URL, and the sha256 prefix
# torch.hub checks (the part of the name after the dash).
RESNET18_FILE = "resnet18-f37072fd.pth"
RESNET18_URL = f"https://download.pytorch.org/models/{RESNET18_FILE}"
_SHA256_PREFIX = "f37072fd"
# ResNet18_Weights.IMAGENET1K_V1.transforms(): on [0, 1] RGB inputs.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# Both sides at least this: torchvision's 7x7 stride-2 stem; below: the small-image stem.
IMAGENET_STEM_MIN_SIDE = 64
# Seconds a download may stall (connect or read) before it counts as failed.
_DOWNLOAD_TIMEOUT_S = 60.0
# Mismatches named in the error for a wrong file.
_SHOWN = 5


class PretrainedWeightsError(FileNotFoundError):
    """The ImageNet weights are not on this machine and could not be fetched.

    A :class:`FileNotFoundError`: the remedy is placing a file. A file that is
    there but is not ResNet-18's ImageNet state dict raises :class:`ValueError`.
    """


def _normalisation(channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """ImageNet mean and std ``(1, C, 1, 1)``: torchvision's for RGB, their means for grey."""
    mean, std = torch.tensor(IMAGENET_MEAN), torch.tensor(IMAGENET_STD)
    if channels == 1:
        mean, std = mean.mean(0, keepdim=True), std.mean(0, keepdim=True)
    elif channels != 3:
        raise ValueError(f"pretrained resnet18 needs 1 or 3 input channels, got {channels}")
    return mean.view(1, channels, 1, 1), std.view(1, channels, 1, 1)


class ImageNetResNet18(ResNet):
    """torchvision's ResNet-18 with ImageNet input normalisation first in ``forward``.

    Built with random weights (deterministic under ``torch.manual_seed``);
    :func:`load_imagenet_weights` fills them in. The state-dict keys are
    exactly torchvision's (``conv1.weight``, ..., ``fc.bias``); the
    normalisation buffers ``input_mean``/``input_std`` are not among them.
    ``imagenet_stem`` says which stem it has (see the module docstring).
    """

    def __init__(self, image_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__(BasicBlock, [2, 2, 2, 2], num_classes=num_classes)
        c, h, w = image_shape
        self.imagenet_stem = min(h, w) >= IMAGENET_STEM_MIN_SIDE
        if not self.imagenet_stem:
            # The model zoo's small-image stem: trained from scratch.
            self.conv1 = nn.Conv2d(c, 64, 3, stride=1, padding=1, bias=False)
            self.maxpool = nn.Identity()
        elif c != 3:
            self.conv1 = nn.Conv2d(c, 64, 7, stride=2, padding=3, bias=False)
        nn.init.kaiming_normal_(self.conv1.weight, mode="fan_out", nonlinearity="relu")
        mean, std = _normalisation(c)
        self.register_buffer("input_mean", mean, persistent=False)
        self.register_buffer("input_std", std, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward((x - self.input_mean) / self.input_std)


def pretrained_weights_path(explicit: str | Path = "") -> Path:
    """Where the ImageNet weights are, or must be placed.

    ``explicit`` (the ``pretrained-weights`` setting) when given, else
    ``$TORCH_HOME/hub/checkpoints/resnet18-f37072fd.pth`` (``torch.hub.get_dir()``
    + ``/checkpoints``; ``TORCH_HOME`` defaults to ``~/.cache/torch``), where
    torchvision itself downloads and finds them.
    """
    if str(explicit):
        return Path(explicit).expanduser()
    return Path(torch.hub.get_dir()) / "checkpoints" / RESNET18_FILE


def _download(path: Path) -> None:
    """Fetch torchvision's file to ``path`` (atomically), its sha256 prefix checked.

    What ``torch.hub.load_state_dict_from_url`` does, with a timeout so an
    unreachable network fails in a minute instead of hanging.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with (
            os.fdopen(fd, "wb") as out,
            urllib.request.urlopen(RESNET18_URL, timeout=_DOWNLOAD_TIMEOUT_S) as response,
        ):
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        if not digest.hexdigest().startswith(_SHA256_PREFIX):
            raise ValueError(
                f"downloaded file has sha256 {digest.hexdigest()[:16]}..., "
                f"expected {_SHA256_PREFIX}..."
            )
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _locate(weights: str | Path | None) -> Path:
    """The file to load: the explicit one, the hub cache's, or a fresh download there."""
    if weights is not None and str(weights):
        path = pretrained_weights_path(weights)
        if not path.is_file():
            raise PretrainedWeightsError(
                f"pretrained-weights file {path} does not exist (the ImageNet weights of "
                f"resnet18, {RESNET18_FILE}, from {RESNET18_URL})"
            )
        return path
    path = pretrained_weights_path()
    if path.is_file():
        return path
    try:
        _download(path)
    except Exception as err:  # noqa: BLE001 - any failure: offline, proxy, disk, hash
        reason = " ".join(f"{type(err).__name__}: {err}".split())
        raise PretrainedWeightsError(
            f"ImageNet weights for resnet18 not found at {path} and the download failed "
            f"({reason}): offline, place {RESNET18_FILE} ({RESNET18_URL}) at {path}, "
            f"or set pretrained-weights=<file>"
        ) from err
    if not path.is_file():
        raise PretrainedWeightsError(f"the download reported success but {path} is missing")
    log.info("downloaded the ImageNet weights of resnet18 to %s", path)
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _read(path: Path) -> dict[str, torch.Tensor]:
    state = load_weights_only(
        path,
        "the resnet18 ImageNet weights",
        f"download torchvision's {RESNET18_FILE} ({RESNET18_URL}) to {path} again, or set "
        "pretrained-weights=<file>",
        kind=f"resnet18 weights ({RESNET18_FILE})",
    )
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ValueError(
            f"{path} is not a state dict (a dict of tensors, as torchvision's {RESNET18_FILE})"
        )
    return state


def _match_weights(
    source: dict[str, torch.Tensor],
    target: dict[str, torch.Tensor],
    *,
    small_stem: bool,
    path: Path,
) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
    """(tensors to load by key, keys skipped, keys adapted) of the file ``source`` for the
    model's ``target``; a key missing, extra or misshapen is a :class:`ValueError`."""
    new: dict[str, torch.Tensor] = {}
    skipped: list[str] = []
    adapted: list[str] = []
    problems: list[str] = []
    for key, dst in target.items():
        if key.startswith("fc."):
            skipped.append(key)
            continue
        if key not in source:
            if key.endswith(".num_batches_tracked") or key == "num_batches_tracked":
                skipped.append(key)
            else:
                problems.append(f"{key} missing")
            continue
        src = source[key]
        if tuple(src.shape) == tuple(dst.shape):
            new[key] = src
        elif key == "conv1.weight" and small_stem:
            skipped.append(key)
        elif (
            key == "conv1.weight"
            and dst.shape[1] == 1
            and src.ndim == 4
            and src.shape[1] == 3
            and (src.shape[0], *src.shape[2:]) == (dst.shape[0], *dst.shape[2:])
        ):
            new[key] = src.sum(dim=1, keepdim=True)
            adapted.append(key)
        else:
            problems.append(f"{key} is {tuple(src.shape)} in the file, {tuple(dst.shape)} here")
    problems += [f"unexpected {k}" for k in source if k not in target and not k.startswith("fc.")]
    if problems:
        shown = "; ".join(problems[:_SHOWN])
        if len(problems) > _SHOWN:
            shown += f"; ... ({len(problems)} in all)"
        raise ValueError(
            f"{path} does not hold torchvision's resnet18 ImageNet weights ({RESNET18_FILE}): "
            f"{shown}"
        )
    return new, skipped, adapted


def load_imagenet_weights(model: nn.Module, weights: str | Path | None = None) -> dict[str, Any]:
    """Load torchvision's ImageNet weights into ``model`` in place; return a report.

    ``model`` comes from ``build_model("resnet18", ..., pretrained=True)``. The
    file is ``weights`` when given (a missing one raises
    :class:`PretrainedWeightsError` naming it), else
    :func:`pretrained_weights_path`'s, downloaded there when absent (a failed
    download raises :class:`PretrainedWeightsError` saying where to place it).
    It is read with ``torch.load(weights_only=True, map_location="cpu")``.

    Skipped: the head ``fc.*`` (new, C classes) and ``conv1.weight`` of the
    small-image stem (3x3, trained from scratch); a grey model's 7x7 ``conv1``
    gets the RGB filter summed over its input channels. BatchNorm's
    ``num_batches_tracked`` counters, absent from torchvision's file, stay 0.
    Any other missing, extra or misshapen key means a wrong file: a
    :class:`ValueError` naming the first few, and nothing is written.

    Returns ``{"path", "sha256", "official", "loaded", "skipped", "adapted"}``:
    the file, its sha256, whether that is torchvision's file (sha256 starts with
    ``f37072fd``), the number of tensors loaded, and the keys skipped and adapted.
    """
    if not isinstance(model, ImageNetResNet18):
        raise ValueError(
            "load_imagenet_weights needs a model built with "
            "build_model('resnet18', image_shape, num_classes, pretrained=True)"
        )
    path = _locate(weights)
    source = _read(path)
    target = model.state_dict()
    new, skipped, adapted = _match_weights(
        source, target, small_stem=not model.imagenet_stem, path=path
    )
    with torch.no_grad():
        for key, src in new.items():
            target[key].copy_(src)
    sha = _sha256(path)
    official = sha.startswith(_SHA256_PREFIX)
    if not official:
        log.warning(
            "%s is not torchvision's %s (sha256 %s...); loaded anyway", path, RESNET18_FILE, sha[:8]
        )
    return {
        "path": str(path),
        "sha256": sha,
        "official": official,
        "loaded": len(new),
        "skipped": skipped,
        "adapted": adapted,
    }
