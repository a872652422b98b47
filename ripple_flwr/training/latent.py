"""A model's latent features: the input of its first fully connected layer (FLUX's descriptor).

FLUX (Fenoglio et al., 2025) describes a client by its data's representation
in the current model: LeNet-5's flattened convolutional features, the input
of ``fc1``. Here that is the input of the model's first ``nn.Linear``: the
paper CNN's flattened features, ResNet-9's and ResNet-18's pooled features.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def first_linear(model: nn.Module) -> nn.Linear:
    """The model's first fully connected layer (in module order)."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            return module
    raise ValueError(f"{type(model).__name__} has no fully connected layer to read features at")


@torch.no_grad()
def latent_features(
    model: nn.Module, x: np.ndarray, *, batch_size: int = 256, device: str = "cpu"
) -> np.ndarray:
    """``(n, d)`` float64 inputs of the first linear layer for images ``x``, in eval mode.

    The model is restored to its previous train/eval mode afterwards.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    dev = torch.device(device)
    model.to(dev)
    captured: list[torch.Tensor] = []

    def keep(_module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        captured.append(torch.flatten(inputs[0], 1).detach().to("cpu", torch.float64))

    handle = first_linear(model).register_forward_pre_hook(keep)
    was_training = model.training
    model.eval()
    try:
        xs = np.asarray(x, dtype=np.float32)
        for start in range(0, len(xs), batch_size):
            model(torch.as_tensor(xs[start : start + batch_size], device=dev))
    finally:
        handle.remove()
        model.train(was_training)
    if not captured:
        raise ValueError("no images to compute latent features of")
    return torch.cat(captured).numpy()
