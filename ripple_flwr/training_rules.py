"""Client-side training rules: what a method adds to the local loss (plain torch, no Flower).

A rule reads the training message's config (what the server's strategy
sent) and returns a penalty to add to each batch's loss, or ``None`` for
plain SGD. Which rule a method needs is part of its registry entry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

Penalty = Callable[[], torch.Tensor]
Rule = Callable[[nn.Module, Mapping[str, Any]], Penalty | None]


def proximal_penalty(model: nn.Module, mu: float) -> Penalty:
    """FedProx's mu/2 * ||w - w_global||^2 against a detached copy of the received weights.

    Call it right after loading the received (global) weights: the anchor is
    taken then, and only trainable parameters (not buffers) are pulled back.
    """
    if not mu >= 0:
        raise ValueError(f"proximal-mu must be >= 0, got {mu}")
    params = [p for p in model.parameters() if p.requires_grad]
    anchor = [p.detach().clone() for p in params]

    def penalty() -> torch.Tensor:
        total = sum(((p - a) ** 2).sum() for p, a in zip(params, anchor, strict=True))
        return 0.5 * mu * total

    return penalty


def sgd_rule(model: nn.Module, config: Mapping[str, Any]) -> Penalty | None:
    """Plain local SGD: nothing added to the loss."""
    return None


def fedprox_rule(model: nn.Module, config: Mapping[str, Any]) -> Penalty | None:
    """FedProx: the proximal term, with the ``proximal-mu`` the server's FedProx sent."""
    if "proximal-mu" not in config:
        raise ValueError(
            "FedProx training message carries no 'proximal-mu': the server's strategy did not "
            "run Flower's FedProx.configure_train"
        )
    return proximal_penalty(model, float(config["proximal-mu"]))


TRAINING_RULES: dict[str, Rule] = {"sgd": sgd_rule, "fedprox": fedprox_rule}
