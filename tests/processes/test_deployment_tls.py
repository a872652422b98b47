"""Loopback deployment as across machines: TLS, SuperNode authentication, a short Ripple run.

The README's "Deployment across machines" commands, run for real on 127.0.0.1:
a CA and a server certificate made with openssl, SuperNode keys made with
ssh-keygen (ECDSA P-384, the OpenSSH format Flower reads), a SuperLink with
``--ssl-*`` and ``--enable-supernode-auth``, two registered SuperNodes that
train, one unregistered SuperNode that must be refused and one SuperNode
without the CA whose TLS handshake must fail.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from conftest import (
    NEEDS_TLS_DEPLOYMENT,
    TIMEOUT_SCALE,
    Processes,
    flower_env,
    free_port,
    run_flwr,
    run_status,
    wait_for_port,
)

pytestmark = [
    pytest.mark.slow,
    *NEEDS_TLS_DEPLOYMENT,
]
ROOT = Path(__file__).resolve().parents[2]

# The server certificate's extensions: the SuperNodes and the CLI dial 127.0.0.1.
SERVER_EXT = """\
subjectAltName = IP:127.0.0.1, DNS:localhost
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
"""


def _run(cmd: list[str], cwd: Path) -> None:
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}"


def make_certificates(d: Path) -> None:
    """ca.crt, server.pem + server.key signed by it (the README's openssl commands)."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "server.ext").write_text(SERVER_EXT)
    subj_ca, subj_server = "/CN=ripple-flwr CA", "/CN=127.0.0.1"
    _run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
          "-out", "ca.crt", "-days", "2", "-subj", subj_ca], d)  # fmt: skip
    _run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
          "-out", "server.csr", "-subj", subj_server], d)  # fmt: skip
    _run(["openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
          "-CAcreateserial", "-out", "server.pem", "-days", "2", "-sha256",
          "-extfile", "server.ext"], d)  # fmt: skip


def make_node_key(d: Path, name: str) -> Path:
    """An ECDSA P-384 key pair in OpenSSH format: ``name`` (private), ``name.pub``."""
    _run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-C", name, "-f", name], d)
    return d / name


def write_tls_cli_config(home: Path, name: str, port: int, ca: Path | None) -> None:
    """The CLI's config.toml: one TLS connection, verified against ``ca`` when given."""
    home.mkdir(parents=True, exist_ok=True)
    lines = ["[superlink]", f'default = "{name}"', "", f"[superlink.{name}]"]
    lines.append(f'address = "127.0.0.1:{port}"')
    if ca is not None:
        lines.append(f'root-certificates = "{ca}"')
    (home / "config.toml").write_text("\n".join(lines) + "\n")


def supernode_cmd(link: int, key: Path, pid: int, ca: Path | None) -> list[str]:
    cmd = ["flower-supernode", "--superlink", f"127.0.0.1:{link}"]
    if ca is not None:
        cmd += ["--root-certificates", str(ca)]
    return cmd + [
        "--auth-supernode-private-key",
        str(key),
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        "--node-config",
        f"partition-id={pid} num-partitions=2",
    ]


def wait_exit(proc, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return proc.returncode
        time.sleep(0.3)
    return None


def test_tls_and_supernode_auth_run_and_refusals(tmp_path, ray_tmp, deployment_router_cache):
    certs, keys = tmp_path / "certs", tmp_path / "keys"
    make_certificates(certs)
    keys.mkdir()
    node_keys = [make_node_key(keys, f"node{i}") for i in range(2)]
    rogue = make_node_key(keys, "rogue")
    ca = certs / "ca.crt"
    link = free_port()
    results = tmp_path / "results.json"
    run_config = (
        'method="ripple" sampling="uniform" num-partitions=2 partition-size=60 aux-size=300 '
        "num-components=4 clients-per-round=2 num-server-rounds=1 eval-every=1 batch-size=16 "
        "pretrain-bank-size=200 pretrain-steps=60 pretrain-client-size=40 "
        f'results-path="{results}" cache-dir="{deployment_router_cache}" '
        "node-wait-timeout=60.0 round-timeout=120.0"
    )
    procs = Processes(tmp_path)
    try:
        procs.start(
            "superlink",
            [
                "flower-superlink",
                "--ssl-ca-certfile",
                str(ca),
                "--ssl-certfile",
                str(certs / "server.pem"),
                "--ssl-keyfile",
                str(certs / "server.key"),
                "--enable-supernode-auth",
                "--host",
                "127.0.0.1",
                "--port",
                str(link),
                "--database",
                str(tmp_path / "state.db"),
            ],  # fmt: skip
            flower_env(tmp_path / "home-superlink", ray_tmp),
        )
        wait_for_port(link, 60, procs)
        cli_home = tmp_path / "home-cli"
        env = flower_env(cli_home, ray_tmp)
        write_tls_cli_config(cli_home, "deploy", link, ca)

        # A CLI that does not trust the CA cannot reach the SuperLink.
        no_ca_home = tmp_path / "home-cli-no-ca"
        write_tls_cli_config(no_ca_home, "deploy", link, None)
        out = run_flwr(["supernode", "ls", "deploy"], flower_env(no_ca_home, ray_tmp), 90)
        assert out.returncode != 0, out.stdout + out.stderr
        assert "unavailable" in out.stdout + out.stderr

        registered = []
        for key in node_keys:
            out = run_flwr(["supernode", "register", f"{key}.pub", "deploy"], env, 90)
            assert out.returncode == 0 and "registered successfully" in out.stdout, (
                out.stdout + out.stderr
            )
            registered.append(int(out.stdout.split("SuperNode ")[1].split()[0]))

        # Refused: an unregistered key; a node that lacks the CA (its handshake fails).
        unregistered = procs.start(
            "supernode-unregistered",
            supernode_cmd(link, rogue, 0, ca),
            flower_env(tmp_path / "home-unregistered", ray_tmp),
        )
        no_ca = procs.start(
            "supernode-no-ca",
            supernode_cmd(link, rogue, 1, None),
            flower_env(tmp_path / "home-no-ca", ray_tmp),
        )
        for i, key in enumerate(node_keys):
            procs.start(
                f"supernode-{i}",
                supernode_cmd(link, key, i, ca),
                flower_env(tmp_path / f"home-supernode-{i}", ray_tmp),
            )
        # The run is submitted at once and goes on while the refusals are checked (the
        # refused nodes cannot join it; the run waits for the two registered ones).
        cli_run = procs.start(
            "flwr-run",
            ["flwr", "run", ".", "deploy", "--stream", "--run-config", run_config],
            env,
            cwd=ROOT,
        )
        assert wait_exit(unregistered, 60) not in (None, 0), procs.logs()
        assert wait_exit(no_ca, 60) not in (None, 0), procs.logs()
        log = (tmp_path / "supernode-unregistered.log").read_text(errors="replace")
        assert "Failed to activate SuperNode" in log and "SuperNode ID" not in log, log
        log = (tmp_path / "supernode-no-ca.log").read_text(errors="replace")
        assert "CERTIFICATE_VERIFY_FAILED" in log and "SuperNode ID" not in log, log
        link_log = (tmp_path / "superlink.log").read_text(errors="replace")
        assert "No SuperNode found with the given public key" in link_log

        code = wait_exit(cli_run, 240 * TIMEOUT_SCALE)
        text = (tmp_path / "flwr-run.log").read_text(errors="replace")
        assert code == 0, text[-4000:]
        status = run_status(text, env, "deploy")
        assert status == "finished:completed", f"{status}\n{text[-4000:]}\n{procs.logs()}"

        out = run_flwr(["supernode", "ls", "deploy", "--format", "json"], env, 90)
        nodes = {int(n["node-id"]): n["status"] for n in json.loads(out.stdout)["nodes"]}
        assert sorted(nodes) == sorted(registered), out.stdout  # the rogue key never got an id
    finally:
        procs.stop()
    for name, proc, _ in procs.procs:
        assert proc.poll() is not None, f"{name} still running"
    r = json.loads(results.read_text())
    assert r["clients"]["partition_ids"] == [0, 1]
    assert sorted(r["accuracy_per_round"]) == ["1"]
