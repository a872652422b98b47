"""A resumed run's roster: the saved clients matched to the nodes that connect now.

A benchmark node keeps its partition; an own-data node is matched by its name
(:func:`by_name`), so one silo's saved state never goes to another.
"""

from __future__ import annotations

from typing import Any

from ripple_flwr.methods.api import QueryResult
from ripple_flwr.settings import ConfigError


def by_name(
    saved: dict[str, Any], fresh: QueryResult, new: QueryResult
) -> tuple[dict[int, int], set[int]]:
    """Own-data nodes of a resumed run, matched to the saved run's by name.

    Returns the saved partition -> the node id now, and the saved partitions of the
    held-out nodes found now. A node slot follows the sorted names, so a name that
    is missing or new (or a node without one) would hand one silo's saved state to
    another: the run is refused, naming them.
    """
    had: dict[str, int] = {}
    for group in (saved["clients"], saved["new_clients"]):
        names = list(group.get("names") or [])
        names += [""] * (len(group["partition_ids"]) - len(names))
        for pid, name in zip(group["partition_ids"], names, strict=True):
            had[str(name)] = int(pid)
    now: dict[str, int] = {}
    for q in (fresh, new):
        names = list(q.names) + [""] * (len(q) - len(q.names))
        now.update({str(name): int(nid) for name, nid in zip(names, q.node_ids, strict=True)})
    fix = (
        "resume matches the nodes of an own-data run by name: start each SuperNode of the "
        "interrupted run with its own name (--node-config \"data='<path>' name='<silo>'\"), "
        'or start the run afresh (resume="fresh", overwrite-results=true)'
    )
    if "" in had or "" in now:
        raise ConfigError(f"cannot resume: a node has no name; {fix}")
    missing, added = sorted(set(had) - set(now)), sorted(set(now) - set(had))
    if missing or added:
        raise ConfigError(
            "cannot resume: the named nodes changed since the checkpoint (missing: "
            f"{', '.join(missing) or 'none'}; new: {', '.join(added) or 'none'}); {fix}"
        )
    held = set(new.names)
    return {had[name]: nid for name, nid in now.items()}, {had[n] for n in held}


def saved_result(saved: dict[str, Any], node_of: dict[int, int]) -> QueryResult:
    """A saved :class:`QueryResult`, with the node ids of ``node_of`` (partition -> node)."""
    q = QueryResult(**saved)
    q.node_ids = [node_of.get(p, n) for p, n in zip(q.partition_ids, q.node_ids, strict=True)]
    q.rejected = {int(k): v for k, v in q.rejected.items()}
    return q
