"""A loopback deployment the fault tests (and ``benchmarks/faults_real.py``) break on purpose.

The same deployment serves the healthy loopback tests first (``loopback_deployment`` in
conftest.py: one SuperLink and two SuperNodes per test session, ``flwr run --stream``
submissions through :meth:`Deployment.run_streamed`).

One SuperLink (``--isolation subprocess``: each run's ServerApp is a ``flwr-serverapp``
process) on a state database, and SuperNodes that hold the benchmark partitions
``0..n-1``. Runs are submitted without ``--stream`` and watched through the files
the ServerApp writes: ``<results>.status`` (running, with the ServerApp's pid;
failed; completed) and ``<results>.resume.npz`` (the last saved round).

Every process carries ``RF_FAULT_DEPLOYMENT=<root>`` in its environment, so
:meth:`Deployment.stop` finds and stops also those that left their process group
(Flower's SuperExec and the ServerApps it starts run in sessions of their own).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

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

from ripple_flwr.app.server.resume.file import load_server_state

MARKER = "RF_FAULT_DEPLOYMENT"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pids_with_env(entry: str) -> list[int]:
    """Live processes whose environment holds ``entry`` (``NAME=value``, a whole entry)."""
    found = []
    needle = entry.encode() + b"\0"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if needle in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:  # gone, or not ours to read
            pass
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class Deployment:
    """SuperLink + ``nodes`` SuperNodes on 127.0.0.1, started once and broken by the tests."""

    def __init__(self, root: Path, ray_tmp: Path, nodes: int = 2) -> None:
        self.root = root
        self.ray_tmp = ray_tmp
        self.num_nodes = nodes
        self.marker = f"{MARKER}={root}"
        (root / "logs").mkdir(parents=True, exist_ok=True)
        self.procs = Processes(root / "logs")
        self.link = free_port()
        self.superlink: subprocess.Popen | None = None
        self.nodes: dict[int, subprocess.Popen] = {}
        self.node_logs: dict[int, Path] = {}
        self.starts: dict[str, int] = {}
        self.stopped = False
        self.cli_env = self.env("cli")
        write_cli_config(root / "home-cli", "deploy", self.link)

    def env(self, name: str) -> dict[str, str]:
        return flower_env(self.root / f"home-{name}", self.ray_tmp, **{MARKER: str(self.root)})

    def _name(self, base: str) -> str:
        self.starts[base] = self.starts.get(base, 0) + 1
        return f"{base}-{self.starts[base]}"

    # -- processes ---------------------------------------------------------------------------
    def start_superlink(self) -> None:
        self.superlink = self.procs.start(
            self._name("superlink"),
            [
                "flower-superlink",
                "--insecure",
                "--isolation",
                "subprocess",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.link),
                "--database",
                str(self.root / "state.db"),
            ],
            self.env("superlink"),
        )
        wait_for_port(self.link, 60, self.procs)

    def start_node(self, pid: int) -> None:
        self.node_logs[pid] = self.root / "logs" / f"{self._name(f'supernode-{pid}')}.log"
        self.nodes[pid] = self.procs.start(
            self.node_logs[pid].stem,
            [
                "flower-supernode",
                "--insecure",
                "--superlink",
                f"127.0.0.1:{self.link}",
                "--host",
                "127.0.0.1",
                "--port",
                str(free_port()),
                "--node-config",
                f"partition-id={pid} num-partitions={self.num_nodes}",
            ],
            self.env(f"supernode-{pid}"),
        )

    def start(self) -> Deployment:
        self.stopped = False
        self.start_superlink()
        for pid in range(self.num_nodes):
            self.start_node(pid)
        return self

    def ensure_running(self) -> Deployment:
        """Started, unless it runs already (a stopped deployment starts afresh)."""
        return self.start() if self.superlink is None or self.stopped else self

    def signal_group(self, proc: subprocess.Popen, sig: int) -> None:
        """``sig`` to the session one of our processes leads (it and its ClientApps)."""
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        if sig == signal.SIGKILL:
            proc.wait(timeout=30)

    def messages_received(self, pid: int, kind: str = "train") -> int:
        """How many ``kind`` messages the SuperNode of partition ``pid`` took so far."""
        try:
            text = self.node_logs[pid].read_text(errors="replace")
        except OSError:
            return 0
        return text.count(f"Receiving: {kind} message")

    def messages_taken(self, pid: int, kind: str = "train") -> int:
        """How many ``kind`` messages that SuperNode received in full (its objects pulled)."""
        try:
            text = self.node_logs[pid].read_text(errors="replace")
        except OSError:
            return 0
        chunks = text.split("Receiving: ")[1:]  # each up to the node's next message
        return sum(c.startswith(f"{kind} message") and "Received successfully" in c for c in chunks)

    def kill_node(self, pid: int) -> None:
        self.signal_group(self.nodes[pid], signal.SIGKILL)

    def kill_superlink(self) -> None:
        assert self.superlink is not None
        self.signal_group(self.superlink, signal.SIGKILL)

    def stop(self) -> list[str]:
        """Stop every process this deployment started; return those that had to be killed late."""
        self.stopped = True
        self.procs.stop()  # SIGTERM each group, SIGKILL a leader that does not exit in 15 s
        deadline = time.monotonic() + 20 * TIMEOUT_SCALE
        while time.monotonic() < deadline and (
            any(group_alive(p.pid) for _, p, _ in self.procs.procs) or self.leftovers()
        ):
            time.sleep(0.5)
        late = []
        for name, proc, _ in self.procs.procs:
            if group_alive(proc.pid):
                late.append(f"group of {name}")
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for pid in self.leftovers():  # left its group (SuperExec, ServerApps): ours by its env
            late.append(f"pid {pid} ({cmdline(pid)[:80]})")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return late

    def leftovers(self) -> list[int]:
        return pids_with_env(self.marker)

    def serverapps(self) -> list[int]:
        return [p for p in self.leftovers() if "flwr-serverapp" in cmdline(p)]

    # -- runs ----------------------------------------------------------------------------------
    def submit(self, run_config: str) -> int:
        """``flwr run . deploy`` (no ``--stream``): the run's id once the SuperLink took it."""
        out = run_flwr(["run", ".", "deploy", "--run-config", run_config], self.cli_env, 120)
        text = out.stdout + out.stderr
        match = re.search(r"Successfully started run (\d+)", text)
        assert out.returncode == 0 and match, text[-3000:] + "\n" + self.procs.logs()
        return int(match.group(1))

    def run_streamed(self, run_config: str, app: str | Path = ".", timeout: float = 300) -> str:
        """``flwr run APP deploy --stream``: asserts it exited 0 and the run finished
        ``completed``; returns the CLI's output."""
        out = run_flwr(
            ["run", str(app), "deploy", "--stream", "--run-config", run_config],
            self.cli_env,
            timeout,
        )
        text = out.stdout + out.stderr
        assert out.returncode == 0, text[-4000:]
        status = run_status(text, self.cli_env, "deploy")
        assert status == "finished:completed", f"{status}\n{text[-4000:]}\n{self.procs.logs()}"
        return text

    def run_status(self, run_id: int) -> str:
        ls = run_flwr(
            ["ls", "deploy", "--run-id", str(run_id), "--format", "json"], self.cli_env, 60
        )
        data = json.loads(ls.stdout)
        runs = data.get("runs", data if isinstance(data, list) else [])
        return str(runs[0].get("status", "")) if runs else f"unknown: {ls.stdout[-300:]}"

    def finished_status(self, run_id: int, timeout: float = 60) -> str:
        """The run's Flower status once it is ``finished:...`` (the ServerApp writes its
        status file a moment before its process exits and Flower marks the run)."""
        return self.wait_for(
            f"run {run_id} marked finished",
            lambda: (st := self.run_status(run_id)).startswith("finished") and st,
            timeout,
            poll=1.0,
        )

    def wait_for(self, what: str, check, timeout: float, poll: float = 0.2) -> Any:
        """``check()``'s first truthy value within ``timeout`` s (x TIMEOUT_SCALE)."""
        deadline = time.monotonic() + timeout * TIMEOUT_SCALE
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(poll)
        raise TimeoutError(f"{what}: not within {timeout * TIMEOUT_SCALE:g} s\n{self.procs.logs()}")


def status_of(results: Path) -> dict[str, Any]:
    try:
        return json.loads(results.with_suffix(".status").read_text())
    except (OSError, ValueError):
        return {}


def saved_round(results: Path) -> int:
    """The last round ``<results>.resume.npz`` holds (0: none yet)."""
    try:
        return int(load_server_state(results.with_suffix(".resume.npz"))["round"])
    except Exception:  # noqa: BLE001 - absent, or being replaced right now
        return 0


def wait_until_done(
    dep: Deployment, results: Path, timeout: float, not_pid: int | None = None
) -> dict[str, Any]:
    """The run's final status (completed or failed), from ``<results>.status``; a status
    written by the ServerApp ``not_pid`` (an earlier, killed one) does not count."""

    def done():
        s = status_of(results)
        return s.get("status") in ("completed", "failed") and s.get("pid") != not_pid and s

    return dep.wait_for(f"{results.name} finished", done, timeout, poll=0.5)


def saved_rounds(results: Path) -> list[dict[str, Any]]:
    """The round records ``<results>.resume.npz`` holds (empty: none yet)."""
    try:
        return list(load_server_state(results.with_suffix(".resume.npz"))["ledger"]["rounds"])
    except Exception:  # noqa: BLE001 - absent, or being replaced right now
        return []


def clientapps_of(dep: Deployment, pid: int) -> list[int]:
    """The ``flwr-clientapp`` processes SuperNode ``pid`` runs now."""
    home = f"FLWR_HOME={dep.root / f'home-supernode-{pid}'}"
    return [p for p in pids_with_env(home) if "flwr-clientapp" in cmdline(p)]


def files_under(*folders: Path) -> set[Path]:
    return {p for f in folders if f.exists() for p in f.rglob("*") if p.is_file()}


def run_config(results: Path, cache: Path, nodes: int = 2, **over: Any) -> str:
    """A tiny fedavg run of 2 rounds on ``nodes`` partitions (every client trains every round;
    one evaluation, at the end: each message is a fresh ClientApp process of a few seconds)."""
    cfg: dict[str, Any] = {
        "method": "fedavg",
        "num-partitions": nodes,
        "partition-size": 60,
        "aux-size": 300,
        "num-components": 4,
        "clients-per-round": nodes,
        "num-server-rounds": 2,
        "eval-every": 2,
        "batch-size": 16,
        "seed": 7,
        "checkpoint-every": 1,
        "node-wait-timeout": 60.0,
        "round-timeout": 60.0,
        "results-path": str(results),
        "cache-dir": str(cache),
    }
    cfg.update(over)
    return " ".join(
        f'{k}="{v}"'
        if isinstance(v, str)
        else f"{k}={str(v).lower() if isinstance(v, bool) else v}"
        for k, v in cfg.items()
    )


def parse_run_config_string(text: str) -> dict[str, Any]:
    """The dict a ``--run-config`` string of :func:`run_config` stands for."""
    import tomllib

    pairs = re.findall(r'([\w.-]+)=("[^"]*"|\S+)', text)
    return {k: v for key, value in pairs for k, v in tomllib.loads(f"{key} = {value}").items()}


def comparable(path: Path) -> dict[str, Any]:
    """A results file without what differs between equal runs (timings, node ids, provenance)."""
    res = json.loads(path.read_text())
    for key in ("timings", "settings", "saved_run", "checkpoint", "server_folders", "resumed"):
        res.pop(key, None)
    res.get("clients", {}).pop("node_ids", None)
    for r in res["rounds"]:
        r.pop("server_seconds"), r.pop("wall_seconds")
    for e in res["evaluations"]:
        e.pop("wall_seconds")
    return res
