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

from ripple_flwr.cli import evidence as ev
from ripple_flwr.cli.evidence_map import MAP

MAP300 = "heterogeneity_map_300.json"
KEPT100, KEPT300 = "heterogeneity-map", "heterogeneity-map-300"
RIPPLE = "ripple-strat"
METRICS = {"final_accuracy": "training clients", "zero_shot_accuracy": "new clients, zero-shot"}


def _at(row: dict[str, Any], metric: str, seed: str) -> float | None:
    value = (row.get(metric) or {}).get("per_seed", {}).get(seed)
    return None if value is None else 100 * value


def _compared(name: str) -> bool:
    return not ev.is_oracle(name) and not ev.is_ripple(name)


def _best(values: dict[str, float | None]) -> tuple[str, float] | None:
    """The best compared method among ``values`` (ties broken by name)."""
    present = {n: v for n, v in values.items() if v is not None and _compared(n)}
    if not present:
        return None
    name = min(present, key=lambda n: (-present[n], n))
    return name, present[name]


def _margin_text(ripple: float | None, best: tuple[str, float] | None) -> str:
    if ripple is None or best is None:
        return "n/a"
    return f"{ripple - best[1]:+.1f} vs {ev.label(best[0])}"


def _cell_rows(cell: str, rerun: list[str], at100: dict, at300: dict, seed: str) -> list[str]:
    lines = []
    for name in rerun:
        values = []
        for metric in METRICS:
            for rows in (at100, at300):
                v = _at(rows.get(name, {}), metric, seed)
                values.append("n/a" if v is None else f"{v:.1f}")
        lines.append(f"| {cell} | {ev.label(name)} | " + " | ".join(values) + " |")
    return lines


def _cell_verdict(rerun: list[str], at100: dict, at300: dict, seed: str) -> dict[str, Any]:
    """Per metric: Ripple-Strat's margin over the best rerun method at 100 and at 300 rounds,
    and the closest compared method not rerun (its 100-round gap to Ripple-Strat)."""
    out: dict[str, Any] = {}
    for metric in METRICS:
        r100, r300 = (_at(rows.get(RIPPLE, {}), metric, seed) for rows in (at100, at300))
        b100 = _best({n: _at(at100.get(n, {}), metric, seed) for n in rerun})
        b300 = _best({n: _at(at300.get(n, {}), metric, seed) for n in rerun})
        left = _best({n: _at(row, metric, seed) for n, row in at100.items() if n not in rerun})
        m100 = None if r100 is None or b100 is None else r100 - b100[1]
        m300 = None if r300 is None or b300 is None else r300 - b300[1]
        out[metric] = {
            "text": f"{_margin_text(r100, b100)} / {_margin_text(r300, b300)}",
            "kept": None if m100 is None or m300 is None else (m100 >= 0) == (m300 >= 0),
            "left": None if left is None or r100 is None else (left[0], r100 - left[1]),
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


def contenders_at_300() -> str:
    """Each cell's contenders at 100 and 300 rounds (seed 42), and whether the sign holds."""
    if not (ev.RESULTS / MAP300).is_file() or not (ev.RESULTS / MAP).is_file():
        return "**Not run yet**: no `docs/results/heterogeneity_map_300.json` is committed."
    d100, d300 = ev.load(MAP), ev.load(MAP300)
    seed = str(d300["seeds"][0])
    table = [
        "| cell | method | training, 100 | training, 300 | zero-shot, 100 | zero-shot, 300 |",
        "|---|---|---|---|---|---|",
    ]
    verdicts, counted = [], {m: [0, 0] for m in METRICS}
    for cell, entry in d300["cells"].items():
        at300 = entry["rows"]
        rerun = [n for n, row in at300.items() if row["final_accuracy"]["n"]]
        if RIPPLE not in rerun or cell not in d100["cells"]:
            continue
        at100 = d100["cells"][cell]["rows"]
        table += _cell_rows(cell, rerun, at100, at300, seed)
        v = _cell_verdict(rerun, at100, at300, seed)
        for metric, got in v.items():
            if got["kept"] is not None:
                counted[metric][0] += got["kept"]
                counted[metric][1] += 1
        signs = "; ".join(
            f"{who} {v[m]['text']}" + ("" if v[m]["kept"] is not False else " (**sign changes**)")
            for m, who in METRICS.items()
        )
        verdicts.append(f"- **{cell}**: {signs} ({_left_text(v, d100['rounds'])}).")
    if not verdicts:
        return "**Not run yet**: the committed 300-round check has no Ripple-Strat run."
    head = (
        f"Seed {seed}, {d300['rounds']} rounds against the map's {d100['rounds']}, accuracy in "
        f"%; made on {d300['machine']['node']} at `{d300['machine']['commit']}`; the methods "
        "rerun per cell are those whose kept summaries exist (one seed: no interval):"
    )
    kept = "; ".join(
        f"{who}: the sign holds in {k} of {n} cells"
        for (k, n), who in ((counted[m], w) for m, w in METRICS.items())
    )
    tail = (
        f"Ripple-Strat's margin over the best rerun compared method, {d100['rounds']} / "
        f"{d300['rounds']} rounds (the 100-round numbers are the map's seed-{seed} runs, so "
        "they can differ from the three-seed means above):"
    )
    cost = _cost_text(d100["rounds"], d300["rounds"])
    return "\n".join([head, "", *table, "", tail, "", *verdicts, "", f"{kept}.{cost}"])


BLOCKS = {"docs/which-method.md": {"map-contenders-300": contenders_at_300}}
