"""SCAFFOLD (Karimireddy et al., 2020, https://arxiv.org/abs/1910.06378).

The server keeps the control variate c and sends it with the model (a second
ArrayRecord, ``control``); each client keeps its own c_i in Flower's
``context.state``, corrects every SGD step by (c - c_i), updates c_i with
option II and returns the model and the control delta (two records up).
The server moves x by eta_s times the mean model delta and c by |S|/N times
the mean control delta (N: all clients). Twice FedAvg's bytes each way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord

from ripple_flwr.aggregation.robust import update_norm
from ripple_flwr.app.protocol.records import state_to_record
from ripple_flwr.app.server.bases.global_model import GlobalModel
from ripple_flwr.app.server.replies.validation import Accepted, state_reference
from ripple_flwr.settings import RunSettings

# Float32 rounding on the client: an honest control meets the bound to about 1e-6.
CONTROL_SLACK = 1.001


class ScaffoldMethod(GlobalModel):
    """SCAFFOLD: server control c, client controls c_i (``scaffold`` client rule)."""

    state_fields = ("control",)  # the server's c, saved for a resumed run

    def __init__(self, settings: RunSettings, initial_state: dict[str, np.ndarray]) -> None:
        super().__init__(settings, initial_state)
        self.control = self.zeros_like_floats()
        # Every reply must carry its control delta, shaped like c, finite.
        self.extra_reply_references = {"control": state_reference(self.control)}

    def check_reply(self, a: Accepted) -> str | None:
        """A control delta must be one option II can produce from the reply's own update.

        Option II gives c_i+ - c_i = -c + (x - y_i) / (K_eff lr) with K_eff >= 1, so
        ||delta_c + c|| <= ||x - y_i|| / lr for every honest client (buffers: 0 on
        both sides of c). A larger control would move c, and every later round's
        correction, by more than the client's own training can justify.
        """
        c = self.control
        pushed = sum(
            float(np.sum((a.extras["control"][k].astype(np.float64) + c[k]) ** 2)) for k in c
        )
        moved = update_norm(self.global_state, a.state)
        bound = moved / self.settings.training.lr
        if np.sqrt(pushed) > CONTROL_SLACK * bound + 1e-6:
            return (
                f"control delta moves c by {np.sqrt(pushed):.4g}, more than its own update "
                f"{moved:.4g} / lr = {bound:.4g} can (SCAFFOLD option II)"
            )
        return None

    def extra_train_records(self, rows: np.ndarray) -> list[dict[str, ArrayRecord | ConfigRecord]]:
        control = state_to_record(self.control)
        extras = super().extra_train_records(rows)
        return [{"control": control, **e} for e in extras]

    def update(self, accepted: list[Accepted]) -> dict[str, np.ndarray]:
        eta = self.settings.training.server_lr
        total_clients = len(self.run.clients)
        new = self.non_float_from(accepted)
        for k in self.float_keys:
            x = self.global_state[k].astype(np.float64)
            new[k] = x + eta * (stacked_mean_delta(accepted, k, x))
            delta_c = np.stack([a.extras["control"][k].astype(np.float64) for a in accepted])
            c = self.control[k].astype(np.float64) + delta_c.sum(axis=0) / total_clients
            self.control[k] = c.astype(self.control[k].dtype)
        return new

    def run_record(self, rec: dict[str, Any]) -> dict[str, Any]:
        rec = super().run_record(rec)
        rec["scaffold"] = {
            "control_norm": float(np.sqrt(sum(float((v**2).sum()) for v in self.control.values())))
        }
        return rec


def stacked_mean_delta(accepted: list[Accepted], key: str, x: np.ndarray) -> np.ndarray:
    """Mean over the replies of (y_k - x) for one tensor."""
    return np.mean([np.asarray(a.state[key], dtype=np.float64) - x for a in accepted], axis=0)


# What the registry builds for this folder's entries (ripple_flwr.methods.spec.MethodSpec.make).
METHOD = ScaffoldMethod
