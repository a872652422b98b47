"""docs/which-method.md's blocks: the heterogeneity map and what each method costs.

Both read the committed results only: ``heterogeneity_map.json`` (written by
``ripple-map --json``) when it exists, and Table 1's JSON line for bytes and time.
"""

from __future__ import annotations

from ripple_flwr.cli import evidence as ev
from ripple_flwr.cli.evidence_table1 import TABLE1

MAP = "heterogeneity_map.json"


def heterogeneity_map() -> str:
    """The map's table and Ripple's margin per cell, or what is missing."""
    if not (ev.RESULTS / MAP).is_file():
        return (
            "**Not run yet.** No `docs/results/heterogeneity_map.json` is committed: the map "
            "(every cell x method x seed of `ripple-map`, 100 clients, 100 rounds) takes hours "
            "on one 2-core machine (Table 1's estimate in [sweeps.md](sweeps.md) gives the "
            "scale) and far less on a Ray cluster (`--ray-address auto`). The command is above; "
            "until it runs, the list at the top is all the evidence there is."
        )
    d = ev.load(MAP)
    total = sum(len(c["rows"]) for c in d["cells"].values()) * len(d["seeds"])
    missing = len(d.get("missing") or [])
    done = (
        f"all {total} runs done"
        if not missing
        else f"**{total - missing} of {total} runs done**: a cell whose runs are missing has "
        "no margin yet"
    )
    lines = [
        f"Fashion-MNIST, {d['base']['num-partitions']} clients, {d['rounds']} rounds, "
        f"{ev.seeds_text(d['seeds'])}; made on {d['machine']['node']} at "
        f"`{d['machine']['commit']}`. Ripple-Strat's margin over the best compared method "
        "(the oracle and Ripple-Unif not compared), points of accuracy, "
        f"{ev.interval(d['seeds'])}; {done} (every method's cell: "
        "[results/heterogeneity_map.md](results/heterogeneity_map.md)):",
        "",
        "| cell | training clients | new clients, zero-shot |",
        "|---|---|---|",
    ]
    for cell, entry in d["cells"].items():
        parts = []
        for metric in ("final_accuracy", "zero_shot_accuracy"):
            m = entry["margin"].get(metric)
            if not m or m.get("mean") is None:
                parts.append("n/a")
                continue
            sign = "+" if m["mean"] >= 0 else ""
            parts.append(f"{sign}{ev.cell(m)} vs {ev.label(m['best_other'])}")
        lines.append(f"| {cell} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def costs() -> str:
    """Bytes per round against FedAvg's and models held, per method (Table 1's runs)."""
    t = ev.load(TABLE1)
    rows = sorted(
        t["rows"].items(),
        key=lambda kv: (kv[1]["bytes_ratio_vs_fedavg"]["mean"] or 0.0, kv[0]),
    )
    lines = [
        f"From Table 1's runs ({t['dataset']}, {t['clients']} clients, {t['rounds']} rounds, "
        f"{ev.seeds_text(t['seeds'])}): bytes sent and received per round against "
        "FedAvg's, models the server holds, and wall time of one run on a 2-core CPU (the "
        "kept wall times mix two machines and loads: compare them within a factor of two; a "
        "Ripple run that pre-trained its router, rather than reading it from the cache, counts "
        "that time too).",
        "",
        "| method | bytes / round vs FedAvg | models held | wall per run (s) |",
        "|---|---|---|---|",
    ]
    for name, row in rows:
        models = "/".join(str(m) for m in sorted(set(row["models"].values()))) or "n/a"
        wall = ev.plain(row["wall_seconds"], ".0f")
        lines.append(
            f"| {ev.label(name)} | {ev.plain(row['bytes_ratio_vs_fedavg'], '.2f')} | "
            f"{models} | {wall} |"
        )
    return "\n".join(lines)
