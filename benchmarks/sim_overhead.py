"""What Flower's simulation adds to a round: one federation in a plain process and `flwr run`.

Runs the same clients' local training for R rounds twice:

- **plain**: no Flower, no Ray. Each round samples ``clients-per-round``
  clients with a seeded generator, trains each from the global model with
  the app's training rule (same data, model, optimiser, epochs and batch
  size as a ClientApp), ``--workers`` clients at a time on forked worker
  processes (``--client-threads`` torch threads each), and averages them
  (FedAvg). Its median round is the compute floor at that parallelism.
- **simulation**: the same run config through ``flwr run`` against a
  simulation SuperLink this script starts (``num-supernodes`` = the
  clients, ``client-resources-num-cpus`` = cores / workers, so ``--workers``
  ClientApps run at once), its round walls read from the results file.

Prints ONE JSON line: ``sim_round_overhead_ratio`` (median simulated round /
median plain round), both medians, the server's share of the simulated round,
and the settings. Round 1 (first calls, actor start-up) is left out of both.

    python benchmarks/sim_overhead.py [--rounds 10] [--method fedavg] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as server_app.py and client_app.py set it

import numpy as np  # noqa: E402
import torch  # noqa: E402
from scale_flwr import FLOWER_ENV, free_port, stop_sessions, toml_value, wait_for_port  # noqa: E402

from ripple_flwr.app.client.data import benchmark_data  # noqa: E402
from ripple_flwr.app.client.work import client_rule  # noqa: E402
from ripple_flwr.app.run_config import parse_run_config  # noqa: E402
from ripple_flwr.training.models import build_model, get_state, set_state  # noqa: E402
from ripple_flwr.training.rules import RoundInputs, train_with_rule  # noqa: E402


def run_config(args: argparse.Namespace, results: Path, cache: str) -> dict:
    cfg = {
        "method": args.method,
        "num-partitions": args.clients,
        "clients-per-round": args.per_round,
        "num-server-rounds": args.rounds,
        "eval-every": args.rounds,
        "results-path": str(results),
        "client-threads": args.client_threads,
    }
    if cache:
        cfg["cache-dir"] = cache
    return cfg


_WORKER: dict = {}  # one plain worker process's settings, data, rule and model


def _worker_init(cfg: dict, threads: int) -> None:
    torch.set_num_threads(threads)
    settings = parse_run_config(cfg)
    data = [benchmark_data(settings, pid) for pid in range(int(cfg["num-partitions"]))]
    model = build_model(settings.training.model, data[0].image_shape, data[0].num_classes)
    _WORKER.update(settings=settings, data=data, rule=client_rule(settings), model=model)


def _worker_train(pid: int, r: int, state: dict) -> tuple[dict, int]:
    """One client's local training, as a ClientApp does it (the app's data, model and rule)."""
    settings, data, model = _WORKER["settings"], _WORKER["data"][pid], _WORKER["model"]
    set_state(model, state)
    stats, _ = train_with_rule(
        _WORKER["rule"],
        model,
        data.x_train,
        data.y_train,
        RoundInputs(lr=settings.training.lr, momentum=settings.training.momentum),
        epochs=settings.training.local_epochs,
        batch_size=settings.training.batch_size,
        seed=r * 100_003 + int(pid),
    )
    return get_state(model), int(stats["num_examples"])


def plain_rounds(args: argparse.Namespace, cfg: dict) -> list[float]:
    """Wall of each round of plain FedAvg on ``--workers`` processes (no Flower, no Ray).

    Processes, not threads: worker threads of one process contend for the
    GIL between torch calls (measured slower than the simulation itself).
    Spawned, not forked: a child forked after the parent ran an OpenMP region
    with two threads hangs in its first one (GNU OpenMP), and the workers
    load the cached federation in about a second.
    """
    _worker_init(cfg, args.client_threads)  # the parent builds (and caches) the data once
    state = get_state(_WORKER["model"])
    rng = np.random.default_rng(0)
    walls = []
    ctx = multiprocessing.get_context("spawn")
    init = (cfg, args.client_threads)
    with ProcessPoolExecutor(
        args.workers, mp_context=ctx, initializer=_worker_init, initargs=init
    ) as pool:
        list(
            pool.map(_worker_train, [0] * args.workers, [0] * args.workers, [state] * args.workers)
        )
        for r in range(1, args.rounds + 1):
            t0 = time.perf_counter()
            chosen = [int(c) for c in rng.choice(args.clients, size=args.per_round, replace=False)]
            replies = list(
                pool.map(_worker_train, chosen, [r] * len(chosen), [state] * len(chosen))
            )
            total = sum(n for _, n in replies)
            state = {k: sum(s[k] * (n / total) for s, n in replies) for k in state}
            walls.append(time.perf_counter() - t0)
    return walls


def simulated_rounds(args: argparse.Namespace, cfg: dict, tmp: Path) -> dict:
    """The results file of the same run config through ``flwr run`` on an own SuperLink."""
    home, port = tmp / "flwr-home", free_port()
    home.mkdir()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "sim"\n\n[superlink.sim]\naddress = "127.0.0.1:{port}"\n'
        "insecure = true\n"
    )
    ray_tmp = tempfile.mkdtemp(prefix="rf-ray-", dir="/tmp")
    env = {**os.environ, **FLOWER_ENV, "FLWR_HOME": str(home), "RAY_TMPDIR": ray_tmp}
    env["RIPPLE_OUTPUT_DIR"] = str(tmp)  # the ServerApp writes its results here
    cmd = ["flower-superlink", "--insecure", "--simulation", "--isolation", "subprocess"]
    cmd += ["--host", "127.0.0.1", "--port", str(port)]
    if not args.in_memory:  # as `flwr run`'s own local SuperLink: its state in a SQLite file
        cmd += ["--database", str(tmp / "state.db")]
    log = open(tmp / "superlink.log", "wb")  # noqa: SIM115 - closed below
    link = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        wait_for_port(port, 60)
        cpus = max(1, (os.cpu_count() or 1) // args.workers)
        out = subprocess.run(
            ["flwr", "run", ".", "sim", "--stream", "--run-config"]
            + [" ".join(f"{k}={toml_value(v)}" for k, v in cfg.items())]
            + ["--federation-config"]
            + [f"num-supernodes={args.clients} client-resources-num-cpus={cpus}"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=args.timeout,
        )
        results = Path(cfg["results-path"])
        if not results.is_file():  # flwr run exits 0 on a failed run
            tail = (out.stdout + out.stderr)[-3000:]
            raise SystemExit(f"the simulated run wrote no results file:\n{tail}")
        return json.loads(results.read_text())
    finally:
        stop_sessions([link])
        log.close()
        shutil.rmtree(ray_tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--per-round", type=int, default=10)
    p.add_argument("--method", default="fedavg")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument(
        "--client-threads", type=int, default=1, help="torch threads per client (with --workers 1)"
    )
    p.add_argument(
        "--in-memory", action="store_true", help="the SuperLink's state in memory, not SQLite"
    )
    p.add_argument("--cache-dir", default="")
    p.add_argument("--timeout", type=float, default=900)
    args = p.parse_args(argv)
    if args.rounds < 3:
        p.error("--rounds must be >= 3 (round 1 is left out of the medians)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        cfg = run_config(args, tmp_path / "sim.json", args.cache_dir)
        plain = plain_rounds(args, {**cfg, "results-path": str(tmp_path / "plain.json")})
        sim = simulated_rounds(args, cfg, tmp_path)
    sim_walls = [float(x["wall_seconds"]) for x in sim["rounds"]][1:]
    sim_server = [float(x["server_seconds"]) for x in sim["rounds"]][1:]
    plain_med, sim_med = float(np.median(plain[1:])), float(np.median(sim_walls))
    line = {
        "sim_round_overhead_ratio": round(sim_med / plain_med, 3),
        "sim_round_s": round(sim_med, 4),
        "plain_round_s": round(plain_med, 4),
        "sim_server_s": round(float(np.median(sim_server)), 4),
        "sim_round_minus_server_s": round(sim_med - float(np.median(sim_server)), 4),
        "method": args.method,
        "clients": args.clients,
        "clients_per_round": args.per_round,
        "workers": args.workers,
        "client_threads": args.client_threads,
        "superlink_state": "memory" if args.in_memory else "sqlite",
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
    }
    line["commit"] = re.sub(r"\s", "", os.popen(f"git -C {ROOT} rev-parse --short HEAD").read())
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
