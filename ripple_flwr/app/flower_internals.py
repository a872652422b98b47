"""The one module that touches Flower's internals (anything outside its public API).

Flower's public API is ``flwr.app``, ``flwr.serverapp`` (with ``flwr.serverapp.strategy``),
``flwr.clientapp`` and the names ``flwr.common`` exports. What Ripple needs beyond it is
reached here and only here, so a Flower upgrade that moves an internal breaks one file:

- :data:`ErrorCode` (``flwr.common.constant``): the code of a node's error reply;
- the task identity (``flwr.supercore.task_identity``) that Flower's runtime sets before a
  ``Message`` can be built; a one-process federation and the tests set it themselves.
"""

from __future__ import annotations

from flwr.common.constant import ErrorCode

__all__ = ["ErrorCode", "ensure_task_identity", "set_task_identity"]


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
