"""Several candidate models in one message; the client keeps the one with the lowest training loss.

IFCA's clients receive all K cluster models each round and train the one
that fits their own data best; the clustered baselines' new clients (and
the best-by-loss reference) choose their cluster model the same way. The
choice is made on the client's **training split** only: its test split,
which the reported accuracy comes from, never takes part.

The wire layout is :mod:`ripple_flwr.app.protocol.candidates`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ripple_flwr.training.loops import evaluate_states
from ripple_flwr.training.models import set_state


def lowest_loss(
    model: torch.nn.Module,
    states: Sequence[dict[str, np.ndarray]],
    x: np.ndarray,
    y: np.ndarray,
    device: str = "cpu",
) -> tuple[int, list[float]]:
    """Index of the state with the lowest mean cross-entropy on (x, y), and every loss.

    ``model`` is left holding the chosen state. Ties go to the lowest index.
    """
    if not len(states):
        raise ValueError("no candidate model to choose from")
    losses = [float(r["loss"]) for r in evaluate_states(model, states, x, y, device=device)]
    best = int(np.argmin(losses))
    if best != len(states) - 1:
        set_state(model, states[best])
    return best, losses
