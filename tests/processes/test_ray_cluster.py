"""Flower's simulation on a two-node Ray cluster (a head and one worker node, on loopback).

What a user does on N machines (docs/ray-cluster.md), shrunk to one machine: ``ray start
--head`` and ``ray start --address`` each give their node its own CPU budget (1 CPU), a
simulation SuperLink is started with ``RAY_ADDRESS`` pointing at the head (Flower 1.42's
Ray backend calls ``ray.init()`` only when Ray is not initialised, and ``ray.init()`` with no
address attaches to ``RAY_ADDRESS``), and ``flwr run`` runs a tiny Ripple federation there
with one CPU per ClientApp: Flower sizes its actor pool node by node (``ray.nodes()``), so
each node holds exactly one ClientApp actor.

How the test sees where the ClientApps ran: Ray's state API (``ray.util.state.list_actors``,
``ray list actors``) needs the dashboard, which needs ``ray[default]`` (aiohttp_cors,
opencensus, prometheus_client, ...); the project installs plain ``ray`` (2.55.1, pinned by
``flwr[simulation]==1.42.0``), so it is not there. The same data comes straight from the
GCS: a short probe process connects to the cluster as a driver and reads the node table
(``ray.nodes()``), the actor table (``ray._private.state.actors()``, the debugging API behind
``ray list actors``) and the task events (the records behind ``ray list tasks``: one per
``ClientAppActor.run`` call, each with the node it ran on). The test asserts that
``ClientAppActor`` actors lived on both nodes and that ``ClientAppActor.run`` calls (one per
message) executed on both. The probe runs in its own process so that this pytest process
never becomes a Ray driver.

One cluster serves the module (``cluster``): the Flower simulation and then a sweep run on
it, one after another, as they would on a user's cluster; the last test stops it and checks
what is left.

Stopping: each node is ``ray start ... --block`` in a session (process group) of its own,
as every Flower process of the suite (``conftest.Processes``); SIGTERM to the group ends the
node (``--block`` shuts its children down on exit) and anything left in the group gets
SIGKILL. ``ray stop`` is never run: it ends every Ray process on the machine, including
those of other tests or jobs. Every process the test starts carries its unique Ray temp
folder in ``RAY_TMPDIR``; afterwards no process may carry it.

No state leaks: ``ray start --temp-dir`` writes the cluster's address to
``<temp-dir>/ray_current_cluster`` (not ``/tmp/ray/ray_current_cluster``, the file a later
bare ``ray.init()`` reads); the test removes that folder, checks that the file ``ray.init()``
would read is untouched, and sets ``RAY_ADDRESS`` only in its children's environments.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import (
    TIMEOUT_SCALE,
    Processes,
    flower_env,
    free_port,
    run_flwr,
    run_status,
    wait_for_port,
    write_cli_config,
)
from fault_deployment import group_alive, pids_with_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("flower-processes"),  # conftest.py: one deployment at a time
    pytest.mark.skipif(
        any(shutil.which(cmd) is None for cmd in ("ray", "flower-superlink", "flwr")),
        reason="ray / flower-superlink / flwr not installed (pip install 'flwr[simulation]')",
    ),
]

# Run in a fresh interpreter: connect to the cluster, print nodes, ClientApp actors and
# ClientApp calls (task events) as JSON. Private-but-pinned Ray APIs, see the docstring.
PROBE = r"""
import json, sys, time
import ray
import ray._private.state as state
from ray._common.utils import binary_to_hex
from ray.core.generated import gcs_pb2

ray.init(address=sys.argv[1], include_dashboard=False, log_to_driver=False,
         logging_level="ERROR")
nodes = [
    {"node_id": n["NodeID"], "alive": n["Alive"], "cpus": n["Resources"].get("CPU", 0),
     "head": "node:__internal_head__" in n["Resources"]}
    for n in ray.nodes()
]
actors = [
    {"actor_id": a["ActorID"], "class": a["ActorClassName"], "node_id": a["Address"]["NodeID"],
     "state": a["State"]}
    for a in state.actors().values()
]
calls = []
for raw in state.state._connect_and_get_accessor().get_task_events():
    event = gcs_pb2.TaskEvents.FromString(raw)
    info, update = event.task_info, event.state_updates
    if info.func_or_class_name.startswith("ClientAppActor."):
        calls.append({"name": info.func_or_class_name,
                      "actor_id": binary_to_hex(info.actor_id),
                      "node_id": binary_to_hex(update.node_id) if update.node_id else ""})
print("PROBE " + json.dumps({"nodes": nodes, "actors": actors, "calls": calls}))
ray.shutdown()
"""


def _ray_address_file() -> Path:
    """The file a bare ``ray.init()`` in this environment would read the latest address from."""
    from ray._common.utils import get_ray_address_file

    return Path(get_ray_address_file(None))


def _wait_for_log(procs: Processes, name: str, text: str, timeout: float) -> None:
    """Wait until process ``name``'s log says ``text``; fail early if it exits."""
    log = procs.log_dir / f"{name}.log"
    proc = next(p for n, p, _ in procs.procs if n == name)
    deadline = time.monotonic() + timeout * TIMEOUT_SCALE
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise TimeoutError(f"{name}: no {text!r} after {timeout} s\n{procs.logs()}")


def _stop_all(procs: Processes, marker: str) -> list[str]:
    """Stop every process group this test started; return what had to be killed late."""
    procs.stop()  # SIGTERM each group, SIGKILL a leader that does not exit within 15 s
    deadline = time.monotonic() + 20 * TIMEOUT_SCALE
    groups = [proc.pid for _, proc, _ in procs.procs]
    while any(group_alive(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(0.5)
    late = []
    for name, proc, _ in procs.procs:
        if group_alive(proc.pid):
            late.append(f"group of {name}")
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    time.sleep(1)
    if Path("/proc").is_dir():
        for pid in pids_with_env(marker):  # left its group (setsid): still one of ours by its env
            late.append(f"pid {pid} outside its group")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return late


@dataclass
class Cluster:
    """A head and one worker node, 1 CPU each, on 127.0.0.1 (``ray start ... --block``)."""

    head_address: str
    node_env: dict[str, str]  # the nodes' environment, without RAY_ADDRESS
    ray_tmp: Path  # RAY_TMPDIR of every process the module starts
    temp_dir: Path  # ray start --temp-dir: sessions, logs, ray_current_cluster
    procs: Processes  # the two nodes
    address_before: str | None  # the file a bare ray.init() reads, before the cluster
    env_address_before: str | None

    @property
    def marker(self) -> str:
        return f"RAY_TMPDIR={self.ray_tmp}"


def _start_cluster(root: Path, ray_tmp: Path, procs: Processes) -> tuple[str, dict[str, str]]:
    head_address = f"127.0.0.1:{free_port()}"
    node_env = flower_env(root / "home-ray", ray_tmp)
    node_env.pop("RAY_ADDRESS", None)
    common = ["--num-cpus", "1", "--num-gpus", "0", "--object-store-memory", str(200 * 2**20)]
    common += ["--disable-usage-stats", "--block"]
    procs.start(
        "ray-head",
        ["ray", "start", "--head", "--port", head_address.rpartition(":")[2]]
        + ["--temp-dir", str(ray_tmp / "r"), "--include-dashboard", "false"]
        + ["--ray-client-server-port", str(free_port()), *common],
        node_env,
    )
    _wait_for_log(procs, "ray-head", "Ray runtime started", 60)
    procs.start("ray-worker", ["ray", "start", "--address", head_address, *common], node_env)
    _wait_for_log(procs, "ray-worker", "Ray runtime started", 60)
    return head_address, node_env


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The module's two-node cluster; stopped (again, if the last test did) at the end."""
    address_file = _ray_address_file()
    address_before = address_file.read_text() if address_file.exists() else None
    env_address_before = os.environ.get("RAY_ADDRESS")
    root = tmp_path_factory.mktemp("ray-cluster")
    ray_tmp = Path(tempfile.mkdtemp(prefix="rf-ray-", dir="/tmp"))
    procs = Processes(root)
    try:
        head_address, node_env = _start_cluster(root, ray_tmp, procs)
        yield Cluster(
            head_address,
            node_env,
            ray_tmp,
            ray_tmp / "r",
            procs,
            address_before,
            env_address_before,
        )
    finally:
        _stop_all(procs, f"RAY_TMPDIR={ray_tmp}")
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_simulation_on_two_node_ray_cluster(tmp_path, cluster, deployment_router_cache):
    results = tmp_path / "results.json"
    run_config = (
        'method="ripple" sampling="uniform" num-partitions=2 partition-size=60 aux-size=300 '
        "num-components=4 clients-per-round=2 num-server-rounds=2 eval-every=2 batch-size=16 "
        "pretrain-bank-size=200 pretrain-steps=60 pretrain-client-size=40 "
        f'results-path="{results}" cache-dir="{deployment_router_cache}" '
        "node-wait-timeout=60.0 round-timeout=120.0"
    )
    procs = Processes(tmp_path)  # the SuperLink (and what it starts) of this test
    try:
        link = free_port()
        home = tmp_path / "home-cli"
        env = flower_env(home, cluster.ray_tmp, RAY_ADDRESS=cluster.head_address)
        write_cli_config(home, "cluster", link)
        procs.start(
            "superlink",
            ["flower-superlink", "--insecure", "--simulation", "--isolation", "subprocess"]
            + ["--host", "127.0.0.1", "--port", str(link)]
            + ["--database", str(tmp_path / "state.db")],
            env,
        )
        wait_for_port(link, 60, procs)
        out = run_flwr(
            ["run", ".", "cluster", "--stream", "--run-config", run_config]
            + ["--federation-config", "num-supernodes=2 client-resources-num-cpus=1"],
            env,
            timeout=200,
        )
        text = out.stdout + out.stderr
        assert out.returncode == 0, text[-4000:]
        status = run_status(text, env, "cluster")
        assert status == "finished:completed", f"{status}\n{text[-4000:]}\n{procs.logs()}"

        probe = subprocess.run(
            [sys.executable, "-c", PROBE, cluster.head_address],
            env=cluster.node_env,
            capture_output=True,
            text=True,
            timeout=60 * TIMEOUT_SCALE,
        )
        lines = [ln for ln in probe.stdout.splitlines() if ln.startswith("PROBE ")]
        assert probe.returncode == 0 and lines, probe.stdout[-2000:] + probe.stderr[-3000:]
        state = json.loads(lines[-1].removeprefix("PROBE "))
    finally:
        procs.stop()

    # The run: a results file only a finished ServerApp writes, with both clients in it.
    r = json.loads(results.read_text())
    assert r["clients"]["partition_ids"] == [0, 1]
    assert sorted(r["accuracy_per_round"]) == ["2"]

    # The cluster: two live nodes of one CPU each, one of them the head.
    nodes = {n["node_id"]: n for n in state["nodes"] if n["alive"]}
    assert len(nodes) == 2 and all(n["cpus"] == 1 for n in nodes.values()), state["nodes"]
    assert sorted(n["head"] for n in nodes.values()) == [False, True], state["nodes"]

    # Where the ClientApps ran: an actor on each node, and calls (messages) on each node.
    actors = [a for a in state["actors"] if a["class"] == "ClientAppActor"]
    actors_per_node = Counter(a["node_id"] for a in actors)
    assert set(actors_per_node) == set(nodes), (actors, nodes)
    runs = [c for c in state["calls"] if c["name"] == "ClientAppActor.run" and c["node_id"]]
    runs_per_node = Counter(c["node_id"] for c in runs)
    assert set(runs_per_node) == set(nodes), (runs_per_node, nodes)
    assert {c["actor_id"] for c in runs} <= {a["actor_id"] for a in actors}
    # One call per message: the query round (2) and two training rounds (2 each) at least.
    assert sum(runs_per_node.values()) >= 6, runs_per_node

    # This test's SuperLink stopped (the cluster's nodes: the last test).
    for name, proc, _ in procs.procs:
        assert proc.poll() is not None, f"{name} still running"


def test_a_sweep_runs_its_tasks_on_both_nodes_of_a_cluster_with_the_serial_results(
    tmp_path, cluster, monkeypatch
):
    """ripple-sweep --ray-address on a two-node cluster: 4 tiny runs, tasks on both nodes,
    every results file equal to the serial run's (timings and paths aside); the cluster is
    stopped by the next test."""
    from test_sweep import TINY, comparable, sets

    from ripple_flwr.experiments import sweep

    monkeypatch.setenv("RIPPLE_OUTPUT_DIR", os.environ.get("RIPPLE_OUTPUT_DIR", ""))
    grid = ["--grid", "method=fedavg,ifca", "--seeds", "0", "1", *sets(TINY), "--no-progress"]
    serial = tmp_path / "serial"
    assert sweep.main([*grid, "--out", str(serial), "--jobs", "1"]) == 0

    out = tmp_path / "cluster"
    done = subprocess.run(
        ["ripple-sweep", *grid, "--out", str(out), "--ray-address", cluster.head_address]
        + ["--jobs", "2"],
        env=cluster.node_env,
        capture_output=True,
        text=True,
        timeout=300 * TIMEOUT_SCALE,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(line["ran"]) == 4 and not line["failed"]
    # Ray's own node ids, read in each task: both nodes ran tasks.
    assert len({r["ray_node"] for r in line["ran"]}) == 2, line["ran"]
    for path in sorted(serial.glob("method-*.json")):
        there = json.loads((out / path.name).read_text())
        assert comparable(there) == comparable(json.loads(path.read_text())), path.name


def test_every_process_the_cluster_ran_is_stopped_and_nothing_is_left(cluster):
    """Both nodes stop on SIGTERM; no process of the module is left; nothing is left for a
    later bare ``ray.init()`` to attach to."""
    late = _stop_all(cluster.procs, cluster.marker)
    shutil.rmtree(cluster.temp_dir, ignore_errors=True)
    assert not late, f"still running after SIGTERM: {late}"
    for name, proc, _ in cluster.procs.procs:
        assert proc.poll() is not None, f"{name} still running"
    assert not pids_with_env(cluster.marker)
    assert not cluster.temp_dir.exists()
    address_file = _ray_address_file()
    assert (address_file.read_text() if address_file.exists() else None) == cluster.address_before
    assert os.environ.get("RAY_ADDRESS") == cluster.env_address_before
