"""What the table and sweep commands share: the execution flags and the server's environment."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from ripple_flwr.experiments.executor import Execution
from ripple_flwr.experiments.runner import Runner
from ripple_flwr.runs.outputs import CHECKPOINT_DIR_ENV, OUTPUT_DIR_ENV
from ripple_flwr.runs.tracking import TrackerError, check_tracker, open_command
from ripple_flwr.settings import CACHE_DIR_ENV, TRACKERS

__all__ = [
    "OneLineParser",
    "add_execution_flags",
    "add_set_flag",
    "check_outputs",
    "execution_from",
    "make_runner",
    "prepare_server_env",
    "run_config_value",
    "tracker_hook",
]


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose refusal is one line: the problem and where the flags are."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (every flag: {self.prog} --help)\n")


def run_config_value(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` of ``--set``, VALUE parsed as TOML (so 1 is an int, "a" a string)."""
    import tomllib

    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--set wants KEY=VALUE, got {text!r}")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare word: a string
    return key.strip(), value


def add_set_flag(p: argparse.ArgumentParser, help: str) -> None:
    """``--set KEY=VALUE`` (repeatable): run-config keys as TOML values."""
    p.add_argument(
        "--set", type=run_config_value, action="append", default=[], metavar="KEY=VALUE", help=help
    )


def add_execution_flags(p: argparse.ArgumentParser) -> None:
    """``--jobs``, ``--cpus-per-run``, ``--gpus-per-run``, ``--ray-address``, ``--tracker``."""
    g = p.add_argument_group("execution (every run a Ray task unless --jobs 1)")
    g.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="runs at once (default: the cores, or the cluster's CPUs, over --cpus-per-run); "
        "1 without --ray-address or GPUs runs them one after another in this process, no Ray",
    )
    g.add_argument(
        "--cpus-per-run", type=float, default=1.0, help="CPUs (torch threads) per run (1)"
    )
    g.add_argument(
        "--gpus-per-run", type=float, default=0.0, help="GPUs per run, fractional (e.g. 0.25)"
    )
    g.add_argument(
        "--ray-address",
        default=None,
        help="'auto' (or HOST:PORT) attaches to a running Ray cluster; "
        "default: a local Ray, started for the batch and stopped at the end",
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument(
        "--tracker",
        choices=TRACKERS,
        default="none",
        help="also send each run's settings, metrics and results to this tracker",
    )
    g.add_argument(
        "--tracker-dir", default="", help="the tracker's store (default: <out>/tracking)"
    )


# The output flags of the table, map and sweep commands: (flag, a folder?).
OUTPUT_FLAGS = (("out", True), ("keep", True), ("md", False), ("json", False), ("plot", False))
PLOT_SUFFIXES = (".png", ".pdf", ".svg")


def check_outputs(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    """Every output flag given is writable, before any work; else one line naming it."""
    from ripple_flwr.io.paths import OutputPathError, check_output_path

    plot = getattr(args, "plot", None)
    if plot and Path(plot).suffix.lower() not in PLOT_SUFFIXES:
        p.error(f"--plot {plot}: a figure is written as {', '.join(PLOT_SUFFIXES)}")
    for name, folder in OUTPUT_FLAGS:
        value = getattr(args, name, None)
        if value:
            try:
                check_output_path(value, f"--{name}", folder=folder)
            except OutputPathError as err:
                p.error(str(err))


def execution_from(args: argparse.Namespace, p: argparse.ArgumentParser) -> Execution:
    """The flags as an :class:`Execution`; a bad value stops with one line naming the fix."""
    try:
        return Execution(
            jobs=args.jobs,
            cpus_per_run=args.cpus_per_run,
            gpus_per_run=args.gpus_per_run,
            ray_address=args.ray_address,
            progress=not args.no_progress,
        )
    except ValueError as err:
        p.error(str(err))
        raise  # unreachable: p.error exits


def prepare_server_env(out: Path, checkpoint: str = "", cache_dir: str = "") -> None:
    """This process (and each task) is the server: ``out`` its output folder, and so on."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ[OUTPUT_DIR_ENV] = str(out)
    if checkpoint:  # the checkpoint's folder is one it may read
        os.environ[CHECKPOINT_DIR_ENV] = str(Path(checkpoint).expanduser().resolve().parent)
    if cache_dir:  # and a cache folder it is given, its cache root
        os.environ[CACHE_DIR_ENV] = str(Path(cache_dir).expanduser().resolve())
    logging.getLogger("flwr").setLevel(logging.WARNING)


def tracker_hook(args: argparse.Namespace, out: Path) -> Callable[[Mapping[str, Any]], None] | None:
    """A function sending one finished run's results to ``--tracker`` (None: no tracker)."""
    if args.tracker == "none":
        return None
    from ripple_flwr.runs.tracking import track_run

    try:
        check_tracker(args.tracker)  # before any run: a missing package is one line
    except TrackerError as err:
        raise SystemExit(f"--tracker: {err}") from None
    where = Path(args.tracker_dir or out / "tracking").expanduser().resolve()
    print(
        f"tracking every run in {where}; open it with: {open_command(args.tracker, where)}",
        file=sys.stderr,
    )

    def hook(results: Mapping[str, Any]) -> None:
        try:
            track_run(results, args.tracker, where)
        except Exception as err:  # the run is kept; only its record in the tracker is lost
            name = Path(str(results.get("settings", {}).get("results-path", "?"))).name
            print(f"warning: could not track {name}: {err}", file=sys.stderr)

    return hook


def make_runner(
    args: argparse.Namespace,
    p: argparse.ArgumentParser,
    out: Path,
    made_on: Mapping[str, Any],
    train: Callable[[dict], dict] | None = None,
    flag_of: Mapping[str, str] | None = None,
) -> Runner:
    """The :class:`Runner` of a table or sweep command: reuse, keep, execution, tracker;
    ``flag_of`` names the flag behind a run-config key in a refusal."""
    return Runner(
        reuse=args.reuse,
        reuse_only=args.reuse_only,
        train=train,
        keep=args.keep,
        made_on=made_on,
        execution=execution_from(args, p),
        on_result=tracker_hook(args, out),
        flag_of=flag_of,
    )
