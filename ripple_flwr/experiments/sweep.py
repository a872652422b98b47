"""A sweep over any run-config keys and seeds: every combination a run, each a Ray task.

    ripple-sweep --grid 'method=fedavg,ripple alpha=0.01,0.1' --seeds 42 7 123 \\
        --set dataset=fashion-mnist --set num-server-rounds=100 --out outputs/sweep --reuse

``--grid`` takes ``KEY=V1,V2,...`` words (values read as TOML, a bare word as a
string); ``--set KEY=VALUE`` fixes a key for every run; every other key keeps
the app's default (``pyproject.toml``). Every combination is checked before
anything runs. One results file per run, named after its grid values and
seed (``method-fedavg_alpha-0.01-seed42.json``); ``--reuse``, ``--reuse-only``
and ``--keep`` work as for the tables. It prints a Markdown table (one row
per combination: final personalised accuracy, zero-shot accuracy when the
runs onboard new clients, wall time; mean ± 2 sigma over the seeds) and one
JSON line with every seed's numbers.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ripple_flwr.experiments.compose import (
    PlanError,
    compose,
    defined_by,
    merge_defined,
    unapplied_note,
)
from ripple_flwr.experiments.executor import Outcome
from ripple_flwr.experiments.launch import (
    OneLineParser,
    add_execution_flags,
    add_set_flag,
    check_outputs,
    make_runner,
    prepare_server_env,
    run_config_value,
)
from ripple_flwr.experiments.runner import build_or_exit, write_json_line
from ripple_flwr.experiments.stamp import machine_stamp
from ripple_flwr.experiments.stats import fmt_stat
from ripple_flwr.runs.statistics import SPREAD, seed_stats

__all__ = ["build_parser", "grid_points", "main", "parse_grid", "point_name"]

Point = dict[str, Any]


# Keys a flag of the sweep owns: never a grid key (a grid value would be overridden).
FLAG_KEYS = {
    "seed": "give the seeds with --seeds {values} (each grid point runs at every seed)",
    "results-path": "--out names the folder; each run's file is named after its grid point",
}


def parse_grid(words: list[str]) -> dict[str, list[Any]]:
    """``['method=fedavg,ripple', 'alpha=0.01,0.1']`` as ``{key: [values]}`` (TOML values)."""
    grid: dict[str, list[Any]] = {}
    for word in " ".join(words).split():
        key, sep, raw = word.partition("=")
        if not sep or not key or not raw:
            raise ValueError(f"--grid wants KEY=V1,V2,... words, got {word!r}")
        if key in grid:
            raise ValueError(f"--grid names {key!r} twice")
        values = raw.split(",")
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ValueError(f"--grid {key}={raw} names {', '.join(twice)} twice")
        if key in FLAG_KEYS:
            fix = FLAG_KEYS[key].format(values=" ".join(raw.split(",")))
            raise ValueError(f"--grid {key}=... is refused: {fix}")
        grid[key] = [run_config_value(f"{key}={v}")[1] for v in raw.split(",")]
    return grid


def grid_points(grid: Mapping[str, list[Any]]) -> list[Point]:
    """Every combination of the grid's values, in the order the grid gives them."""
    keys = list(grid)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*grid.values())]


def point_name(point: Mapping[str, Any]) -> str:
    """A file-name-safe label of a grid point: ``method-fedavg_alpha-0.01``."""
    text = "_".join(f"{k}-{v:g}" if isinstance(v, float) else f"{k}-{v}" for k, v in point.items())
    return re.sub(r"[^A-Za-z0-9.=_+-]", "", text) or "default"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="ripple-sweep",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[2:]),
    )
    p.add_argument(
        "--grid", nargs="+", default=[], metavar="KEY=V1,V2", help="the keys and values to sweep"
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds of every point (0)")
    add_set_flag(p, "a run-config key for every run")
    p.add_argument("--out", default="", help="folder for the results files")
    p.add_argument("--reuse", action="store_true", help="read runs whose results file matches")
    p.add_argument("--reuse-only", action="store_true", help="read finished runs, train nothing")
    p.add_argument("--keep", default="", help="also keep each run's summary here (commit it)")
    p.add_argument("--md", default=None, help="the Markdown table (default: <out>/sweep.md)")
    p.add_argument("--json", default="", help="also write the JSON line to this file")
    add_execution_flags(p)
    return p


class Refused(ValueError):
    """A sweep whose runs cannot be planned: one line, exit 2 (as the tables and the map)."""


def plan(args: argparse.Namespace, out: Path) -> list[tuple[Point, int, dict[str, Any]]]:
    """(grid point, seed, run config) of every run; each config checked before anything runs."""
    from ripple_flwr.app.run_config import parse_run_config
    from ripple_flwr.settings import ConfigError

    fixed = dict(args.set)
    runs = []
    named: dict[str, Point] = {}
    for point in grid_points(args.grid_values) or [{}]:
        other = named.setdefault(point_name(point), point)
        if other != point:  # one results file for two runs: one would be lost, one mislabelled
            raise Refused(
                f"--grid points {other} and {point} get the same results file name "
                f"{point_name(point)!r} (values that differ beyond 6 digits, or only in "
                "characters a file name drops); give values that differ in their name"
            )
        for seed in args.seeds:
            name = f"{point_name(point)}-seed{seed}.json"
            try:
                defined = merge_defined(
                    defined_by(point, "--grid"),
                    defined_by({"seed": seed}, "the flag --seeds"),
                    defined_by({"results-path": str(out / name)}, "the flag --out"),
                )
                # A grid key a point's method does not read is left out of that point (the
                # title says so), as --set keys are.
                cfg = compose(defined, fixed, shared=point)
            except PlanError as err:
                raise Refused(str(err)) from None
            try:
                settings = parse_run_config({k: v for k, v in cfg.items() if k != "results-path"})
            except ConfigError as err:
                raise Refused(f"{point_name(point)} seed {seed}: {err}") from None
            if not settings.data.num_partitions:  # "the nodes that connect": none connect here
                raise Refused(
                    "every run needs its number of clients: "
                    "--set num-partitions=N (or put num-partitions in --grid)"
                )
            runs.append((point, seed, cfg))
    return runs


def summarise_points(
    runs: list[tuple[Point, int, dict[str, Any]]], got: Callable[[dict], dict | None]
) -> list[dict[str, Any]]:
    """Per grid point: every seed's final (and zero-shot) accuracy and wall time, with stats."""
    rows: dict[str, dict[str, Any]] = {}
    for point, seed, cfg in runs:
        row = rows.setdefault(point_name(point), {"point": point, "seeds": {}})
        row["seeds"][seed] = got(cfg)
    out = []
    for name, row in rows.items():
        done = {s: r for s, r in row["seeds"].items() if r is not None}
        zs = {s: (r.get("zero_shot") or {}).get("zero_shot_accuracy") for s, r in done.items()}
        out.append(
            {
                "name": name,
                "point": row["point"],
                "final_accuracy": seed_stats({s: r["final_accuracy"] for s, r in done.items()}),
                "zero_shot_accuracy": seed_stats(zs) if any(zs.values()) else None,
                "wall_seconds": seed_stats({s: r["wall_seconds"] for s, r in done.items()}),
                "seeds_missing": [s for s, r in row["seeds"].items() if r is None],
            }
        )
    return out


def ran(outcome: Outcome) -> dict[str, Any]:
    """Where and when one run of this invocation ran, and its task's start-up before round 1."""
    timings = (outcome.results or {}).get("timings") or {}
    setup = sum(float(timings.get(k) or 0.0) for k in ("data", "pretrain_or_load", "query"))
    return {
        "name": Path(outcome.path).name,
        "ray_node": outcome.ray_node,
        "node": outcome.machine.get("node"),
        "error": outcome.error,
        "seconds": outcome.run_end - outcome.run_start,
        # task start to its first round: imports, threads, data, router, the query round
        "to_first_round": outcome.run_start - outcome.task_start + setup,
    }


def markdown(args: argparse.Namespace, rows: list[dict[str, Any]]) -> str:
    keys = list(args.grid_values)
    zero_shot = any(r["zero_shot_accuracy"] for r in rows)
    fixed = ", ".join(f"{k}={v}" for k, v in dict(args.set).items()) or "the app's defaults"
    md = [
        f"Sweep over {', '.join(keys) or 'nothing'} ({fixed}), seeds "
        f"{', '.join(str(s) for s in args.seeds)}. Cells: {SPREAD}."
        + (f" Left out: {args.unapplied}." if getattr(args, "unapplied", "") else ""),
        "",
        "| "
        + " | ".join([*keys, "final acc. (%)", *(["zero-shot acc. (%)"] * zero_shot)])
        + " | wall (s) | seeds |",
        "|" + "---|" * (len(keys) + 3 + zero_shot),
    ]
    for r in rows:
        cells = [str(r["point"][k]) for k in keys]
        cells.append(fmt_stat(r["final_accuracy"], ".1f", 100))
        if zero_shot:
            cells.append(fmt_stat(r["zero_shot_accuracy"], ".1f", 100))
        cells.append(fmt_stat(r["wall_seconds"], ".0f"))
        n = len(args.seeds)
        cells.append(f"{n - len(r['seeds_missing'])}/{n}")
        md.append("| " + " | ".join(cells) + " |")
    return "\n".join(md)


def main(argv: list[str] | None = None, train: Callable[[dict], dict] | None = None) -> int:
    """Run (or read) every point of the grid at every seed; Markdown and one JSON line."""
    p = build_parser()
    args = p.parse_args(argv)
    check_outputs(args, p)
    if len(set(args.seeds)) != len(args.seeds):
        p.error(f"--seeds {' '.join(map(str, args.seeds))}: a seed given twice")
    try:
        args.grid_values = parse_grid(args.grid)
    except ValueError as err:
        p.error(str(err))
    out = Path(args.out or tempfile.mkdtemp(prefix="ripple-sweep-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    fixed = dict(args.set)
    prepare_server_env(out, str(fixed.get("checkpoint", "")), str(fixed.get("cache-dir", "")))
    try:
        runs = plan(args, out)
    except Refused as err:
        p.error(str(err))
    args.unapplied = unapplied_note(
        {**dict(args.set), **dict.fromkeys(args.grid_values)},
        {point_name(point): cfg for point, _, cfg in runs},
    )
    stamp = machine_stamp()
    runner = make_runner(args, p, out, stamp, train)

    def table(args, out, runner, stamp) -> list[dict[str, Any]]:
        return summarise_points(runs, lambda cfg: runner.get(cfg)[0])

    rows, stopped = build_or_exit("ripple-sweep", table, args, out, runner, stamp)
    if stopped is not None:  # a problem check_runs found (a missing checkpoint...), or Ctrl-C
        return stopped
    text = markdown(args, rows)
    md_path = Path(args.md or out / "sweep.md")
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(text + "\n")
    print(text, file=sys.stderr)
    line = json.dumps(
        {
            "sweep": args.grid_values,
            "set": dict(args.set),
            "left_out": getattr(args, "unapplied", ""),
            "seeds": args.seeds,
            "interval": SPREAD,
            "machine": stamp,
            "rows": rows,
            "failed": {Path(k).name: v for k, v in runner.failed.items()},
            "ran": [ran(o) for o in runner.outcomes],
            "missing": [Path(m).name for m in runner.missing],
            "markdown": str(md_path),
        },
        default=str,
    )
    print(line)
    write_json_line(line, args.json)
    return 1 if runner.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
