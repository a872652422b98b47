"""The one module that touches Flower's internals (anything outside its public API).

Flower's public API is ``flwr.app``, ``flwr.serverapp`` (with ``flwr.serverapp.strategy``),
``flwr.clientapp`` and the names ``flwr.common`` exports. What Ripple needs beyond it is
reached here and only here, so a Flower upgrade that moves an internal breaks one file:

- :data:`ErrorCode` (``flwr.common.constant``): the code of a node's error reply;
- the task identity (``flwr.supercore.task_identity``) that Flower's runtime sets before a
  ``Message`` can be built; a one-process federation and the tests set it themselves;
- the simulation's in-memory grid (``flwr.superlink.grid.inmemory_grid``), whose
  SuperNodes all register when the run starts (:func:`nodes_fixed_at_start`).
"""

from __future__ import annotations

from flwr.common.constant import ErrorCode

__all__ = ["ErrorCode", "ensure_task_identity", "nodes_fixed_at_start", "set_task_identity"]


def nodes_fixed_at_start(grid: object) -> bool:
    """Whether ``grid`` is Flower's simulation, where every SuperNode (``num-supernodes``)
    registers as the run starts and none joins later: the node count that settles is final."""
    try:
        from flwr.superlink.grid.inmemory_grid import InMemoryGrid
    except ImportError:  # pragma: no cover - a Flower that moved it: wait as in deployment
        return False
    return isinstance(grid, InMemoryGrid)


def ensure_task_identity() -> None:
    """Messages need a run/node/task identity that Flower's runtime would set; set one."""
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        if getattr(TaskIdentity, name) is None:
            setattr(TaskIdentity, name, value)


def set_task_identity(run_id: int = 1, node_id: int = 0, task_id: int = 1) -> None:
    """Set the run/node/task identity outright (the tests' server side)."""
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id = run_id
    TaskIdentity.node_id = node_id
    TaskIdentity.task_id = task_id
