"""Partition claims bound to SuperNodes by the server: ``$RIPPLE_PARTITION_MAP``.

In a benchmark deployment each SuperNode says which partition it holds
(``--node-config "partition-id=N"``); without more, a node may claim any
partition, and two nodes claiming one are both left out. With SuperNode
authentication on (``--enable-supernode-auth``), each node id belongs to one
registered public key (``flwr supernode register`` prints it), so the server
can bind ids to partitions: ``RIPPLE_PARTITION_MAP`` names a JSON file
``{"<node id>": <partition id>, ...}`` on the SuperLink's machine (never in the
run config: whoever submits a run must not choose it). A node whose claim
differs from its binding, or that the file does not list, is then refused and
named in every query round (the first one and late joiners').
"""

from __future__ import annotations

import json

from ripple_flwr.settings import PARTITION_MAP_ENV, ConfigError, Environment


def load_partition_map(num_partitions: int) -> dict[int, int] | None:
    """The server's node id -> partition binding (``None``: not set), checked in one line."""
    path = Environment.read().partition_map
    if path is None:
        return None
    raw = str(path)
    fix = f'write a JSON object {{"<node id>": <partition id>}} and point {PARTITION_MAP_ENV} at it'
    try:
        body = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"{PARTITION_MAP_ENV}={raw}: cannot read it ({err}); {fix}") from err
    if not isinstance(body, dict) or not body:
        raise ConfigError(f"{PARTITION_MAP_ENV}={raw} is not a non-empty JSON object; {fix}")
    bound: dict[int, int] = {}
    for key, value in body.items():
        ok_key = isinstance(key, str) and key.isdigit() and int(key) < 2**64
        ok_value = type(value) is int and 0 <= value < num_partitions
        if not (ok_key and ok_value):
            raise ConfigError(
                f"{PARTITION_MAP_ENV}={raw}: entry {key!r}: {value!r} is not a node id (a "
                f"decimal uint64) bound to a partition in [0, {num_partitions - 1}]; {fix}"
            )
        bound[int(key)] = value
    taken: dict[int, int] = {}
    for nid, pid in bound.items():
        if pid in taken:
            raise ConfigError(
                f"{PARTITION_MAP_ENV}={raw} binds partition {pid} to nodes {taken[pid]} and "
                f"{nid}; bind each partition to one node"
            )
        taken[pid] = nid
    return bound


def binding_refusal(bound: dict[int, int] | None, node_id: int, claim: int) -> str | None:
    """Why ``node_id`` may not hold partition ``claim`` under ``bound`` (``None``: it may)."""
    if bound is None:
        return None
    if node_id not in bound:
        return f"node {node_id} is not in the server's partition map ({PARTITION_MAP_ENV})"
    if bound[node_id] != claim:
        return (
            f"node {node_id} claims partition {claim}, but the server's partition map binds "
            f"it to partition {bound[node_id]}"
        )
    return None
