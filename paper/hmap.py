"""The heterogeneity map: where each method wins, shift by shift and strength by strength.

Every cell is one kind and strength of heterogeneity on Fashion-MNIST (100
clients x 200 images, 10 a round, the paper's CNN, ``--rounds`` rounds);
every row one method; each run also onboards 10 new clients drawn like the
training ones and scores them zero-shot (Ripple by one router pass, the
clustered baselines by the cluster model of lowest loss on the client's own
training split, the global methods with their one model, as Table 2). Per
cell: every method's final personalised accuracy of the training clients
and the new clients' zero-shot accuracy (mean ± 2 sigma over the seeds), and
Ripple-Strat's margin over the best other method (not the oracle, which
knows every client's true mixture), per seed, with its interval.

    ripple-map --seeds 42 7 123 --rounds 100 --reuse --out outputs/map \\
        --keep docs/results/runs/heterogeneity-map \\
        --md docs/results/heterogeneity_map.md --json docs/results/heterogeneity_map.json \\
        --plot docs/heterogeneity-map.png

Runs go through the tables' engine (``--jobs``, ``--ray-address``, ``--reuse``,
``--keep`` as in docs/sweeps.md), named ``<cell>-<row>-r<rounds>-seed<s>.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from paper.rows import flags, left_out
from paper.variants import map_rows
from ripple_flwr.experiments.compose import compose, defined_by
from ripple_flwr.experiments.launch import (
    OneLineParser,
    add_execution_flags,
    add_set_flag,
    check_outputs,
    make_runner,
    prepare_server_env,
)
from ripple_flwr.experiments.runner import Runner, build_or_exit, write_json_line
from ripple_flwr.experiments.stamp import machine_stamp
from ripple_flwr.experiments.stats import fmt_stat
from ripple_flwr.runs.statistics import PAIRED, SPREAD, fmt_paired, paired, seed_stats

__all__ = ["CELLS", "ROWS", "main", "map_table"]

ROW_KEYS = "rows"  # a cell's keys for one method's rows only (IFCA at the true K)
# The kinds and strengths of heterogeneity (the shared protocol is BASE).
CELLS: dict[str, dict[str, Any]] = {
    "label-skew-0.01": {"alpha": 0.01},
    "label-skew-0.1": {"alpha": 0.1},
    "label-skew-1": {"alpha": 1.0},
    # Client sizes varying about 10x (log-uniform around 200, the same rows in all), Dir(0.1).
    "quantity-skew": {"alpha": 0.1, "partition-size-spread": 10.0},
    # Four rotations as the domains: clients Dir(0.1) over them, classes mixed; K = 4.
    "rotation": {
        "dataset": "rotated-fashion-mnist",
        "alpha": 0.1,
        "label-kind": "domain",
        "num-components": 4,
    },
    # Both at once: clients Dir(0.1) over the 40 (rotation, class) pairs, so a client
    # holds few classes in few rotations; the clusters follow the pair, K = 40.
    "label-and-rotation": {
        "dataset": "rotated-fashion-mnist",
        "alpha": 0.1,
        "label-kind": "joint",
        "num-components": 40,
    },
    # Concept shift, rotation's twin: the same protocol, but the four groups share their
    # images and differ in their labels (each its own fixed permutation of the classes), so
    # nothing computed from the images alone tells them apart; K = 4.
    "concept-shift": {
        "dataset": "permuted-fashion-mnist",
        "alpha": 0.1,
        "label-kind": "domain",
        "num-components": 4,
    },
    # Concept shift per client as FedRC's Fashion-MNIST (LINs-lab/FedRC): Dir(0.5) label skew,
    # each client (new ones too) one concept: labels kept (60%), y -> C-1-y or y -> y+1 mod C
    # (20% each). The routers' K follows the classes; IFCA runs at the true K = 3 concepts.
    "concept-per-client": {
        "alpha": 0.5,
        "client-concepts": "fedrc",
        ROW_KEYS: {"ifca": {"num-components": 3}},
    },
}
BASE = {
    "dataset": "fashion-mnist",
    "num-partitions": 100,
    "partition-size": 200,
    "aux-size": 1000,
    "clients-per-round": 10,
    "label-kind": "class",
    "num-components": 10,
    # 50 new clients of 500 images: 100 test images each, 5,000 in all, so one zero-shot
    # figure's sampling error is about 0.4 points (10 x 40 gave about 2.3).
    "new-clients": 50,
    "new-partition-size": 500,
}
# Every method whose registry entry lists "map"; Ripple's own choices as four rows: router
# (the GMM-VAE each run pre-trains; mean unmixing, training-free) x sampler.
ROWS: dict[str, dict[str, Any]] = map_rows()
# Ripple's rows: the paper's method (router x sampler) and with a server optimiser per cluster.
RIPPLE = (
    "ripple-strat",
    "ripple-unif",
    "ripple-strat-mu",
    "ripple-unif-mu",
    "ripple-strat-yogi",
    "ripple-unif-yogi",
    "ripple-rec",
)
# Rows added after the map over federations first ran (issue 48): each is also compared, paired,
# with the best of the paper's Ripple variants and the best other row, neither counting itself.
ADDITIONS = ("pacfl", "fedgwc", "ripple-strat-yogi", "ripple-unif-yogi", "ripple-rec")
# The paper's Ripple (its averaging rule, router x sampler): the headline margin's Ripple side,
# so that an option beyond the paper (a server optimiser per cluster) never hides how the
# paper's method fares; those rows get their own paired margins (``addition_margins``).
PAPER_RIPPLE = tuple(r for r in RIPPLE if r not in ADDITIONS)
NOT_COMPARED = ("oracle",)  # it knows pi*: a reference, never a rival
# The router comparison: mean unmixing against the GMM-VAE, at each sampler.
ROUTER_PAIRS = {
    "stratified": ("ripple-strat-mu", "ripple-strat"),
    "uniform": ("ripple-unif-mu", "ripple-unif"),
}
METRICS = ("final_accuracy", "zero_shot_accuracy")


FLAG_OF = {
    "seed": "--seeds",
    "data-seed": "--seeds (a map seed draws the whole federation)",
    "num-server-rounds": "--rounds",
    "eval-every": "--eval-every",
    "results-path": "--out",
}


def protocol(args: argparse.Namespace) -> dict[str, Any]:
    """The shared protocol as the runs use it: ``BASE``, with what ``--set`` changes of it."""
    return {**BASE, **{k: v for k, v in dict(args.set).items() if k in BASE}}


def cell_keys(cell: str, row: str) -> dict[str, Any]:
    """What a cell sets for one row: its keys, with those it gives the row's method alone."""
    keys = {k: v for k, v in CELLS[cell].items() if k != ROW_KEYS}
    return {**keys, **CELLS[cell].get(ROW_KEYS, {}).get(ROWS[row]["method"], {})}


def run_config(args: argparse.Namespace, out: Path, cell: str, row: str, seed: int) -> dict:
    """One run of the map: the protocol, the cell's shift, the row's method, the seed.

    ``--set`` changes the protocol or adds keys; a key the cell, the row or a flag sets
    is refused (:func:`~ripple_flwr.experiments.compose.compose`).
    """
    alpha = CELLS[cell].get("alpha", BASE.get("alpha"))
    defined = {
        **defined_by(cell_keys(cell, row), f"cell {cell!r} (choose cells with --cells)"),
        **defined_by(ROWS[row], f"row {row!r} (choose rows with --methods)"),
        # New clients drawn as the training ones; Ripple also reports its best cluster model.
        **defined_by(
            {"alpha-new": alpha, "best-by-loss": ROWS[row]["method"] == "ripple"}, "the map"
        ),
        **flags(
            {
                "seed": seed,
                # The seed draws the federation too: partitions, D_aux, splits, new clients.
                "data-seed": seed,
                "num-server-rounds": args.rounds,
                "eval-every": args.eval_every,
                "results-path": str(out / f"{cell}-{row}-r{args.rounds}-seed{seed}.json"),
            },
            FLAG_OF,
        ),
    }
    return compose(defined, dict(args.set), BASE)


def _numbers(summary: Mapping[str, Any] | None) -> dict[str, float | None] | None:
    if summary is None:
        return None
    zs = (summary.get("zero_shot") or {}).get("zero_shot_accuracy")
    return {"final_accuracy": summary["final_accuracy"], "zero_shot_accuracy": zs}


def _best(rows: Mapping[str, Mapping[str, Any]], names: list[str], metric: str) -> str | None:
    means = {r: rows[r][metric]["mean"] for r in names if rows[r][metric]["mean"] is not None}
    return max(means, key=means.get) if means else None


def margin(rows: Mapping[str, Mapping[str, Any]], metric: str) -> dict[str, Any] | None:
    """The best of the paper's Ripple variants minus the best other row (each by mean, Ripple's
    other rows never an "other"), paired per seed."""
    mine = _best(rows, [r for r in rows if r in PAPER_RIPPLE], metric)
    best = _best(rows, [r for r in rows if r not in RIPPLE and r not in NOT_COMPARED], metric)
    if mine is None or best is None:
        return None
    diff = paired(rows[mine][metric]["per_seed"], rows[best][metric]["per_seed"])
    return {"ripple": mine, "best_other": best, **diff}


def addition_margins(rows: Mapping[str, Mapping[str, Any]], metric: str) -> dict[str, Any]:
    """Each added row against the best of the paper's Ripple variants and the best other row
    (not Ripple), paired per seed; neither side counts the row itself, nor the oracle."""
    out: dict[str, Any] = {}
    for name in ADDITIONS:
        if name not in rows or rows[name][metric]["mean"] is None:
            continue
        others = [r for r in rows if r != name and r not in NOT_COMPARED]
        ripple = _best(rows, [r for r in others if r in PAPER_RIPPLE], metric)
        other = _best(rows, [r for r in others if r not in RIPPLE], metric)
        out[name] = {
            side: None
            if best is None
            else {
                "against": best,
                **paired(rows[name][metric]["per_seed"], rows[best][metric]["per_seed"]),
            }
            for side, best in (("ripple", ripple), ("other", other))
        }
    return out


def router_comparison(rows: Mapping[str, Mapping[str, Any]], metric: str) -> dict[str, Any]:
    """Mean unmixing minus the GMM-VAE router, paired per seed, at each sampler the map ran."""
    return {
        sampling: paired(rows[mu][metric]["per_seed"], rows[gmm][metric]["per_seed"])
        for sampling, (mu, gmm) in ROUTER_PAIRS.items()
        if mu in rows and gmm in rows
    }


def map_table(
    args: argparse.Namespace, out: Path, runner: Runner, stamp: dict | None
) -> dict[str, Any]:
    """Every cell x row over the seeds; margins; Markdown and (unless planning) the figure."""
    cells: dict[str, dict[str, Any]] = {}
    for cell in args.cells:
        rows: dict[str, Any] = {}
        for row in args.methods:
            if cell not in getattr(args, "row_cells", {}).get(row, [cell]):
                continue  # the protocol runs this row in some cells only
            now = row in (args.train_only or args.methods)
            got = {
                s: _numbers(runner.get(run_config(args, out, cell, row, s), train=now)[0])
                for s in args.seeds
            }
            done = {s: n for s, n in got.items() if n is not None}
            rows[row] = {m: seed_stats({s: n[m] for s, n in done.items()}) for m in METRICS}
            rows[row]["seeds_missing"] = [s for s, n in got.items() if n is None]
        cells[cell] = {
            "rows": rows,
            "margin": {m: margin(rows, m) for m in METRICS},
            "router": {m: router_comparison(rows, m) for m in METRICS},
            "additions": {m: addition_margins(rows, m) for m in METRICS},
        }
        record = getattr(args, "protocol_record", None)
        if record is not None:
            cells[cell]["protocol"] = protocol_verdicts(rows, record["comparisons"])
    if stamp is not None and args.plot:
        from paper.plots import margin_figure, save

        title = f"Ripple's margin, {args.rounds} rounds, federation seeds {args.seeds}"
        save(margin_figure(cells, METRICS, title, stamp), args.plot)
    return {
        "cells": cells,
        "missing": [Path(m).name for m in runner.missing],
        "markdown": markdown(args, cells),
    }


def protocol_verdicts(
    rows: Mapping[str, Mapping[str, Any]], comparisons: Mapping[str, list[str]]
) -> dict[str, Any]:
    """The protocol's comparisons in one cell, each paired per seed over the seeds both rows
    have (:func:`~ripple_flwr.runs.statistics.paired`: < 3 shared seeds, no verdict)."""
    out: dict[str, Any] = {}
    for row, rivals in comparisons.items():
        for rival in rivals:
            if row not in rows or rival not in rows:
                continue  # one of them is not run in this cell (row_cells)
            out[f"{row} - {rival}"] = {
                m: paired(rows[row][m]["per_seed"], rows[rival][m]["per_seed"]) for m in METRICS
            }
    return out


def _margin_text(m: Mapping[str, Any] | None) -> str:
    if m is None or m["mean"] is None:
        return "n/a"
    return f"{m['ripple']} {fmt_paired(m)} vs {m['best_other']}: {m['verdict']}"


def router_text(r: Mapping[str, Any]) -> str:
    done = {s: p for s, p in r.items() if p.get("n")}
    return "; ".join(f"{s}: {fmt_paired(p)} {p['verdict']}" for s, p in done.items()) or "n/a"


def markdown(args: argparse.Namespace, cells: Mapping[str, Mapping[str, Any]]) -> str:
    """One row per cell and method: training and zero-shot accuracy; then the margins."""
    base = protocol(args)
    new_size = base.get("new-partition-size") or base["partition-size"]
    md = [
        f"Heterogeneity map: Fashion-MNIST, {base['num-partitions']} clients x "
        f"{base['partition-size']} images, {base['clients-per-round']} a round, "
        f"{args.rounds} rounds, {base['new-clients']} new clients of {new_size} images per "
        f"run; federation seeds {', '.join(map(str, args.seeds))} (each seed draws the "
        "partitions, D_aux, the splits and the new clients, and seeds the training). Accuracy "
        f"(%), training clients / new clients zero-shot; cells: {SPREAD}."
        + left_out({k: v for k, v in dict(args.set).items() if k not in BASE}, ROWS, args.methods),
        "",
        "| cell | " + " | ".join(args.methods) + " |",
        "|---|" + "---|" * len(args.methods),
    ]
    for cell, entry in cells.items():
        parts = []
        for row in args.methods:
            if row not in entry["rows"]:
                parts.append("not in this cell")
                continue
            r = entry["rows"][row]
            text = " / ".join(fmt_stat(r[m], ".1f", 100) for m in METRICS)
            parts.append(text if r["final_accuracy"]["n"] else "missing")
        md.append(f"| {cell} | " + " | ".join(parts) + " |")
    md += [
        "",
        f"The best Ripple variant against the best other method (the oracle aside), and mean "
        f"unmixing against the GMM-VAE router; points, {PAIRED} (seeds ahead / n).",
        "",
        "| cell | margin, training | margin, zero-shot | router, training | router, zero-shot |",
        "|---|---|---|---|---|",
    ]
    for cell, entry in cells.items():
        margins = [_margin_text(entry["margin"][m]) for m in METRICS]
        routers = [router_text(entry["router"][m]) for m in METRICS]
        md.append(f"| {cell} | " + " | ".join(margins + routers) + " |")
    added = [
        (cell, name, entry["additions"])
        for cell, entry in cells.items()
        for name in ADDITIONS
        if any(name in entry["additions"][m] for m in METRICS)
    ]
    if added:
        md += [
            "",
            f"The rows added later, each against the best of the paper's Ripple variants and "
            f"the best other method (neither counting the row itself); points, {PAIRED} "
            "(seeds ahead / n).",
            "",
            "| cell | row | vs Ripple, training | vs Ripple, zero-shot | vs others, training "
            "| vs others, zero-shot |",
            "|---|---|---|---|---|---|",
        ]
        for cell, name, adds in added:
            texts = [
                _addition_text(adds[m].get(name, {}).get(side))
                for side in ("ripple", "other")
                for m in METRICS
            ]
            md.append(f"| {cell} | {name} | " + " | ".join(texts) + " |")
    record = getattr(args, "protocol_record", None)
    if record is not None:
        md += [
            "",
            f"Pre-registered comparisons (protocol `{record['name']}`, committed in "
            f"{(record['commit'] or 'no commit')[:12]}, sha256 {record['sha256'][:12]}): "
            f"points, {PAIRED}, over the seeds both rows have.",
            "",
            "| cell | comparison | training | zero-shot |",
            "|---|---|---|---|",
        ]
        for cell, entry in cells.items():
            for name, by_metric in entry.get("protocol", {}).items():
                texts = [_protocol_text(by_metric[m]) for m in METRICS]
                md.append(f"| {cell} | {name} | " + " | ".join(texts) + " |")
    return "\n".join(md)


def _protocol_text(p: Mapping[str, Any]) -> str:
    if not p.get("n"):
        return "n/a"
    return f"{fmt_paired(p)}: {p['verdict']}"  # fmt_paired names seeds on one side only


def _addition_text(p: Mapping[str, Any] | None) -> str:
    if not p or p.get("mean") is None:
        return "n/a"
    return f"{fmt_paired(p)} vs {p['against']}: {p['verdict']}"


DEFAULTS = {"cells": list(CELLS), "methods": list(ROWS), "seeds": [42, 7, 123], "rounds": 100}
PROTOCOL_KEYS = ("name", "seeds", "development_seeds", "rounds", "cells", "rows", "comparisons")


# What a protocol that ``extends`` another may add; the rest is its base's, unchanged.
EXTENSION_KEYS = ("name", "purpose", "extends", "rows", "comparisons", "row_cells")


def _extended(path: Path, ext: dict[str, Any]) -> dict[str, Any]:
    """``ext`` over its base (``extends``: a protocol file beside it): the base's cells,
    seeds, rounds and comparisons unchanged, ``ext``'s rows added, each with its own
    comparisons (every added comparison names an added row: comparing two rows whose runs
    already exist is not pre-registration)."""
    stray = sorted(set(ext) - set(EXTENSION_KEYS))
    if stray:
        raise ValueError(
            f"protocol {path} extends {ext['extends']!r}: it may add rows and their "
            f"comparisons only, not {', '.join(stray)} (a new protocol file changes those)"
        )
    base_path = path.parent / f"{ext['extends']}.json"
    base = load_protocol(base_path)
    added = list(ext.get("rows") or [])
    again = sorted(set(added) & set(base["rows"]))
    if again or not added:
        raise ValueError(
            f"protocol {path}: an extension adds rows not in {base['name']} "
            + (f"(it repeats {', '.join(again)})" if again else "(it adds none)")
        )
    comparisons = {row: list(rivals) for row, rivals in base["comparisons"].items()}
    for row, rivals in (ext.get("comparisons") or {}).items():
        old = [r for r in rivals if row not in added and r not in added]
        if old:
            raise ValueError(
                f"protocol {path}: compares {row} with {', '.join(old)}, rows of "
                f"{base['name']} alone; an extension's comparisons name one of its rows"
            )
        comparisons[row] = comparisons.get(row, []) + [
            r for r in rivals if r not in comparisons.get(row, [])
        ]
    return {
        **base,
        "name": ext["name"],
        "purpose": ext.get("purpose", ""),
        "rows": base["rows"] + added,
        "comparisons": comparisons,
        "row_cells": {**base.get("row_cells", {}), **ext.get("row_cells", {})},
        # Root first: each file of the chain, and the rows it added (an extension may be
        # extended in turn).
        "chain": [*base["chain"], {"name": ext["name"], "path": path, "rows": added}],
    }


def load_protocol(path: Path) -> dict[str, Any]:
    """A protocol file, checked: its cells and rows exist, its seeds are fresh (none of its
    development seeds), at least 3, distinct; every compared row is one of its rows; a row
    limited to some cells (``row_cells``) names cells of the protocol. A file that
    ``extends`` another adds rows to it (:func:`_extended`)."""
    try:
        proto = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"protocol {path}: cannot read it as JSON ({err})") from None
    if isinstance(proto, dict) and "extends" in proto:
        proto = _extended(path, proto)
    elif isinstance(proto, dict):
        proto = {**proto, "chain": [{"name": proto.get("name"), "path": path, "rows": None}]}
    missing = [k for k in PROTOCOL_KEYS if k not in proto]
    if missing:
        raise ValueError(f"protocol {path} lacks {', '.join(missing)}")
    unknown = [c for c in proto["cells"] if c not in CELLS]
    unknown += [r for r in proto["rows"] if r not in ROWS]
    if unknown:
        raise ValueError(f"protocol {path} names no cell or row {', '.join(unknown)}")
    seeds = proto["seeds"]
    if len(set(seeds)) != len(seeds) or len(seeds) < 3:
        raise ValueError(f"protocol {path}: seeds {seeds} must be 3 or more, distinct")
    used = sorted(set(seeds) & set(proto["development_seeds"]))
    if used:
        raise ValueError(f"protocol {path}: seeds {used} are development seeds, not fresh ones")
    for row, rivals in proto["comparisons"].items():
        stray = [r for r in [row, *rivals] if r not in proto["rows"]]
        if stray:
            raise ValueError(f"protocol {path}: compares {', '.join(stray)}, not among its rows")
    for row, cells in proto.get("row_cells", {}).items():
        stray = [c for c in cells if c not in proto["cells"]] + (
            [] if row in proto["rows"] else [row]
        )
        if stray or not cells:
            raise ValueError(f"protocol {path}: row_cells of {row} names {stray or 'no cell'}")
    return proto


def _commit_of(path: Path) -> str | None:
    """The commit that last changed ``path`` (None: not committed, or no git)."""
    import subprocess

    try:
        done = subprocess.run(
            ["git", "log", "-1", "--format=%H", "--", path.name],
            cwd=path.parent,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def apply_protocol(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    """``--protocol``: the file's cells, rows, seeds and rounds (flags for them refused);
    without it, the flags or their defaults."""
    args.protocol_record, args.row_cells = None, {}
    if not args.protocol:
        for key, value in DEFAULTS.items():
            if getattr(args, key) is None:
                setattr(args, key, value)
        return
    given = [f"--{k}" for k in DEFAULTS if getattr(args, k) is not None]
    if given:
        p.error(f"--protocol fixes the runs; drop {', '.join(given)} (a new protocol file adds)")
    path = Path(args.protocol).expanduser().resolve()
    try:
        proto = load_protocol(path)
    except ValueError as err:
        p.error(str(err))
    args.cells, args.methods = list(proto["cells"]), list(proto["rows"])
    args.seeds, args.rounds = list(proto["seeds"]), int(proto["rounds"])
    args.row_cells = dict(proto.get("row_cells", {}))
    args.protocol_record = {
        "name": proto["name"],
        "path": _shown(path),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "commit": _commit_of(path),
        "comparisons": proto["comparisons"],
        **({"row_cells": args.row_cells} if args.row_cells else {}),
    }
    if len(proto["chain"]) > 1:  # the files it extends, root first, and what each added
        args.protocol_record["chain"] = [
            {
                "name": link["name"],
                "path": _shown(link["path"]),
                "sha256": hashlib.sha256(link["path"].read_bytes()).hexdigest(),
                "commit": _commit_of(link["path"]),
                "rows_added": link["rows"],
            }
            for link in proto["chain"]
        ]


def _shown(path: Path) -> str:
    """``path`` relative to the working folder when inside it (a results file names no
    machine's home), else as it is."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="ripple-map",
        description=__doc__.splitlines()[0],
        epilog="Cells: "
        + "; ".join(f"{c}: {', '.join(f'{k}={v}' for k, v in s.items())}" for c, s in CELLS.items())
        + ". --set KEY=VALUE changes the shared protocol or adds a key; a key a cell, a row or "
        "a flag sets (alpha, method, num-server-rounds, ...) is refused.",
    )
    p.add_argument(
        "--protocol",
        default="",
        help="a pre-registered protocol file (paper/protocols/*.json): its cells, rows, seeds, "
        "rounds and comparisons; --cells, --methods, --seeds and --rounds are then refused",
    )
    p.add_argument("--cells", nargs="+", choices=list(CELLS), help="default: all")
    p.add_argument("--methods", nargs="+", choices=list(ROWS), help="default: all rows")
    p.add_argument("--seeds", type=int, nargs="+", help="default: 42 7 123")
    p.add_argument("--rounds", type=int, help="rounds of every run (100)")
    p.add_argument(
        "--train-only",
        nargs="+",
        default=None,
        metavar="ROW",
        help="train only these rows' runs now (contenders first); the other rows' runs are "
        "read where finished or kept, else listed as missing, and no verdict uses them",
    )
    p.add_argument("--eval-every", type=int, default=10, help="evaluate every N rounds (10)")
    add_set_flag(p, "a run-config key for every run (e.g. --set checkpoint=...)")
    p.add_argument("--out", default="", help="folder for the results files (default: a temp)")
    p.add_argument("--reuse", action="store_true", help="read runs whose results file matches")
    p.add_argument("--reuse-only", action="store_true", help="read finished runs, train nothing")
    p.add_argument("--keep", default="", help="also keep each run's summary here (commit it)")
    p.add_argument("--md", default=None, help="the Markdown table (default: <out>/map.md)")
    p.add_argument("--json", default="", help="also write the JSON line to this file")
    p.add_argument("--plot", default=None, help="the margin figure (default: <out>/map.png)")
    add_execution_flags(p)
    return p


def main(argv: list[str] | None = None, train: Callable[[dict], dict] | None = None) -> int:
    """Run (or read) the map; Markdown, the margin figure and one JSON line."""
    p = build_parser()
    args = p.parse_args(argv)
    apply_protocol(args, p)
    check_outputs(args, p)
    if len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0:
        p.error(f"--seeds {' '.join(map(str, args.seeds))}: distinct seeds >= 0, each a federation")
    for flag in ("methods", "cells"):
        given = getattr(args, flag, None) or []
        twice = sorted({v for v in given if given.count(v) > 1})
        if twice:
            p.error(f"--{flag} names {', '.join(twice)} twice")
    stray = sorted(set(args.train_only or ()) - set(args.methods))
    if stray:
        p.error(
            f"--train-only {' '.join(stray)}: not among the map's rows {' '.join(args.methods)}"
        )
    for flag in ("rounds", "eval_every"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} {getattr(args, flag)}: must be >= 1")
    out = Path(args.out or tempfile.mkdtemp(prefix="ripple-map-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    args.plot = str(out / "map.png") if args.plot is None else args.plot
    prepare_server_env(out, str(dict(args.set).get("checkpoint", "")))
    stamp = machine_stamp()
    runner = make_runner(args, p, out, stamp, train, FLAG_OF)
    result, stopped = build_or_exit("ripple-map", map_table, args, out, runner, stamp)
    if stopped is not None:
        return stopped
    md_path = Path(args.md or out / "map.md")
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(result["markdown"] + "\n")
    print(result["markdown"], file=sys.stderr)
    line = json.dumps(
        {
            "map": "heterogeneity",
            "base": protocol(args),
            "set": dict(args.set),
            "cells_settings": {c: CELLS[c] for c in args.cells},
            "rows": {r: ROWS[r] for r in args.methods},
            "rounds": args.rounds,
            "seeds": args.seeds,
            "interval": SPREAD,
            "machine": stamp,
            **({"protocol": args.protocol_record} if args.protocol else {}),
            **{k: v for k, v in result.items() if k != "markdown"},
            "failed": {Path(k).name: v for k, v in runner.failed.items()},
            "markdown": str(md_path),
            "plot": args.plot or None,
        }
    )
    print(line)
    write_json_line(line, args.json)
    return 1 if runner.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
