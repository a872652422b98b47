"""Every client rule a method may name in its registry entry (``client_rule``), by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ripple_flwr.training.personal import (
    PERFEDAVG_ALPHA,
    PERFEDAVG_BETA,
    PFEDME_INNER_STEPS,
    PFEDME_LAMBDA,
    PFEDME_MU,
    PFEDME_PERSONAL_LR,
    PerFedAvgRule,
    PFedMeRule,
)
from ripple_flwr.training.rules import ClientRule, PenaltyRule, fedprox_rule, sgd_rule
from ripple_flwr.training.stateful import (
    FEDDYN_ALPHA,
    FEDDYN_GRAD_CLIP,
    SCAFFOLD_GRAD_CLIP,
    FedDynRule,
    ScaffoldRule,
)

if TYPE_CHECKING:
    from ripple_flwr.settings import RunSettings

RuleFactory = Callable[["RunSettings"], ClientRule]

CLIENT_RULES: dict[str, RuleFactory] = {
    "sgd": lambda s: PenaltyRule(sgd_rule),
    "fedprox": lambda s: PenaltyRule(fedprox_rule),
    "scaffold": lambda s: ScaffoldRule(SCAFFOLD_GRAD_CLIP.of(s)),
    "feddyn": lambda s: FedDynRule(FEDDYN_ALPHA.of(s), FEDDYN_GRAD_CLIP.of(s)),
    "perfedavg": lambda s: PerFedAvgRule(PERFEDAVG_ALPHA.of(s), PERFEDAVG_BETA.of(s)),
    "pfedme": lambda s: PFedMeRule(
        PFEDME_LAMBDA.of(s), PFEDME_INNER_STEPS.of(s), PFEDME_PERSONAL_LR.of(s), PFEDME_MU.of(s)
    ),
}
"""Every client rule a method may name in its registry entry (``client_rule``)."""
