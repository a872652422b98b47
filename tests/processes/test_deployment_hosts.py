"""Across hosts: the SuperLink and the SuperNodes on two network hosts, TLS and SuperNode auth.

Two Linux network namespaces joined by a veth pair stand for two machines: the
SuperLink's host (10.200.0.1) and the host of two SuperNodes and the operator's
``flwr`` CLI (10.200.0.2). Each has its own loopback and ports; the only way
between them is the veth link, so every Fleet, Control and Runtime call of a
SuperNode or of the CLI crosses it (the test checks that the SuperLink is not on
the nodes' loopback). The namespaces have no default route and no link to the
machine's own network: nothing the test starts can reach another address. Files
stay shared (one file system), which is the only shortcut against real machines.

The commands are those of docs/deployment.md ("Across hosts"): a CA and a server
certificate issued for the SuperLink's address and its own 127.0.0.1 (openssl), ECDSA node keys
(ssh-keygen), ``flower-superlink --ssl-* --enable-supernode-auth``,
``flwr supernode register``, ``flower-supernode --root-certificates
--auth-supernode-private-key`` and ``flwr run``. A tiny FedAvg run of 2 rounds
on 2 registered SuperNodes must complete; a SuperNode with an unregistered key
must be refused.

Needs root and ``ip`` (Debian package iproute2) with network-namespace support;
skipped, with the reason, where either is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import NEEDS_TLS_DEPLOYMENT, TIMEOUT_SCALE, Processes, flower_env

pytestmark = [
    pytest.mark.slow,
    *NEEDS_TLS_DEPLOYMENT,
    pytest.mark.skipif(
        sys.platform != "linux" or os.geteuid() != 0,
        reason="network namespaces (`ip netns`) need root on Linux",
    ),
    pytest.mark.skipif(
        shutil.which("ip") is None, reason="`ip` not found (Debian package iproute2)"
    ),
]

ROOT = Path(__file__).resolve().parents[2]
# A private test range, set only inside the namespaces this test creates.
LINK_ADDR, NODES_ADDR, PREFIX = "10.200.0.1", "10.200.0.2", 24
LINK_PORT = 39200  # fresh namespaces: every port is free
NODE_PORTS = (39210, 39211, 39212)  # each SuperNode's ClientAppIo API, on the nodes' loopback


@dataclass
class Hosts:
    """Two network namespaces joined by a veth pair: ``link`` (the SuperLink) and ``nodes``."""

    link: str
    nodes: str

    def cmd(self, ns: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", ns, *argv]

    def pids(self, ns: str) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]


def _ip(*args: str) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()}")


@pytest.fixture
def hosts():
    """The two hosts; afterwards any process left in them is killed and both are deleted."""
    tag = f"rf{os.getpid()}"
    h = Hosts(link=f"{tag}-link", nodes=f"{tag}-nodes")
    created: list[str] = []
    try:
        try:
            for ns in (h.link, h.nodes):
                _ip("netns", "add", ns)
                created.append(ns)
            # Both veth ends are created inside the namespaces, never in the machine's own.
            _ip("-n", h.link, "link", "add", f"{tag}a", "type", "veth", "peer", "name", f"{tag}b",
                "netns", h.nodes)  # fmt: skip
            _ip("-n", h.link, "addr", "add", f"{LINK_ADDR}/{PREFIX}", "dev", f"{tag}a")
            _ip("-n", h.nodes, "addr", "add", f"{NODES_ADDR}/{PREFIX}", "dev", f"{tag}b")
            for ns, dev in ((h.link, f"{tag}a"), (h.nodes, f"{tag}b")):
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "link", "set", dev, "up")
        except RuntimeError as e:
            pytest.skip(f"cannot create network namespaces with a veth link here: {e}")
        yield h
    finally:
        for ns in created:
            # Only processes inside namespaces this test created (detached Flower helpers).
            for pid in h.pids(ns):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def _run(cmd: list[str], cwd: Path) -> None:
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}"


def make_certificates(d: Path, addresses: list[str]) -> None:
    """ca.crt (+ ca.key) and server.pem + server.key for ``addresses`` (docs/deployment.md)."""
    d.mkdir(parents=True, exist_ok=True)
    san = ", ".join(f"IP:{a}" for a in addresses)
    (d / "server.ext").write_text(
        f"subjectAltName = {san}\nbasicConstraints = CA:FALSE\n"
        "keyUsage = digitalSignature, keyEncipherment\nextendedKeyUsage = serverAuth\n"
    )
    _run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
          "-out", "ca.crt", "-days", "2", "-subj", "/CN=ripple-flwr CA"], d)  # fmt: skip
    _run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
          "-out", "server.csr", "-subj", f"/CN={addresses[0]}"], d)  # fmt: skip
    _run(["openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
          "-CAcreateserial", "-out", "server.pem", "-days", "2", "-sha256",
          "-extfile", "server.ext"], d)  # fmt: skip


def make_node_key(d: Path, name: str) -> Path:
    """An ECDSA P-384 key pair in OpenSSH format: ``name`` (private), ``name.pub``."""
    _run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-C", name, "-f", name], d)
    return d / name


def reachable(hosts: Hosts, ns: str, address: str, port: int) -> bool:
    """Whether a TCP connection from inside ``ns`` to ``address:port`` succeeds."""
    probe = f"import socket; socket.create_connection(({address!r}, {port}), 2).close()"
    out = subprocess.run(hosts.cmd(ns, [sys.executable, "-c", probe]), capture_output=True)
    return out.returncode == 0


def wait_exit(proc, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout * TIMEOUT_SCALE
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return proc.returncode
        time.sleep(0.3)
    return None


def test_superlink_and_supernodes_on_separate_hosts(tmp_path, ray_tmp, hosts):
    started = time.monotonic()
    certs, keys = tmp_path / "certs", tmp_path / "keys"
    # Issued for the address the others dial, and for 127.0.0.1: bound to 0.0.0.0, the
    # SuperLink's own SuperExec dials it there (over TLS) to start the ServerApp.
    make_certificates(certs, [LINK_ADDR, "127.0.0.1"])
    keys.mkdir()
    node_keys = [make_node_key(keys, f"node{i}") for i in range(2)]
    rogue = make_node_key(keys, "rogue")
    ca = certs / "ca.crt"
    results = tmp_path / "results.json"
    run_config = (
        'method="fedavg" num-partitions=2 partition-size=60 aux-size=300 num-components=4 '
        "clients-per-round=2 num-server-rounds=2 eval-every=2 batch-size=16 "
        f'results-path="{results}" cache-dir="{tmp_path / "cache"}" node-wait-timeout=60.0 '
        "round-timeout=120.0"
    )
    cli_home = tmp_path / "home-cli"
    cli_home.mkdir()
    (cli_home / "config.toml").write_text(
        '[superlink]\ndefault = "deploy"\n\n[superlink.deploy]\n'
        f'address = "{LINK_ADDR}:{LINK_PORT}"\nroot-certificates = "{ca}"\n'
    )
    env = flower_env(cli_home, ray_tmp)

    def flwr(args: list[str], timeout: float) -> subprocess.CompletedProcess:
        """The operator's CLI, on the nodes' host."""
        return subprocess.run(
            hosts.cmd(hosts.nodes, [shutil.which("flwr") or "flwr", *args]),
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout * TIMEOUT_SCALE,
        )  # fmt: skip

    def supernode(name: str, key: Path, pid: int, port: int):
        return procs.start(
            name,
            hosts.cmd(hosts.nodes, [
                shutil.which("flower-supernode") or "flower-supernode",
                "--superlink", f"{LINK_ADDR}:{LINK_PORT}", "--root-certificates", str(ca),
                "--auth-supernode-private-key", str(key),
                "--host", "127.0.0.1", "--port", str(port),
                "--node-config", f"partition-id={pid} num-partitions=2",
            ]),
            flower_env(tmp_path / f"home-{name}", ray_tmp),
        )  # fmt: skip

    procs = Processes(tmp_path)
    try:
        procs.start(
            "superlink",
            hosts.cmd(hosts.link, [
                shutil.which("flower-superlink") or "flower-superlink",
                "--ssl-ca-certfile", str(ca), "--ssl-certfile", str(certs / "server.pem"),
                "--ssl-keyfile", str(certs / "server.key"), "--enable-supernode-auth",
                "--host", "0.0.0.0", "--port", str(LINK_PORT),
                "--database", str(tmp_path / "state.db"),
            ]),
            flower_env(tmp_path / "home-superlink", ray_tmp),
        )  # fmt: skip
        deadline = time.monotonic() + 60 * TIMEOUT_SCALE
        while not reachable(hosts, hosts.nodes, LINK_ADDR, LINK_PORT):
            assert procs.procs[0][1].poll() is None, procs.logs()
            assert time.monotonic() < deadline, "SuperLink not reachable\n" + procs.logs()
            time.sleep(0.5)
        # The SuperLink is on the other host: not on the nodes' own loopback.
        assert not reachable(hosts, hosts.nodes, "127.0.0.1", LINK_PORT)

        registered = []
        for key in node_keys:
            out = flwr(["supernode", "register", f"{key}.pub", "deploy"], 90)
            assert out.returncode == 0 and "registered successfully" in out.stdout, (
                out.stdout + out.stderr
            )
            registered.append(int(out.stdout.split("SuperNode ")[1].split()[0]))

        unregistered = supernode("supernode-unregistered", rogue, 0, NODE_PORTS[2])
        for i, key in enumerate(node_keys):
            supernode(f"supernode-{i}", key, i, NODE_PORTS[i])
        # The run is submitted at once and goes on while the refusal is checked (the refused
        # node cannot join it; the run waits for the two registered ones).
        cli_run = procs.start(
            "flwr-run",
            hosts.cmd(hosts.nodes, [shutil.which("flwr") or "flwr", "run", ".", "deploy",
                                    "--stream", "--run-config", run_config]),
            env,
            cwd=ROOT,
        )  # fmt: skip
        assert wait_exit(unregistered, 60) not in (None, 0), procs.logs()
        log = (tmp_path / "supernode-unregistered.log").read_text(errors="replace")
        assert "Failed to activate SuperNode" in log and "SuperNode ID" not in log, log
        link_log = (tmp_path / "superlink.log").read_text(errors="replace")
        assert "No SuperNode found with the given public key" in link_log

        code = wait_exit(cli_run, 180)  # x TIMEOUT_SCALE
        text = (tmp_path / "flwr-run.log").read_text(errors="replace")
        assert code == 0, text[-4000:]
        run_id = text.split("Successfully started run ")[1].split()[0]
        ls = flwr(["ls", "deploy", "--run-id", run_id, "--format", "json"], 60)
        (run,) = json.loads(ls.stdout)["runs"]
        assert run["status"] == "finished:completed", f"{run}\n{text[-4000:]}\n{procs.logs()}"

        out = flwr(["supernode", "ls", "deploy", "--format", "json"], 60)
        nodes = {int(n["node-id"]) for n in json.loads(out.stdout)["nodes"]}
        assert nodes == set(registered), out.stdout  # the rogue key never got an id
        for i, node_id in enumerate(registered):
            log = (tmp_path / f"supernode-{i}.log").read_text(errors="replace")
            assert f"SuperNode ID: {node_id}" in log, log[-3000:]
    finally:
        procs.stop()
    for name, proc, _ in procs.procs:
        assert proc.poll() is not None, f"{name} still running"
    # Flower's detached helpers (SuperExec, ClientApps) follow their parents out.
    deadline = time.monotonic() + 20
    while (hosts.pids(hosts.link) or hosts.pids(hosts.nodes)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not hosts.pids(hosts.link) and not hosts.pids(hosts.nodes), "processes left behind"

    link_log = (tmp_path / "superlink.log").read_text(errors="replace")
    # The SuperNodes' and the CLI's calls came from the nodes' host, over the veth link.
    for api in ("fleet/activate-node", "fleet/get-run", "control/start-run"):
        assert re.search(rf'{re.escape(NODES_ADDR)}:\d+ - "POST /v1/{api}', link_log), api
    r = json.loads(results.read_text())
    assert r["status"] == "completed"
    assert r["clients"]["partition_ids"] == [0, 1]
    assert list(r["accuracy_per_round"]) == ["2"]
    print(f"across hosts: {time.monotonic() - started:.1f} s")
