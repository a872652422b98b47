"""docs/which-method.md's blocks: the heterogeneity map and what each method costs.

Both read the committed results only: ``heterogeneity_map.json`` (written by
``ripple-map --json``) when it exists, and Table 1's JSON line for bytes and time.
"""

from __future__ import annotations

from paper import evidence as ev
from paper.evidence_table1 import TABLE1
from ripple_flwr.runs.statistics import paired

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
        else f"**{total - missing} of {total} runs done**: a cell with seeds missing shows the "
        "seeds it has"
    )
    lines = [
        f"Fashion-MNIST, {d['base']['num-partitions']} clients, {d['rounds']} rounds, "
        f"{ev.seeds_text(d['seeds'])}; assembled on {d['machine']['node']} at "
        f"`{d['machine']['commit']}`, {ev.runs_made_on('heterogeneity-map')}. "
        "Ripple-Strat's margin over the best compared method "
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
            short = f" (seed {', '.join(m['per_seed'])} only)" if m["n"] < len(d["seeds"]) else ""
            parts.append(f"{sign}{ev.cell(m)} vs {ev.label(m['best_other'])}{short}")
        lines.append(f"| {cell} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


_WHO = {"final_accuracy": "training clients", "zero_shot_accuracy": "new clients, zero-shot"}
RIPPLE_ROW = "ripple-strat"


def _verdict(rows: dict, margin: dict | None, metric: str) -> str:
    """Who leads one cell's metric and by how much, and whether the interval says so."""
    if not margin or margin.get("mean") is None:
        return f"{_WHO[metric]}: not measured"
    other = margin["best_other"]
    m, sigma, n = margin["mean"], margin.get("sigma"), margin["n"]
    if m >= 0:
        lead = (
            f"Ripple-Strat {ev.cell(rows[RIPPLE_ROW][metric])}, {ev.cell(margin)} points over "
            f"{ev.label(other)}"
        )
    else:
        flipped = {**margin, "mean": -m}
        lead = (
            f"{ev.label(other)} {ev.cell(rows[other][metric])}, {ev.cell(flipped)} points over "
            "Ripple-Strat"
        )
    p = paired(margin["per_seed"], {s: 0.0 for s in margin["per_seed"]})
    if n < 2 or sigma is None:
        clear = f" (seed {', '.join(margin['per_seed'])} only: no interval)"
    else:
        verdict = {"leads": "a lead", "trails": "a lead", "no clear winner": "no clear winner"}
        clear = f" (paired t 95% interval ± {100 * p['half']:.1f}: {verdict[p['verdict']]})"
    return f"{_WHO[metric]}: {lead}{clear}"


def map_advice() -> str:
    """Per cell of the map: who leads, by how much, and whether the seeds' interval agrees."""
    if not (ev.RESULTS / MAP).is_file():
        return "**Not run yet**: no `docs/results/heterogeneity_map.json` is committed."
    d = ev.load(MAP)
    lines = []
    for cell, entry in d["cells"].items():
        parts = [_verdict(entry["rows"], entry["margin"].get(m), m) for m in _WHO]
        lines.append(f"- **{cell}**: " + "; ".join(parts) + ".")
    lines += [
        "",
        f"Leaders among the compared methods (the oracle and Ripple-Unif aside), "
        f"{d['rounds']} rounds, {ev.seeds_text(d['seeds'])}, accuracy in %; "
        f"{ev.interval(d['seeds'])}.",
    ]
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


# The map's label-skew 0.1 cell is Table 1's protocol at 100 rounds: its rows beside Table 1's.
SAME_PROTOCOL_CELL = "label-skew-0.1"
TABLE1_ROW = {"ripple-strat": "ripple-strat-gmm-vae", "ripple-unif": "ripple-unif-gmm-vae"}


def _order(values: dict[str, float]) -> list[str]:
    return sorted(values, key=lambda n: -values[n])


def _same_cell(d: dict, t: dict) -> tuple[dict[str, float], dict[str, float]]:
    """The cell's training accuracy (%) per method at the map's length and Table 1's."""
    at100, at300 = {}, {}
    for name, row in d["cells"][SAME_PROTOCOL_CELL]["rows"].items():
        other = t["rows"].get(TABLE1_ROW.get(name, name))
        if row["final_accuracy"].get("mean") is None or other is None:
            continue
        at100[name] = 100 * row["final_accuracy"]["mean"]
        at300[name] = 100 * other["final_accuracy"]["mean"]
    return at100, at300


def _compared(order: list[str]) -> list[str]:
    """The methods the map's margin compares Ripple-Strat with (no Ripple, no oracle)."""
    return [n for n in order if not ev.is_oracle(n) and not ev.is_ripple(n)]


def _ranking_verdict(d: dict, t: dict, at100: dict, at300: dict) -> str:
    o100, o300 = _order(at100), _order(at300)
    c100, c300 = _compared(o100), _compared(o300)
    best100, best300 = c100[0], c300[0]
    margin100 = at100["ripple-strat"] - at100[best100]
    margin300 = at300["ripple-strat"] - at300[best300]
    moved = [n for n in o100 if o100.index(n) != o300.index(n)]
    moved_compared = [n for n in c100 if c100.index(n) != c300.index(n)]
    verdict = (
        "The order is the same at both lengths."
        if not moved
        else f"{len(moved)} of {len(o100)} methods change place ("
        + ", ".join(f"{ev.label(n)} {o100.index(n) + 1} -> {o300.index(n) + 1}" for n in moved)
        + ")."
    )
    lead = (
        f"Ripple-Strat's margin over the best compared method is {margin100:+.1f} points "
        f"(over {ev.label(best100)}) at {d['rounds']} rounds and {margin300:+.1f} (over "
        f"{ev.label(best300)}) at {t['rounds']}: "
        + ("the same sign" if (margin100 > 0) == (margin300 > 0) else "**the sign changes**")
        + ("" if best100 == best300 else ", but the best compared method is another")
    )
    rule = (
        "the compared methods keep their order, so 100 rounds stands"
        if not moved_compared
        else f"{len(moved_compared)} compared methods change place, so by the rule above the "
        "map's order among the other methods at 100 rounds is not final: read its margins as "
        f"{d['rounds']}-round margins, and see the contenders of every cell at {t['rounds']} "
        "rounds below"
    )
    return (
        f"{verdict} {lead}; {rule}. Caveats: the map holds out 10 new clients (zero-shot) and "
        "runs IFCA at K = 10, Table 1 holds none out and reports IFCA at its swept K "
        f"({t['rows']['ifca']['k']}); the 300-round check is this one cell, from runs made "
        "for Table 1, not a new run."
    )


def ranking_at_300() -> str:
    """The map's label-skew 0.1 cell (100 rounds) beside Table 1 (300 rounds): does the
    ranking change? Computed from the two committed JSON lines; the caveats named."""
    if not (ev.RESULTS / MAP).is_file():
        return "No map is committed yet."
    d, t = ev.load(MAP), ev.load(TABLE1)
    at100, at300 = _same_cell(d, t)
    o100, o300 = _order(at100), _order(at300)
    lines = [
        f"The map's {SAME_PROTOCOL_CELL} cell is Table 1's protocol at {d['rounds']} rounds "
        f"({ev.seeds_text(d['seeds'])}); Table 1 ran it to {t['rounds']} rounds "
        f"({ev.seeds_text(t['seeds'])}). Training clients' accuracy (%, mean over seeds):",
        "",
        f"| method | {d['rounds']} rounds (map) | rank | {t['rounds']} rounds (Table 1) | rank |",
        "|---|---|---|---|---|",
    ]
    for n in o100:
        lines.append(
            f"| {ev.label(n)} | {at100[n]:.1f} | {o100.index(n) + 1} | {at300[n]:.1f} | "
            f"{o300.index(n) + 1} |"
        )
    return "\n".join([*lines, "", _ranking_verdict(d, t, at100, at300)])


BLOCKS = {
    "docs/archive-first-map.md": {
        "heterogeneity-map": heterogeneity_map,
        "map-advice": map_advice,
        "map-ranking-300": ranking_at_300,
    },
    "docs/which-method.md": {"method-costs": costs},
}
