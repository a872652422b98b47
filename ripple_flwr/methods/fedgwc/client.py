"""FedGWC's client rule: plain local SGD that reports each step's batch loss.

The authors' client (``davedleo/FedGWC``, ``agents/clients.py``) returns the loss of every
local step, the received model's on the first batch included; the server turns them into
its Gaussian rewards. Here the reply carries the first ``fedgwc-steps`` of them; a client
that took fewer steps (a small one under quantity skew) repeats its last loss, so every
reply has the checked length.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from torch import nn

from ripple_flwr.methods.fedgwc.spec import FEDGWC_STEPS, LOSS_VALUES, STEP_LOSSES
from ripple_flwr.settings import RunSettings
from ripple_flwr.training.rules import ClientRule


def fixed_length(losses: np.ndarray, steps: int) -> np.ndarray:
    """The first ``steps`` losses, the last one repeated if there were fewer."""
    losses = np.asarray(losses, dtype=np.float64).reshape(-1)
    if not len(losses):
        raise ValueError("local training took no step")
    if len(losses) >= steps:
        return losses[:steps].copy()
    return np.concatenate([losses, np.full(steps - len(losses), losses[-1])])


class FedGWCRule(ClientRule):
    """Plain SGD; the reply's ``step-losses`` record holds the steps' batch losses."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.losses = np.zeros(0)

    def observe(self, stats: Mapping[str, Any]) -> None:
        self.losses = np.asarray(stats["step_losses"], dtype=np.float64)

    def finish(self, model: nn.Module, steps: int) -> dict[str, dict[str, np.ndarray]]:
        return {STEP_LOSSES: {LOSS_VALUES: fixed_length(self.losses, self.steps)}}


def rule(settings: RunSettings) -> ClientRule:
    """The clients' rule of a FedGWC run."""
    return FedGWCRule(FEDGWC_STEPS.of(settings))
