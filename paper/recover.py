"""Rebuild the kept run summaries of a Table 1 from its JSON, when the results files are gone.

A table's JSON keeps every seed's numbers and curve, which is all a run's
summary holds (``stats.summarise``). This writes one summary per
finished run into the ``--keep`` folder, with the settings the same table
command would give that run, so ``ripple-tables ... --reuse --keep DIR`` carries
on from them. Each summary names the table file it came from; a summary
already in the folder is never replaced.

    python -m paper.recover docs/results/table1_fashion_300rounds_3seeds.json \\
        --keep docs/results/runs/table1-fashion-mnist -- table1 --rounds 300 --sweep-k
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from paper.rows import run_name
from paper.table_one import table1_config
from paper.tables import parse
from ripple_flwr.experiments.runner import summary_text
from ripple_flwr.experiments.stats import SUMMARY

__all__ = ["recovered_summaries", "main"]


def _summary(cfg: dict[str, Any], source: str, **numbers: Any) -> dict[str, Any]:
    return {"kind": SUMMARY, "settings": dict(cfg), "recovered_from": source, **numbers}


def recovered_summaries(
    table: dict[str, Any], args: argparse.Namespace, source: str
) -> dict[str, dict[str, Any]]:
    """{results name: summary} of every finished run in a Table 1 JSON (rows and K sweep)."""
    if table.get("table") != "table1" or args.table != "table1":
        raise SystemExit(f"{source}: only a Table 1 JSON can be recovered (table1 ...)")
    for key in ("dataset", "rounds", "clients", "label_kind"):
        if table.get(key) != getattr(args, key):
            raise SystemExit(
                f"{source} has {key} = {table.get(key)!r}, the command gives "
                f"{getattr(args, key)!r}: give the flags the table was built with"
            )
    out: dict[str, dict[str, Any]] = {}
    keep = Path(".")
    for row, cell in table["rows"].items():
        curves = table["curves"].get(row, {})
        for seed in cell.get("seeds_done", []):
            s = str(seed)
            cfg = table1_config(args, keep, row, seed, cell["k"], args.rounds)
            acc = curves.get("per_seed", {}).get(s)
            numbers = {
                key: cell[key]["per_seed"].get(s)
                for key in ("final_accuracy", "bytes_ratio_vs_fedavg", "ari_hard", "ari_all")
            }
            out[run_name(row, cell["k"], args.rounds, seed)] = _summary(
                cfg,
                source,
                curve={"rounds": curves["rounds"], "accuracy": acc} if acc else None,
                ari_when=cell.get("ari_when", ""),
                wall_seconds=cell["wall_seconds"]["per_seed"].get(s),
                models=cell["models"].get(s),
                **numbers,
            )
    sweep = table.get("sweep") or {}
    for row, entry in (sweep.get("methods") or {}).items():
        for k, by_k in entry["by_k"].items():
            for s, final in by_k["final_accuracy"]["per_seed"].items():
                cfg = table1_config(args, keep, row, int(s), int(k), sweep["rounds"])
                name = run_name(row, int(k), sweep["rounds"], int(s))
                out[name] = _summary(cfg, source, curve=None, final_accuracy=final)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    head, rest = argv[:cut], argv[cut + 1 :]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("table_json", help="a table's JSON file (ripple-tables --json)")
    p.add_argument("--keep", required=True, help="the folder of kept summaries")
    own = p.parse_args(head)
    args = parse(rest)
    source = Path(own.table_json)
    table = json.loads(source.read_text().strip().splitlines()[-1])
    keep = Path(own.keep)
    keep.mkdir(parents=True, exist_ok=True)
    written = 0
    for name, summary in recovered_summaries(table, args, source.name).items():
        target = keep / name
        if target.exists():
            continue  # a summary of the run itself wins over one rebuilt from a table
        target.write_text(summary_text(summary))
        written += 1
    print(f"{written} summaries written to {keep} from {source}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
