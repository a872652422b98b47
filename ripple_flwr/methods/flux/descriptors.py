"""A descriptor round: each node is sent a model and answers with statistics of its data under it.

Like the one-shot query round (:mod:`~ripple_flwr.app.server.roster.query`),
every reply is read and checked in one place, :func:`read_descriptor_reply`,
before anything uses it: the bytes must fit the promised length, the shape
must be the layout's, every value finite, standard deviations non-negative,
presence flags 0 or 1, and the means and deviations no larger than the
client's own largest activation allows (``|x . v| <= sqrt(d) max |x|`` for a
unit vector ``v``). A node that errors, times out or sends anything else is
left out with its reason. The bytes of both directions are counted from the
messages, as every round's are.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np
from flwr.app import ArrayRecord, Message, RecordDict
from flwr.serverapp import Grid

from ripple_flwr.aggregation.descriptors import Layout
from ripple_flwr.app.protocol.messages import METHOD_QUERY, method_query_config
from ripple_flwr.app.server.replies.fields import REPLY_ERRORS, as_number
from ripple_flwr.app.server.roster.query import validate_summary
from ripple_flwr.app.server.rounds.grid import send_and_receive
from ripple_flwr.methods.flux.spec import LABELLED, LATENT_DIM
from ripple_flwr.runs.results import message_nbytes

log = logging.getLogger("flwr.ripple")

DESCRIBE_TYPE = METHOD_QUERY  # FLUX's descriptor round: the app's generic side query
MAX_ACTIVATION = 1e6  # a largest latent activation beyond this is no honest model's
ROUNDING = 1e-3  # relative slack of the bounds for float32 statistics


@dataclass
class DescriptorRound:
    """The checked statistics by position in the nodes asked, and what the round cost."""

    stats: dict[int, np.ndarray] = field(default_factory=dict)
    rejected: dict[int, str] = field(default_factory=dict)
    bytes_down: int = 0
    bytes_up: int = 0
    replies: int = 0  # replies read, usable or not (bytes_up is theirs)
    seconds: float = 0.0

    def record(self) -> dict:
        return {
            "answered": len(self.stats),
            "rejected": {str(k): v for k, v in self.rejected.items()},
            "bytes_down": self.bytes_down,
            "bytes_up": self.bytes_up,
            "replies": self.replies,
            "seconds": self.seconds,
        }


def read_descriptor_reply(msg: Message, layout: Layout, latent_dim: int) -> np.ndarray:
    """The statistics of one reply as float64, or one of ``REPLY_ERRORS`` saying why not."""
    if msg.has_error():
        raise ValueError(f"client error: {msg.error.reason}")
    flat = validate_summary(msg.content, "descriptor", layout.size).astype(np.float64)
    s = layout.split(flat)
    top = as_number(float(s["max"][0]), "max-latent", low=0.0, high=MAX_ACTIVATION)
    bound = math.sqrt(latent_dim) * top * (1 + ROUNDING) + ROUNDING
    means = [s["mean"]] + ([s["class_mean"]] if layout.labelled else [])
    stds = [s["std"]] + ([s["class_std"]] if layout.labelled else [])
    if layout.labelled:
        present = s["present"]
        if not np.all((present == 0) | (present == 1)):
            raise ValueError("class presence flags must be 0 or 1")
        means[1], stds[1] = means[1][present == 1], stds[1][present == 1]
    if any(np.any(v < 0) for v in stds):
        raise ValueError("a standard deviation is negative")
    if any(np.any(np.abs(v) > bound) for v in means + stds):
        raise ValueError(
            f"statistics exceed sqrt(d) x max-latent = {bound:.4g}, which no data can give"
        )
    return flat


def descriptor_round(
    grid: Grid,
    node_ids: list[int],
    model: ArrayRecord,
    layout: Layout,
    latent_dim: int,
    timeout: float,
) -> DescriptorRound:
    """Send ``model`` to every node of ``node_ids``; their checked statistics by position."""
    t0 = time.perf_counter()
    config = method_query_config({LABELLED: layout.labelled, LATENT_DIM: layout.k})
    messages = [
        Message(
            RecordDict({"arrays": model, "config": config}),
            dst_node_id=int(nid),
            message_type=DESCRIBE_TYPE,
        )
        for nid in node_ids
    ]
    replies = send_and_receive(grid, messages, timeout)
    out = DescriptorRound(bytes_down=sum(message_nbytes(m) for m in messages))
    asked = {str(m.metadata.message_id): i for i, m in enumerate(messages)}
    for msg in replies:
        i = asked.get(str(msg.metadata.reply_to_message_id))
        if i is None or i in out.stats or i in out.rejected:
            log.warning("ignoring a descriptor reply that answers no question of this round")
            continue
        out.bytes_up += message_nbytes(msg)
        out.replies += 1
        try:
            out.stats[i] = read_descriptor_reply(msg, layout, latent_dim)
        except REPLY_ERRORS as err:
            out.rejected[i] = f"invalid descriptor: {' '.join(str(err).split())}"
    for i in range(len(node_ids)):
        if i not in out.stats and i not in out.rejected:
            out.rejected[i] = f"no descriptor within {timeout:g} s"
    for i, reason in sorted(out.rejected.items()):
        log.warning("node %d sent no usable descriptor: %s", int(node_ids[i]), reason)
    out.seconds = time.perf_counter() - t0
    return out
