"""docs/which-method.md's 300-round check of the map, cell by cell.

The map runs 100 rounds. Table 1 is one of its cells at 300 rounds and shows the order
among the other methods changing, so each further cell was run to 300 rounds at seed 42
for Ripple-Strat and the methods that could take its place (``ripple-map --rounds 300
--seeds 42 --cells C --methods ...``; kept summaries in
``docs/results/runs/heterogeneity-map-300/``). This block sets each cell's seed-42 numbers
at 100 rounds (the map's kept summaries) beside those at 300 and says, from the numbers,
whether Ripple-Strat's margin keeps its sign. Reads ``docs/results/`` only.
"""

from __future__ import annotations

import json
from typing import Any

from paper import evidence as ev
from paper.evidence_map import MAP
from ripple_flwr.runs.statistics import PAIRED, paired, seed_stats

MAP300 = "heterogeneity_map_300.json"
KEPT100, KEPT300 = "heterogeneity-map", "heterogeneity-map-300"
RIPPLE = "ripple-strat"
METRICS = {"final_accuracy": "training clients", "zero_shot_accuracy": "new clients, zero-shot"}


def _stat(row: dict[str, Any], metric: str, seeds: list[str]) -> dict[str, Any]:
    """One method's metric over ``seeds`` (fractions; mean, sigma, n as the tables')."""
    got = (row.get(metric) or {}).get("per_seed", {})
    return seed_stats({s: got.get(s) for s in seeds})


def _compared(name: str) -> bool:
    return not ev.is_oracle(name) and not ev.is_ripple(name)


def _best(rows: dict[str, Any], names: list[str], metric: str, seeds: list[str]) -> str | None:
    """The compared method among ``names`` with the best mean (ties broken by name)."""
    means = {
        n: m
        for n in names
        if _compared(n) and n in rows and (m := _stat(rows[n], metric, seeds)["mean"]) is not None
    }
    return min(means, key=lambda n: (-means[n], n)) if means else None


def _margin(rows: dict[str, Any], best: str | None, metric: str, seeds: list[str]) -> dict | None:
    """Ripple-Strat minus ``best``, paired per seed, with its t interval and verdict."""
    if best is None or RIPPLE not in rows:
        return None
    mine, theirs = (_stat(rows[n], metric, seeds)["per_seed"] for n in (RIPPLE, best))
    diff = paired(mine, theirs)
    return {"best_other": best, **diff} if diff["n"] else None


def _margin_text(m: dict[str, Any] | None) -> str:
    if not m or m.get("mean") is None:
        return "n/a"
    text = f"{100 * m['mean']:+.1f}"
    if m.get("half") is not None:
        text += f" ± {100 * m['half']:.1f} (t 95%, {m['wins']}/{m['n']} seeds ahead)"
    return f"{text} vs {ev.label(m['best_other'])}: {m['verdict']}"


def _cell_rows(cell: str, rerun: list[str], at100: dict, at300: dict, seeds: list[str]) -> list:
    lines = []
    for name in rerun:
        values = [
            ev.cell(_stat(rows.get(name, {}), metric, seeds))
            for metric in METRICS
            for rows in (at100, at300)
        ]
        lines.append(f"| {cell} | {ev.label(name)} | " + " | ".join(values) + " |")
    return lines


def _cell_verdict(rerun: list[str], at100: dict, at300: dict, seeds: list[str]) -> dict:
    """Per metric: Ripple-Strat's margin over the best rerun method at 100 and at 300 rounds,
    whether its sign holds, and the closest compared method not rerun (its 100-round gap)."""
    out: dict[str, Any] = {}
    for metric in METRICS:
        m100 = _margin(at100, _best(at100, rerun, metric, seeds), metric, seeds)
        m300 = _margin(at300, _best(at300, rerun, metric, seeds), metric, seeds)
        left = _margin(
            at100, _best(at100, [n for n in at100 if n not in rerun], metric, seeds), metric, seeds
        )
        means = [m["mean"] if m else None for m in (m100, m300)]
        out[metric] = {
            "text": f"{_margin_text(m100)} / {_margin_text(m300)}",
            "kept": None if None in means else (means[0] >= 0) == (means[1] >= 0),
            "left": None if not left else (left["best_other"], 100 * left["mean"]),
        }
    return out


def _left_text(verdicts: dict[str, dict[str, Any]], rounds: int) -> str:
    """The compared method not rerun that came closest to Ripple-Strat at 100 rounds."""
    gaps = [(v["left"], METRICS[m]) for m, v in verdicts.items() if v["left"] is not None]
    if not gaps:
        return "every compared method rerun"
    (name, gap), who = min(gaps, key=lambda g: g[0][1])
    where = f"{gap:.1f} points behind" if gap >= 0 else f"{-gap:.1f} points ahead of"
    return (
        f"closest compared method not rerun: {ev.label(name)}, {where} Ripple-Strat on {who} "
        f"at {rounds} rounds"
    )


def _wall(folder: str) -> dict[str, float]:
    """Each kept summary's wall seconds, by file name with the rounds taken out."""
    out = {}
    for path in sorted((ev.RESULTS / "runs" / folder).glob("*.json")):
        key = path.name.replace("-r100-", "-").replace("-r300-", "-")
        out[key] = float(json.loads(path.read_text())["wall_seconds"])
    return out


def _cost_text(rounds100: int, rounds300: int) -> str:
    """What the check cost against the same runs at 100 rounds, and the whole map scaled."""
    at100, at300 = _wall(KEPT100), _wall(KEPT300)
    pairs = [k for k in at300 if k in at100]
    if not pairs:
        return ""
    ratio = sum(at300[k] for k in pairs) / sum(at100[k] for k in pairs)
    whole = ratio * sum(at100.values()) / 3600
    return (
        f" The {len(pairs)} runs took {sum(at300[k] for k in pairs) / 3600:.1f} h of run time, "
        f"{ratio:.1f}x the same runs at {rounds100} rounds; at that ratio the whole map "
        f"({len(at100)} runs) at {rounds300} rounds is about {whole:.0f} h of run time, "
        f"{whole / 2:.0f} h two at a time on this 2-core machine (the kept wall times mix "
        "loads: a factor of two either way)."
    )


def _cell_seeds(rows: dict[str, Any], seeds: list[str]) -> list[str]:
    """The seeds at which Ripple-Strat ran to the check's length in this cell."""
    got = (rows.get(RIPPLE, {}).get("final_accuracy") or {}).get("per_seed", {})
    return [s for s in seeds if got.get(s) is not None]


def contenders_at_300() -> str:
    """Each cell's contenders at 100 and 300 rounds, and whether Ripple-Strat's margin holds."""
    if not (ev.RESULTS / MAP300).is_file() or not (ev.RESULTS / MAP).is_file():
        return "**Not run yet**: no `docs/results/heterogeneity_map_300.json` is committed."
    d100, d300 = ev.load(MAP), ev.load(MAP300)
    all_seeds = [str(s) for s in d300["seeds"]]
    table = [
        "| cell | method | training, 100 | training, 300 | zero-shot, 100 | zero-shot, 300 |",
        "|---|---|---|---|---|---|",
    ]
    verdicts, counted = [], {m: [0, 0] for m in METRICS}
    for cell, entry in d300["cells"].items():
        at300 = entry["rows"]
        seeds = _cell_seeds(at300, all_seeds)
        if not seeds or cell not in d100["cells"]:
            continue
        rerun = [n for n, row in at300.items() if _stat(row, "final_accuracy", seeds)["n"]]
        at100 = d100["cells"][cell]["rows"]
        table += _cell_rows(cell, rerun, at100, at300, seeds)
        v = _cell_verdict(rerun, at100, at300, seeds)
        for metric, got in v.items():
            if got["kept"] is not None:
                counted[metric][0] += got["kept"]
                counted[metric][1] += 1
        signs = "; ".join(
            f"{who} {v[m]['text']}" + ("" if v[m]["kept"] is not False else " (**sign changes**)")
            for m, who in METRICS.items()
        )
        only = "" if seeds == all_seeds else f" [{ev.seeds_text([int(s) for s in seeds])} only]"
        verdicts.append(f"- **{cell}**{only}: {signs} ({_left_text(v, d100['rounds'])}).")
    if not verdicts:
        return "**Not run yet**: the committed 300-round check has no Ripple-Strat run."
    head = (
        f"{d300['rounds']} rounds against the map's {d100['rounds']}, "
        f"{ev.seeds_text(d300['seeds'])} (both lengths over the same seeds), accuracy in %, "
        f"{ev.interval(d300['seeds'])}; assembled on {d300['machine']['node']} at "
        f"`{d300['machine']['commit']}`, {ev.runs_made_on(KEPT300)}. "
        "The methods rerun per cell are those whose kept "
        "summaries exist:"
    )
    kept = "; ".join(
        f"{who}: the sign holds in {k} of {n} cells"
        for (k, n), who in ((counted[m], w) for m, w in METRICS.items())
    )
    tail = (
        f"Ripple-Strat's margin over the best rerun compared method, {d100['rounds']} / "
        f"{d300['rounds']} rounds, points: {PAIRED}:"
    )
    cost = _cost_text(d100["rounds"], d300["rounds"])
    return "\n".join([head, "", *table, "", tail, "", *verdicts, "", f"{kept}.{cost}"])


BLOCKS = {"docs/archive-first-map.md": {"map-contenders-300": contenders_at_300}}
