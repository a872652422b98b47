"""Grid helpers of the app: quick polling, and a view that lets Flower's strategies sample.

Flower's own ``Grid.send_and_receive`` sleeps 3 s between pulls, which would
dominate short rounds; :class:`PollingGrid` polls every 0.1 s instead. A message
the server stops waiting for expires soon after (its TTL, Flower's default
12 h, is cut to the wait plus :data:`TTL_MARGIN`): a late node then finds no
stale work, and Flower's simulation does not keep running a timed-out round's
messages ahead of the next round's.
Flower's strategies pick their training nodes themselves from
``grid.get_node_ids()`` with the unseeded global ``random``; handing them a
:class:`SampledGrid` that shows only the nodes the run's seeded sampler chose
lets ``configure_train`` run exactly as Flower wrote it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence

from flwr.app import Message
from flwr.serverapp import Grid

TTL_MARGIN = 60.0  # seconds a message outlives the server's wait (clock skew, the last pull)


def expire_after(messages: Sequence[Message], timeout: float) -> None:
    """Cut each message's TTL to ``timeout`` (+ the margin) from now; never lengthen it."""
    if not math.isfinite(timeout):
        return
    now = time.time()
    for msg in messages:
        meta = msg.metadata
        meta.ttl = min(meta.ttl, (now - meta.created_at) + timeout + TTL_MARGIN)


def send_and_receive(
    grid: Grid, messages: Sequence[Message], timeout: float, poll: float = 0.1
) -> list[Message]:
    """Push, then pull replies until all arrived or ``timeout`` passed."""
    messages = list(messages)
    if not messages:
        return []
    expire_after(messages, timeout)
    pending = {mid for mid in grid.push_messages(messages) if mid}
    replies: list[Message] = []
    end = time.monotonic() + timeout
    while pending:
        got = list(grid.pull_messages(list(pending)))
        replies.extend(got)
        pending.difference_update(m.metadata.reply_to_message_id for m in got)
        if not pending or time.monotonic() >= end:
            break
        time.sleep(poll)
    return replies


class _ForwardingGrid(Grid):
    """Forwards every call to ``inner``."""

    def __init__(self, inner: Grid) -> None:
        self.inner = inner

    def set_run(self, run) -> None:  # pragma: no cover - the runtime sets it on the inner grid
        self.inner.set_run(run)

    @property
    def run(self):  # pragma: no cover
        return self.inner.run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return self.inner.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self.inner.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.inner.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.inner.pull_messages(message_ids)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        return self.inner.send_and_receive(messages, timeout=timeout)


class PollingGrid(_ForwardingGrid):
    """A grid that forwards everything to ``inner`` but polls replies quickly."""

    def __init__(self, inner: Grid, poll: float = 0.1) -> None:
        super().__init__(inner)
        self.poll = poll

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        return send_and_receive(
            self.inner, list(messages), math.inf if timeout is None else timeout, self.poll
        )


class SampledGrid(_ForwardingGrid):
    """The grid as a Flower strategy should see it this round: only the sampled nodes."""

    def __init__(self, inner: Grid, node_ids: Sequence[int]) -> None:
        super().__init__(inner)
        self.node_ids = [int(n) for n in node_ids]

    def get_node_ids(self) -> Iterable[int]:
        return list(self.node_ids)
