"""The federation of ``benchmarks/scale.py`` under Flower's own simulation (``flwr run``, Ray).

Starts its own simulation SuperLink (``flower-superlink --insecure --simulation``,
state in memory, ``FLWR_HOME`` and Ray's temp folder in a temp folder), runs
``flwr run . sim`` with ``num-supernodes = --clients`` and ``--actors`` ClientApp
actors of one CPU each, and prints ONE JSON line with the same keys as
``scale.py``: the phases are the results file's own (``query_round_s``: the
query round as the ledger records it; ``round_s``: the mean training-round
wall; ``evaluation_s``: from the sent evaluate messages to the last score,
so without building the payloads), ``peak_memory_gb`` the sum of the resident
memory of every process this script started (SuperLink, ServerApp, Ray,
actors, the ``flwr`` CLI), sampled every 0.5 s. Every process it started is
stopped at the end, by its id.

    python benchmarks/scale_flwr.py --clients 1000 --images 5 --eval-fraction 0.1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from memory import TreeMemory  # noqa: E402
from runs import write_json_line  # noqa: E402
from scale import commit, parse, run_config, run_fields  # noqa: E402

FLOWER_ENV = {
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "OMP_WAIT_POLICY": "PASSIVE",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise TimeoutError(f"no SuperLink on 127.0.0.1:{port} after {timeout} s")


def toml_value(v: Any) -> str:
    """One run-config value as ``flwr run --run-config`` reads it (TOML)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v) if isinstance(v, str) else str(v)


def stop_sessions(procs: list[subprocess.Popen]) -> None:
    """SIGTERM the sessions these processes lead; SIGKILL those still there after 20 s."""
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def stop(procs: list[subprocess.Popen], memory: TreeMemory) -> None:
    """SIGTERM the sessions this script started, then any process of theirs still alive."""
    stop_sessions(procs)
    time.sleep(1.0)
    for pid in memory.still_running():  # reparented Ray processes, if any
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def start_superlink(port: int, env: dict[str, str], log_path: Path) -> subprocess.Popen:
    """A simulation SuperLink of our own (state in memory), in its own session."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["flower-superlink", "--insecure", "--simulation", "--isolation", "subprocess"]
            + ["--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc


def simulate(args: argparse.Namespace, tmp: Path) -> tuple[dict[str, Any], float, TreeMemory]:
    """One ``flwr run`` against a SuperLink of our own; the results file, wall, memory."""
    out = tmp / "out"
    out.mkdir()
    home, ray_tmp = tmp / "home", Path(tempfile.mkdtemp(prefix="rf-ray-", dir="/tmp"))
    home.mkdir()
    port = free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "sim"\n\n[superlink.sim]\naddress = "127.0.0.1:{port}"\n'
        "insecure = true\n"
    )
    env = {**os.environ, **FLOWER_ENV, "FLWR_HOME": str(home), "RAY_TMPDIR": str(ray_tmp)}
    env["RIPPLE_OUTPUT_DIR"] = str(out)
    if args.cache_dir:
        env["RIPPLE_CACHE_DIR"] = str(Path(args.cache_dir).expanduser())
    cfg = run_config(args, out)
    cfg["round-timeout"] = args.round_timeout  # the query round's too: who answered by then
    cfg["node-wait-timeout"] = 600.0
    procs: list[subprocess.Popen] = []
    memory = TreeMemory(
        interval=0.5, limit_gb=args.abort_above_gb, on_limit=lambda m: stop(procs, m)
    ).start()
    try:
        procs.append(start_superlink(port, env, tmp / "superlink.log"))
        wait_for_port(port, 60)
        federation = f"num-supernodes={args.clients} client-resources-num-cpus=1"
        if args.actors:
            federation += f" init-args-num-cpus={args.actors}"
        t0 = time.perf_counter()
        cli = subprocess.run(
            ["flwr", "run", str(HERE.parent), "sim", "--stream"]
            + ["--run-config", " ".join(f"{k}={toml_value(v)}" for k, v in cfg.items())]
            + ["--federation-config", federation],
            env=env,
            capture_output=True,
            text=True,
            timeout=args.timeout,
            start_new_session=True,
        )
        wall = time.perf_counter() - t0
        (tmp / "flwr.log").write_text(cli.stdout + cli.stderr)
    finally:
        memory.stop()
        stop(procs, memory)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    path = Path(cfg["results-path"])
    if memory.limit and max(memory.peaks.values(), default=0) > memory.limit:
        return {"aborted": f"memory above {args.abort_above_gb} GB: stopped"}, wall, memory
    if not path.is_file():  # flwr run exits 0 even when the run failed
        tail = (cli.stdout + cli.stderr)[-3000:]
        raise RuntimeError(f"the run wrote no results; flwr said:\n{tail}")
    return json.loads(path.read_text()), wall, memory


def summary(args: argparse.Namespace, res: dict, wall: float, memory: TreeMemory) -> dict:
    if "aborted" in res:
        return {
            **res,
            "peak_memory_gb": memory.peak_gb,
            "peak_processes_gb": memory.peak_processes(),
            "flwr_run_wall_s": round(wall, 2),
            "clients": args.clients,
            "commit": commit(),
        }
    t, rounds = res["timings"], [r["wall_seconds"] for r in res["rounds"]]
    return {
        "query_round_s": round(t["query"], 2),
        "round_s": round(sum(rounds) / max(len(rounds), 1), 3),
        "evaluation_s": round(t["evaluation"], 2),
        "peak_memory_gb": memory.peak_gb,
        "peak_processes_gb": memory.peak_processes(),
        "rounds_s": [round(r, 3) for r in rounds],
        "data_s": round(t["data"], 2),
        "pretrain_s": round(t["pretrain_or_load"], 2),
        "server_total_s": round(t["total"], 2),
        "flwr_run_wall_s": round(wall, 2),
        **run_fields(args, res),
        "query_replies": len(res["clients"]["partition_ids"]),
        "left_out": len(res["clients"]["left_out"]),
        "round_timeout_s": args.round_timeout,
        "grid": "Flower simulation (flwr run, Ray), "
        + (f"{args.actors} CPUs" if args.actors else "all CPUs")
        + " for ClientApp actors of 1 CPU",
        "cpus": os.cpu_count(),
        "commit": commit(),
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--actors", type=int, default=0, help="Ray CPUs (0: all)")
    extra.add_argument("--timeout", type=float, default=3600.0, help="seconds for flwr run")
    extra.add_argument(
        "--round-timeout", type=float, default=600.0, help="the run's round-timeout (query too)"
    )
    own, rest = extra.parse_known_args(argv)
    args = parse(rest)
    args.actors, args.timeout, args.round_timeout = own.actors, own.timeout, own.round_timeout
    with tempfile.TemporaryDirectory() as tmp:
        res, wall, memory = simulate(args, Path(tmp))
    line = json.dumps(summary(args, res, wall, memory))
    print(line, flush=True)
    write_json_line(line, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
