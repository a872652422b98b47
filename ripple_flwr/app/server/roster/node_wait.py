"""The bounded wait for nodes before a run: a fixed count, or the count that settles.

``num-partitions = 0`` takes the nodes that connect: the count must stay the same for
:data:`NODE_SETTLE_SECONDS` before the run takes it. Too few nodes in time is a
:class:`NotEnoughClientsError` naming the count and the fix.
"""

from __future__ import annotations

import logging
import time

from flwr.serverapp import Grid

log = logging.getLogger("flwr.ripple")


# num-partitions = 0: the node count must stay the same this long before the run takes it.
NODE_SETTLE_SECONDS = 3.0
MIN_CLIENTS = 1  # below this many usable training clients a run stops with an error
# Held-out settings a resumed run may change: with them changed, its new clients are others.


class NotEnoughClientsError(RuntimeError):
    """Too few usable clients to run the configured federation."""


def wait_for_nodes(
    grid: Grid,
    expected: int,
    timeout: float,
    poll: float = 1.0,
    hint_every: float = 10.0,
    allowed: int | None = None,
    local: bool = False,
    final_once_settled: bool = False,
    settle: float = NODE_SETTLE_SECONDS,
) -> list[int]:
    """Node ids once ``expected`` nodes are connected; a clear error after ``timeout`` s.

    ``allowed`` (default ``expected``) is how many nodes the run can use at
    most (training plus new clients); more than that gets a warning. ``local``:
    the nodes bring their own data (the hint says how to start one).
    ``final_once_settled`` (Flower's simulation, where every SuperNode registers as the run
    starts): a count that has not changed for ``settle`` s is final, and too few is the
    same error at once rather than after ``timeout``.
    """
    start = time.monotonic()
    last_hint = start
    allowed = expected if allowed is None else allowed
    count, since = -1, start
    while True:
        nodes = [int(n) for n in grid.get_node_ids()]
        if len(nodes) != count:
            count, since = len(nodes), time.monotonic()
        settled = final_once_settled and count > 0 and time.monotonic() - since >= settle
        if len(nodes) >= expected:
            if len(nodes) > allowed:
                log.warning(
                    "%d nodes connected but the run has %d partitions: nodes whose partition "
                    "is outside the run are left out",
                    len(nodes),
                    allowed,
                )
            return sorted(nodes)
        now = time.monotonic()
        if settled:
            raise NotEnoughClientsError(
                f"the simulation has {len(nodes)} SuperNodes but the run needs {expected} "
                f"(num-partitions + new-clients = {allowed}): flwr run . --federation-config "
                f"'num-supernodes={allowed}', or lower num-partitions (0 = the nodes there are)"
            )
        if now - start >= timeout and local:
            raise NotEnoughClientsError(
                f"only {len(nodes)} of the expected {expected} nodes connected within "
                f"node-wait-timeout={timeout:g} s; start at least {expected} SuperNodes with "
                "--node-config \"data='<path>' name='<silo>'\" (docs/own-data.md), or lower "
                "num-partitions."
            )
        if now - start >= timeout:
            raise NotEnoughClientsError(
                f"only {len(nodes)} of the expected {expected} nodes connected within "
                f"node-wait-timeout={timeout:g} s. In simulation, the number of SuperNodes "
                f"must equal num-partitions + new-clients: flwr run . --federation-config "
                f"'num-supernodes={allowed}' (or lower num-partitions); in deployment, "
                f"start at least {expected} SuperNodes with --node-config 'partition-id=<i> "
                f"num-partitions={allowed}'."
            )
        if now - last_hint >= hint_every:
            log.info("waiting for nodes: %d of %d connected", len(nodes), expected)
            last_hint = now
        time.sleep(min(poll, max(0.0, timeout - (now - start))))


def wait_for_settled_nodes(
    grid: Grid,
    timeout: float,
    settle: float = NODE_SETTLE_SECONDS,
    poll: float = 0.5,
    hint_every: float = 10.0,
) -> int:
    """How many nodes are connected once their number has not changed for ``settle`` s.

    For ``num-partitions = 0`` (the federation is the nodes that connect). Waits at
    most ``timeout`` s: by then the nodes connected so far are taken, and none at all
    is a :class:`NotEnoughClientsError`. Nodes that connect later are late joiners
    with a partition outside the run (left out, with a warning).
    """
    start = time.monotonic()
    last_hint = start
    count, since = -1, start
    settle = min(settle, timeout)
    while True:
        now = time.monotonic()
        n = len(list(grid.get_node_ids()))
        if n != count:
            count, since = n, now
        if n and now - since >= settle:
            return n
        if now - start >= timeout:
            if n:
                log.warning(
                    "num-partitions=0: the node count still changed after node-wait-timeout="
                    "%g s; the run takes the %d nodes connected now",
                    timeout,
                    n,
                )
                return n
            raise NotEnoughClientsError(
                f"num-partitions=0 takes the nodes that connect, but none connected within "
                f"node-wait-timeout={timeout:g} s; start SuperNodes (in simulation: "
                "flwr run . --federation-config 'num-supernodes=<n>')"
            )
        if now - last_hint >= hint_every:
            log.info("waiting for the node count to settle: %d connected", n)
            last_hint = now
        time.sleep(min(poll, max(0.0, timeout - (now - start))))
