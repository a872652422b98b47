"""FedProx's client rule: the proximal term mu/2 ||w - w_global||^2, mu from the message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from ripple_flwr.settings import RunSettings
from ripple_flwr.training.rules import ClientRule, Penalty, PenaltyRule, proximal_penalty


def fedprox_rule(model: nn.Module, config: Mapping[str, Any]) -> Penalty | None:
    """FedProx: the proximal term, with the ``proximal-mu`` the server's FedProx sent."""
    if "proximal-mu" not in config:
        raise ValueError(
            "FedProx training message carries no 'proximal-mu': the server's strategy did not "
            "run Flower's FedProx.configure_train"
        )
    return proximal_penalty(model, float(config["proximal-mu"]))


def rule(settings: RunSettings) -> ClientRule:
    """The clients' rule of a FedProx run (mu arrives in every training message)."""
    return PenaltyRule(fedprox_rule)
