"""Shared fixtures: an in-process fake Grid that calls the ClientApp directly, tiny configs,
and a tiny GMM-VAE checkpoint pre-trained once per session."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from ripple_flwr.app.flower_internals import set_task_identity
from ripple_flwr.experiments.compose import applied
from ripple_flwr.testing.inprocess import InProcessGrid

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def tiny_run_config(cache_dir: str | Path, **over: Any) -> dict[str, Any]:
    """A run config small enough for unit tests (6 clients of 60 images, K=4)."""
    cfg = {
        "method": "oracle",
        "sampling": "stratified",
        "router": "gmm-vae",
        "dataset": "mnist-5k",
        "num-partitions": 6,
        "partition-size": 60,
        "alpha": 0.1,
        "aux-size": 300,
        "num-components": 4,
        "model": "cnn",
        "num-server-rounds": 2,
        "clients-per-round": 3,
        "eval-every": 1,
        "batch-size": 16,
        "pretrain-bank-size": 300,
        "pretrain-steps": 100,
        "pretrain-client-size": 40,
        "node-wait-timeout": 2.0,
        "round-timeout": 30.0,
        "client-threads": 1,
        "cache-dir": str(cache_dir),
    }
    cfg.update(over)
    # The shared keys apply to the methods that read them (a run refuses a key its method
    # ignores); a key the test passes itself is kept, so a test can still ask for a refusal.
    return applied(cfg, [k for k in cfg if k not in over])[0]


class FakeGrid(InProcessGrid):
    """The in-process grid, delivering to this project's ClientApp by default."""

    def __init__(self, run_config, num_nodes=None, *, app=None, **kwargs) -> None:
        if app is None:
            from client_app import app as client_app

            app = client_app
        super().__init__(run_config, num_nodes, app=app, **kwargs)


@pytest.fixture(autouse=True, scope="session")
def _server_identity():
    """Messages need a run/node/task identity, which Flower's runtime would set."""
    set_task_identity(run_id=1, node_id=0, task_id=1)
    yield


@pytest.fixture(autouse=True, scope="session")
def _output_dir(tmp_path_factory):
    """The server may write results anywhere under the session's temp folder (and nowhere else)."""
    old = os.environ.get("RIPPLE_OUTPUT_DIR")
    os.environ["RIPPLE_OUTPUT_DIR"] = str(tmp_path_factory.getbasetemp().resolve())
    yield
    if old is None:
        os.environ.pop("RIPPLE_OUTPUT_DIR", None)
    else:
        os.environ["RIPPLE_OUTPUT_DIR"] = old


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One cache folder per session: federations are built once and reused."""
    return tmp_path_factory.mktemp("ripple-cache")


@pytest.fixture(scope="session")
def deployment_router_cache(tmp_path_factory) -> Path:
    """A ``cache-dir`` for the real-process runs that pre-train the same tiny GMM-VAE in their
    ServerApp (mnist-5k, aux 300, K 4, 200 synthetic clients of 40, 60 steps, seed 0): the
    first such run of the session pre-trains it, the others read it from the cache (the same
    file bit for bit, ``setup.resolve_checkpoint``). The loopback test keeps a cache of its
    own: it checks that the ServerApp pre-trains."""
    return tmp_path_factory.mktemp("deployment-cache")


def tiny_pretrain_settings(tmp: Path, **over: Any):
    """The one tiny pre-training budget of the suite (K=4, aux 300, 600 synthetic clients)."""
    from ripple_flwr.router.pretrain import PretrainSettings
    from ripple_flwr.router.synthetic import BankSettings
    from ripple_flwr.router.training import TrainSettings

    base: dict[str, Any] = {
        "dataset": "mnist-5k",
        "aux_size": 300,
        "num_components": 4,
        "bank": BankSettings(num_clients=600, client_size=40),
        "heldout_clients": 100,
        "train": TrainSettings(steps=300, eval_every=100, patience=10),
        "vae_hidden": (128, 64),
        "latent_dim": 8,
        "real_clients": 20,
        "real_client_size": 40,
        "cache_dir": str(tmp / "cache"),
        "device": "cpu",
    }
    base.update(over)
    return PretrainSettings(**base)


@pytest.fixture(scope="session")
def tiny_pretrained(tmp_path_factory):
    """(folder, checkpoint, report) of the tiny GMM-VAE, pre-trained once per session."""
    from ripple_flwr.router.pretrain import pretrain

    tmp = tmp_path_factory.mktemp("tiny-vae")
    ckpt, report = pretrain(tiny_pretrain_settings(tmp), tmp / "tiny-vae.pt", progress=False)
    return tmp, ckpt, report


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_pretrained) -> Path:
    """The tiny GMM-VAE's file; it matches :func:`tiny_run_config`'s embedding settings."""
    return tiny_pretrained[0] / "tiny-vae.pt"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config, items) -> None:
    """Tests that pre-train (through the shared fixture) are slow like the process tests.

    Tests that start real Flower processes (they take the ``ray_tmp`` fixture or the shared
    ``loopback_deployment``) run one
    after another on one pytest-xdist worker: each starts a SuperLink, SuperNodes and Ray, picks
    free ports, and would race another deployment for ports and cores. Everything else is
    spread over the other workers, which share the cores with them: so every wait on a Flower
    process is :data:`TIMEOUT_SCALE` x what it takes on a quiet machine (a wait only ends
    early on success, so a generous one costs nothing when the code is right)."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if {"tiny_pretrained", "tiny_checkpoint"} & names:
            item.add_marker(pytest.mark.slow)
        if {"ray_tmp", "_loopback_deployment"} & names:
            item.add_marker(pytest.mark.xdist_group("flower-processes"))
    # The tests on the session's loopback deployment run one after another, where the last of
    # them (the fault tests, which stop it) stands: it does not idle through the others.
    users = [it for it in items if "_loopback_deployment" in getattr(it, "fixturenames", ())]
    if users:
        last = items.index(users[-1])
        taken = set(map(id, users))
        rest = [it for it in items if id(it) not in taken]
        at = sum(1 for it in items[:last] if id(it) not in taken)
        items[:] = rest[:at] + users + rest[at:]


# -- real Flower processes (flwr run / loopback deployment tests) --------------------------------
# The process tests' timeouts are quiet-machine budgets; under pytest-xdist another worker runs
# unit tests on the same cores (measured: 127 s -> 184 s for the loopback deployment).
TIMEOUT_SCALE = 2.0


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def flower_env(home: Path, ray_tmp: Path | None = None, **extra: str) -> dict[str, str]:
    """Environment for a Flower process: offline, quiet, its state under ``home``.

    Ray's socket paths must stay under 107 bytes, so its temp folder is a short
    one (see the ``ray_tmp`` fixture), not inside pytest's long tmp paths.
    """
    env = dict(os.environ)
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "FLWR_HOME": str(home),
            "RAY_TMPDIR": str(ray_tmp or home),
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "RAY_USAGE_STATS_ENABLED": "0",
            "OMP_WAIT_POLICY": "PASSIVE",
            # Each SuperExec (the SuperLink's, every SuperNode's) asks for a new task, a ServerApp
            # or a ClientApp to start, once a second by default: on average half a second lost
            # per message. Every 0.5 s halves that; an idle SuperLink with two SuperNodes then
            # takes 4 % of a core instead of 3 % (every 0.25 s: 7 %, more than it saves).
            "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.5",
            **extra,
        }
    )
    return env


# What a TLS deployment test needs installed; each skips with the reason otherwise.
NEEDS_TLS_DEPLOYMENT = [
    pytest.mark.skipif(
        any(shutil.which(t) is None for t in ("flower-superlink", "flower-supernode", "flwr")),
        reason="flower-superlink / flower-supernode / flwr not installed (pip install flwr)",
    ),
    pytest.mark.skipif(
        shutil.which("openssl") is None or shutil.which("ssh-keygen") is None,
        reason="openssl and ssh-keygen make the certificates and node keys",
    ),
]


@pytest.fixture
def ray_tmp():
    """A short temp folder for Ray (AF_UNIX paths), removed afterwards."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="rf-ray-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def _loopback_deployment(tmp_path_factory):
    """The session's loopback deployment, started by the first test that asks for it.

    One SuperLink (``--isolation subprocess``, a state database) and two SuperNodes holding
    partitions 0 and 1 of 2 (``fault_deployment.Deployment``). The healthy deployment tests
    (tests/processes/test_deployment.py, test_deployment_stateful.py) submit their runs to it
    one after another, as an operator would; the fault tests (test_faults_real.py), collected
    after them, break it and stop it. At the end of the session every process it started
    must be stopped."""
    import tempfile

    from fault_deployment import Deployment

    ray_tmp = Path(tempfile.mkdtemp(prefix="rf-loop-", dir="/tmp"))
    dep = Deployment(tmp_path_factory.mktemp("loopback"), ray_tmp, nodes=2)
    try:
        yield dep
    finally:
        late = dep.stop()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert not late, f"still running after SIGTERM: {late}"
    for name, proc, _ in dep.procs.procs:
        assert proc.poll() is not None, f"{name} still running"
    assert not dep.leftovers()


@pytest.fixture
def loopback_deployment(_loopback_deployment):
    """The session's loopback deployment, running (started afresh if a test stopped it)."""
    return _loopback_deployment.ensure_running()


def write_cli_config(home: Path, name: str, port: int) -> None:
    """The CLI's $FLWR_HOME/config.toml with one SuperLink connection ``name``."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "{name}"\n\n[superlink.{name}]\n'
        f'address = "127.0.0.1:{port}"\ninsecure = true\n'
    )


class Processes:
    """Starts Flower processes in their own sessions and always stops exactly those."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[tuple[str, Any]] = []

    def start(self, name: str, cmd: list[str], env: dict[str, str], cwd: Path | None = None):
        import subprocess

        log = open(self.log_dir / f"{name}.log", "wb")  # noqa: SIM115 - closed in stop()
        proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs.append((name, proc, log))
        return proc

    def logs(self) -> str:
        return "\n".join(
            f"--- {name} ---\n" + (self.log_dir / f"{name}.log").read_text(errors="replace")[-3000:]
            for name, *_ in self.procs
        )

    def stop(self) -> None:
        import signal
        import time as _time

        for _, proc, _ in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)  # the session this test started
                except ProcessLookupError:
                    pass
        deadline = _time.monotonic() + 15
        for _, proc, log in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - _time.monotonic()))
            except Exception:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=5)
            log.close()


def wait_for_port(port: int, timeout: float, procs: Processes | None = None) -> None:
    import socket
    import time as _time

    deadline = _time.monotonic() + timeout * TIMEOUT_SCALE
    while _time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        _time.sleep(0.3)
    raise TimeoutError(
        f"nothing listens on 127.0.0.1:{port} after {timeout} s\n" + (procs.logs() if procs else "")
    )


def run_flwr(args: list[str], env: dict[str, str], timeout: float):
    """Run the ``flwr`` CLI in the project root; return the completed process."""
    import subprocess

    return subprocess.run(
        ["flwr", *args],
        cwd=Path(__file__).resolve().parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout * TIMEOUT_SCALE,
    )


def run_insecure_deployment(
    tmp_path: Path,
    ray_tmp: Path,
    run_config: str,
    node_configs: list[str],
    app: str | Path = ".",
    timeout: float = 300,
) -> Processes:
    """A loopback SuperLink, one SuperNode per ``node_configs`` entry, and ``flwr run APP deploy``.

    Asserts the run finished ``completed`` and that every process was stopped;
    returns the stopped processes (their logs stay readable).
    """
    link = free_port()
    procs = Processes(tmp_path)
    try:
        procs.start(
            "superlink",
            [
                "flower-superlink",
                "--insecure",
                "--host",
                "127.0.0.1",
                "--port",
                str(link),
                "--database",
                str(tmp_path / "state.db"),
            ],
            flower_env(tmp_path / "home-superlink", ray_tmp),
        )
        wait_for_port(link, 60, procs)
        for i, node_config in enumerate(node_configs):
            procs.start(
                f"supernode-{i}",
                [
                    "flower-supernode",
                    "--insecure",
                    "--superlink",
                    f"127.0.0.1:{link}",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(free_port()),
                    "--node-config",
                    node_config,
                ],
                flower_env(tmp_path / f"home-supernode-{i}", ray_tmp),
            )
        cli_home = tmp_path / "home-cli"
        env = flower_env(cli_home, ray_tmp)
        write_cli_config(cli_home, "deploy", link)
        out = run_flwr(
            ["run", str(app), "deploy", "--stream", "--run-config", run_config], env, timeout
        )
        text = out.stdout + out.stderr
        assert out.returncode == 0, text[-4000:]
        status = run_status(text, env, "deploy")
        assert status == "finished:completed", f"{status}\n{text[-4000:]}\n{procs.logs()}"
    finally:
        procs.stop()
    for name, proc, _ in procs.procs:
        assert proc.poll() is not None, f"{name} still running"
    return procs


class SimulationLink:
    """A local simulation SuperLink (``--simulation --isolation subprocess``) that takes
    ``flwr run . sim`` submissions one after another, as a user's local SuperLink does.

    Its environment (``env_extra``: e.g. ``TORCH_HOME``) is the runs' environment: the
    simulation and its Ray workers are its children."""

    def __init__(self, root: Path, ray_tmp: Path, **env_extra: str) -> None:
        self.root = root
        self.port = free_port()
        home = root / "flwr-home"
        self.env = flower_env(home, ray_tmp, **env_extra)
        write_cli_config(home, "sim", self.port)
        self.procs = Processes(root)

    def start(self) -> SimulationLink:
        self.procs.start(
            "superlink",
            [
                "flower-superlink",
                "--insecure",
                "--simulation",
                "--isolation",
                "subprocess",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--database",
                str(self.root / "state.db"),
            ],
            self.env,
        )
        wait_for_port(self.port, 60, self.procs)
        return self

    def run(self, run_config: str, num_supernodes: int, timeout: float = 300) -> None:
        """``flwr run . sim --stream`` with ``num_supernodes``; asserts the run ``completed``."""
        out = run_flwr(
            [
                "run",
                ".",
                "sim",
                "--stream",
                "--run-config",
                run_config,
                "--federation-config",
                f"num-supernodes={num_supernodes} client-resources-num-cpus=1",
            ],
            self.env,
            timeout=timeout,
        )
        text = out.stdout + out.stderr
        assert out.returncode == 0, text[-4000:]
        status = run_status(text, self.env, "sim")
        assert status == "finished:completed", f"{status}\n{text[-4000:]}\n{self.procs.logs()}"

    def stop(self) -> None:
        self.procs.stop()


def run_simulation(
    tmp_path: Path,
    ray_tmp: Path,
    run_config: str,
    num_supernodes: int,
    timeout: float = 300,
    **env_extra: str,
) -> None:
    """``flwr run . sim`` against a local simulation SuperLink of its own; asserts the run
    ``completed``."""
    link = SimulationLink(tmp_path, ray_tmp, **env_extra)
    try:
        link.start().run(run_config, num_supernodes, timeout)
    finally:
        link.stop()


def run_status(output: str, env: dict[str, str], federation: str) -> str:
    """The status of the run ``flwr run`` started (it exits 0 even when the run failed)."""
    import json
    import re

    match = re.search(r"Successfully started run (\d+)", output)
    assert match, f"flwr run did not start a run:\n{output[-3000:]}"
    ls = run_flwr(["ls", federation, "--run-id", match.group(1), "--format", "json"], env, 60)
    data = json.loads(ls.stdout)
    runs = data.get("runs", data if isinstance(data, list) else [])
    return str(runs[0].get("status", "")) if runs else f"unknown: {ls.stdout[-500:]}"


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if pretrain_vae.py's job itself starts (an option or the data was bad)."""
    from ripple_flwr.cli import pretrain as pretrain_vae

    def forbidden(*args, **kwargs):
        raise AssertionError("pretrain() ran although an option or the data was bad")

    monkeypatch.setattr(pretrain_vae, "pretrain", forbidden)
