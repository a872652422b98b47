"""Model zoo for the benchmarks, and numpy views of model states.

The server keeps K cluster models as numpy arrays (see ``mixing``), so every
model here must round-trip through :func:`get_state` / :func:`set_state`,
buffers included. Every model is built from the explicit input size (no lazy
layers), so its state has a fixed layout before any forward pass, and
construction only draws from torch's global RNG, so ``torch.manual_seed``
makes it reproducible.

Each built model carries three plain attributes, ``input_shape`` ``(C, H, W)``
and ``num_classes``, that ``local`` uses to reject mismatched data early, and
``pretrained``.

``pretrained=True`` (ResNet-18 only) builds the architecture torchvision's
ImageNet weights fit (:mod:`ripple_flwr.training.pretrained`: torchvision's stem
for sides >= 64, ImageNet input normalisation in non-persistent buffers, head
``fc = Linear(512, C)``), still randomly initialised: clients build it as a
skeleton and receive the weights; the server loads them with
:func:`~ripple_flwr.training.pretrained.load_imagenet_weights`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["available_models", "build_model", "get_state", "set_state"]

# Smallest side each model accepts: the CNN needs a 2x2 map before its pool,
# ResNet-9 halves the image three times, ResNet-18 (small-image layout) three
# times as well.
_MIN_SIDE = {"cnn": 6, "resnet9": 8, "resnet18": 8}
# The Myrtle ResNet-9 multiplies its logits by 1/8: its max-pooled features are large
# (sums over residual branches), and unscaled logits make the first SGD steps diverge.
_RESNET9_LOGIT_SCALE = 0.125
# Up to this side ResNet-18 uses the CIFAR stem (3x3 stride 1, no max-pool).
_RESNET18_SMALL_SIDE = 64


class PaperCNN(nn.Module):
    """The paper's CNN: two 3x3 convs, a max-pool, dropout, two linear layers."""

    def __init__(self, image_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        c, h, w = image_shape
        flat = 32 * ((h - 4) // 2) * ((w - 4) // 2)
        self.features = nn.Sequential(
            nn.Conv2d(c, 16, 3),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Dropout(0.25),
            nn.Flatten(),
        )
        self.classifier = nn.Sequential(nn.Linear(flat, 64), nn.ReLU(), nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``classifier(features(x))``, computed in a faster order that gives the same values.

        ReLU and max-pool commute exactly (both are monotone), so the ReLU after
        the second conv runs on the pooled map, 4x smaller; its gradients are
        the same too (a window's gradient reaches its maximum iff that is
        positive), and trained weights are bit-identical to the plain order.
        In eval mode both convs run channels-last (input and weights), which
        oneDNN computes faster on CPU for inference (``benchmarks/ifca_eval.py``;
        the values agree to float rounding); dropout is the identity there.
        Training keeps the default layout: channels-last gained nothing in the
        backward pass, and the default leaves dropout's draws unchanged.
        """
        conv1, relu1, conv2, _, pool, dropout, flatten = self.features
        if self.training:
            h = conv2(relu1(conv1(x)))
        else:
            h = relu1(_conv_channels_last(conv1, x))
            h = _conv_channels_last(conv2, h.contiguous(memory_format=torch.channels_last))
        return self.classifier(flatten(dropout(torch.relu(pool(h)))))


def _conv_channels_last(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """``conv(x)`` with its weight in channels-last layout (a copy of a few kilobytes)."""
    weight = conv.weight.contiguous(memory_format=torch.channels_last)
    return F.conv2d(x, weight, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups)


def _group_norm(channels: int, max_groups: int = 32) -> nn.GroupNorm:
    """GroupNorm with the largest group count <= max_groups that divides ``channels``."""
    return nn.GroupNorm(math.gcd(max_groups, channels), channels)


def _conv_gn(c_in: int, c_out: int, pool: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
        _group_norm(c_out),
        nn.ReLU(inplace=True),
    ]
    if pool:
        layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers)


class _Residual(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(_conv_gn(channels, channels), _conv_gn(channels, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class ResNet9(nn.Module):
    """DAWNBench/Myrtle ResNet-9 with GroupNorm.

    GroupNorm instead of BatchNorm because batch statistics of small, non-IID
    client batches are meaningless to average across clients, and GroupNorm
    has no running buffers to mix.
    """

    def __init__(self, in_channels: int, num_classes: int) -> None:
        super().__init__()
        self.prep = _conv_gn(in_channels, 64)
        self.layer1 = nn.Sequential(_conv_gn(64, 128, pool=True), _Residual(128))
        self.layer2 = _conv_gn(128, 256, pool=True)
        self.layer3 = nn.Sequential(_conv_gn(256, 512, pool=True), _Residual(512))
        self.pool = nn.AdaptiveMaxPool2d(1)
        self.fc = nn.Linear(512, num_classes, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer3(self.layer2(self.layer1(self.prep(x))))
        return self.fc(torch.flatten(self.pool(x), 1)) * _RESNET9_LOGIT_SCALE


def _build_cnn(image_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    return PaperCNN(image_shape, num_classes)


def _build_resnet9(image_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    return ResNet9(image_shape[0], num_classes)


def _build_resnet18(image_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    from torchvision.models import resnet18

    c, h, w = image_shape
    model = resnet18(weights=None, num_classes=num_classes)  # never downloads
    if min(h, w) <= _RESNET18_SMALL_SIDE:
        # CIFAR stem: a 7x7 stride-2 conv plus max-pool would shrink 32x32 to 8x8 at once.
        model.conv1 = nn.Conv2d(c, 64, 3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    elif c != 3:
        model.conv1 = nn.Conv2d(c, 64, 7, stride=2, padding=3, bias=False)
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    return model


_BUILDERS: dict[str, Callable[[tuple[int, int, int], int], nn.Module]] = {
    "cnn": _build_cnn,
    "resnet9": _build_resnet9,
    "resnet18": _build_resnet18,
}


def available_models() -> tuple[str, ...]:
    """Names :func:`build_model` accepts, for CLI choices and error messages."""
    return tuple(_BUILDERS)


def build_model(
    name: str,
    image_shape: tuple[int, int, int],
    num_classes: int,
    *,
    pretrained: bool = False,
) -> nn.Module:
    """Build model ``name`` for ``(C, H, W)`` images and ``num_classes`` classes.

    Deterministic under ``torch.manual_seed``, so the server can build K
    identically initialised cluster models from one seed.

    ``pretrained``: the architecture of torchvision's ImageNet ResNet-18
    (``resnet18`` only; 1 or 3 channels), randomly initialised: this never
    reads a file or the network. Images with both sides >= 64 keep
    torchvision's stem; smaller ones the small-image stem (whose ``conv1`` is
    then trained from scratch). See :mod:`ripple_flwr.training.pretrained`.
    """
    if name not in _BUILDERS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(available_models())}")
    if pretrained and name != "resnet18":
        raise ValueError(f"pretrained weights exist for resnet18 only, not model {name!r}")
    if len(image_shape) != 3 or any(int(s) != s or s < 1 for s in image_shape):
        raise ValueError(f"image_shape must be three positive ints (C, H, W), got {image_shape}")
    shape = (int(image_shape[0]), int(image_shape[1]), int(image_shape[2]))
    if int(num_classes) != num_classes or num_classes < 1:
        raise ValueError(f"num_classes must be a positive int, got {num_classes}")
    min_side = _MIN_SIDE[name]
    if min(shape[1:]) < min_side:
        raise ValueError(
            f"model {name!r} needs images of at least {min_side}x{min_side}, "
            f"got {shape[1]}x{shape[2]}"
        )
    if pretrained:
        if shape[0] not in (1, 3):
            raise ValueError(
                f"pretrained resnet18 needs grey (1) or RGB (3) images, got {shape[0]} channels"
            )
        from ripple_flwr.training.pretrained import ImageNetResNet18

        model: nn.Module = ImageNetResNet18(shape, int(num_classes))
    else:
        model = _BUILDERS[name](shape, int(num_classes))
    model.input_shape = shape
    model.num_classes = int(num_classes)
    model.pretrained = bool(pretrained)
    return model


def get_state(model: nn.Module) -> dict[str, np.ndarray]:
    """The full ``state_dict`` (parameters and buffers) as numpy copies, in its order.

    Buffers are included because BatchNorm's running statistics are part of
    the model a client receives (non-persistent ones, such as the pretrained
    ResNet-18's input normalisation, are architecture and stay out); the
    arrays are copies, so later training does not change them.
    """
    return {k: v.detach().to("cpu", copy=True).numpy() for k, v in model.state_dict().items()}


def set_state(model: nn.Module, state: dict[str, np.ndarray]) -> None:
    """Load numpy arrays into ``model`` in place, after checking every key and shape.

    All mismatches are reported at once (a truncated or reordered payload
    usually breaks many keys), and nothing is written unless all match.
    """
    target = model.state_dict()
    missing = [k for k in target if k not in state]
    unexpected = [k for k in state if k not in target]
    wrong_shape = [
        f"{k}: expected {tuple(target[k].shape)}, got {tuple(np.shape(state[k]))}"
        for k in target
        if k in state and tuple(np.shape(state[k])) != tuple(target[k].shape)
    ]
    if missing or unexpected or wrong_shape:
        parts = []
        for label, items in (
            ("missing keys", missing),
            ("unexpected keys", unexpected),
            ("shape mismatches", wrong_shape),
        ):
            if items:
                shown = "; ".join(items[:10])
                if len(items) > 10:
                    shown += f"; ... ({len(items)} in all)"
                parts.append(f"{label}: {shown}")
        raise ValueError("state does not match the model: " + " | ".join(parts))
    with torch.no_grad():
        for k, dst in target.items():
            arr = np.asarray(state[k])
            if not arr.flags.writeable:
                arr = arr.copy()  # torch.from_numpy warns on read-only arrays
            dst.copy_(torch.from_numpy(arr))
