"""The page a user reads: which method to use, from the pre-registered map's verdicts.

Reads ``docs/results/heterogeneity_map_fresh.json``, the read-back (``ripple-map --protocol
... --reuse-only --json``) of the pre-registered map, and the kept run summaries under
``docs/results/runs/<protocol name>/`` for what each method costs. The rows, the
comparisons and the seeds come from that JSON line (a later protocol that adds rows or
comparisons needs no change here); the recommended row is the protocol file's
``recommended`` (else the first row the protocol compares).

The rule (:data:`RULE`), per cell and metric, over the protocol's verdicts of the
recommended row against each of its rivals (paired per seed over the seeds both have,
:func:`ripple_flwr.runs.statistics.paired`):

- a run of the compared rows missing: "runs missing: N of M", no verdict;
- a rival leads it (it trails): that rival (several: each, the largest lead first; the
  protocol does not compare them with one another);
- else a comparison with too few shared seeds: no verdict;
- else it leads every rival: the recommended row;
- else: no clear winner, naming the rivals it neither leads nor trails.

A rival with no value for a metric at any seed and no missing run (local-only has no
zero-shot model) is not a rival for that metric.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from paper import evidence as ev
from ripple_flwr.runs.statistics import MIN_SEEDS, fmt_paired, paired

FRESH = "heterogeneity_map_fresh.json"
WHO = {"final_accuracy": "training", "zero_shot_accuracy": "new, zero-shot"}
WHO_LONG = {"final_accuracy": "Training clients", "zero_shot_accuracy": "New clients, zero-shot"}
NAMES = {
    "ripple-strat": "Ripple-Strat (paper)",
}
# The cells in words (what a user knows about their clients); the settings are the map's.
KINDS = {
    "label-skew-0.01": "extreme label skew, Dir(0.01): about one class a client",
    "label-skew-0.1": "strong label skew, Dir(0.1)",
    "label-skew-1": "mild label skew, Dir(1)",
    "quantity-skew": "strong label skew, client sizes varying 10x",
    "rotation": "covariate shift: 4 rotations of the images",
    "label-and-rotation": "label skew and rotation together: 40 groups",
    "concept-shift": "concept shift: 4 permutations of the labels",
    "concept-per-client": "concept shift per client, FedRC's mix",
}
RULE = (
    "**The rule** (per cell, training clients and new clients zero-shot apart): the "
    "protocol's verdicts of {rec} against each rival, paired per seed over the seeds both "
    "have (Student-t 95% interval of the mean difference; fewer than {min_seeds} shared seeds: "
    "no verdict). Where {rec} leads every rival: {rec}. Where a rival leads it: that rival, and "
    "{rec} trails (several: each, the largest lead first; the protocol does not compare them "
    "with one another). Else: no clear winner, naming the rivals it neither leads nor trails. "
    "A cell with a compared run missing states no verdict. The margin is over the next best: "
    "the closest rival where {rec} leads or ties, {rec} itself where a rival leads."
)


def name(row: str) -> str:
    return NAMES.get(row, ev.label(row))


def load(d: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The committed read-back (``d`` when given: a test's map)."""
    if d is not None:
        return d
    return ev.load(FRESH) if (ev.RESULTS / FRESH).is_file() else None


def protocol_file(d: dict[str, Any]) -> dict[str, Any]:
    """The protocol file the read-back names, when it is committed here and unchanged."""
    import hashlib

    p = d.get("protocol") or {}
    path = ev.ROOT / "paper" / "protocols" / f"{p.get('name')}.json"
    if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == p.get("sha256"):
        from paper.hmap import load_protocol

        return load_protocol(path)  # an extension: with its base's keys
    return {}


def runs_folder(d: dict[str, Any]) -> str:
    """Where the map's kept runs are: named after the first protocol of the chain (an
    extension's runs sit beside its base's, as the rows they share are the same runs)."""
    p = d["protocol"]
    return (p.get("chain") or [p])[0]["name"]


def recommended(d: dict[str, Any]) -> str:
    comparisons = d["protocol"]["comparisons"]
    return protocol_file(d).get("recommended") or next(iter(comparisons))


def _applies(row: dict[str, Any], metric: str) -> bool:
    """False for a row that has no value for ``metric`` at any seed and no missing run."""
    return bool(row[metric]["n"] or row.get("seeds_missing"))


def outcome(d: dict[str, Any], cell: str, row: str, metric: str) -> dict[str, Any]:
    """What to use in ``cell`` for ``metric`` by :data:`RULE`, from ``row``'s comparisons."""
    entry = d["cells"][cell]
    rows = entry["rows"]
    rivals = [
        r for r in d["protocol"]["comparisons"][row] if r in rows and _applies(rows[r], metric)
    ]
    compared = [row, *rivals]
    total = len(compared) * len(d["seeds"])
    missing = {r: rows[r].get("seeds_missing") or [] for r in compared}
    n_missing = sum(map(len, missing.values()))
    shared = set.intersection(
        *({s for s, v in rows[r][metric]["per_seed"].items() if v is not None} for r in compared)
    )
    out: dict[str, Any] = {
        "row": row,
        "metric": metric,
        "compared": compared,
        "missing": {r: s for r, s in missing.items() if s},
        "runs_missing": (n_missing, total),
        "shared": sorted(shared, key=int),
        "use": [],
        "margin": None,
        "against": None,
    }
    if n_missing:
        return {**out, "status": "missing"}
    verdicts = {r: entry["protocol"][f"{row} - {r}"][metric] for r in rivals}
    leaders = sorted(
        (r for r, p in verdicts.items() if p["verdict"] == "trails"),
        key=lambda r: verdicts[r]["mean"],
    )
    if leaders:
        ahead = paired(rows[leaders[0]][metric]["per_seed"], rows[row][metric]["per_seed"])
        return {**out, "status": "trails", "use": leaders, "margin": ahead, "against": row}
    few = [r for r, p in verdicts.items() if p["verdict"] == "too few seeds"]
    if few:
        return {**out, "status": "too few seeds", "against": few[0], "margin": verdicts[few[0]]}
    tied = sorted(
        (r for r, p in verdicts.items() if p["verdict"] != "leads"),
        key=lambda r: verdicts[r]["mean"],
    )
    if not tied:
        closest = min(verdicts, key=lambda r: verdicts[r]["mean"])
        return {
            **out,
            "status": "leads",
            "use": [row],
            "margin": verdicts[closest],
            "against": closest,
        }
    return {
        **out,
        "status": "no clear winner",
        "use": [row, *tied],
        "margin": verdicts[tied[0]],
        "against": tied[0],
    }


def use_text(o: dict[str, Any]) -> str:
    """The "what to use" column: the rule's answer, losses said as plainly as wins."""
    rec = name(o["row"])
    if o["status"] == "missing":
        n, total = o["runs_missing"]
        return f"no verdict yet: runs missing: {n} of {total}"
    if o["status"] == "trails":
        return f"{' or '.join(map(name, o['use']))}: {rec} trails"
    if o["status"] == "too few seeds":
        return f"no verdict: too few seeds shared with {name(o['against'])}"
    if o["status"] == "leads":
        return f"{rec}: leads every rival"
    return f"no clear winner: {rec} or {', '.join(map(name, o['use'][1:]))}"


def margin_text(o: dict[str, Any]) -> str:
    p = o["margin"]
    if p is None:
        return "-"
    if o["status"] == "trails":
        who = f"{name(o['use'][0])} over {name(o['row'])}"
    else:
        who = f"over {name(o['against'])}"
    return f"{fmt_paired(p)} {who}: {p['verdict']}"


def seeds_text(o: dict[str, Any], seeds: list[int]) -> str:
    """The seeds shared by every compared row, then the runs still missing, row by row."""
    shared = ", ".join(o["shared"]) if o["shared"] else "none"
    text = f"{len(o['shared'])} of {len(seeds)} shared ({shared})"
    if not o["missing"]:
        return text + "; none missing"
    whole = [r for r, s in o["missing"].items() if len(s) == len(seeds)]
    part = [
        f"{name(r)} {', '.join(map(str, s))}" for r, s in o["missing"].items() if r not in whole
    ]
    said = []
    if whole and len(whole) == len(o["missing"]) == len(o["compared"]):
        said.append("no run yet of any compared row")
    elif whole:
        said.append(f"no run yet: {', '.join(map(name, whole))}")
    if part:
        said.append("missing: " + "; ".join(part))
    return text + "; " + "; ".join(said)


def _summary(folder: Path, cell: str, row: str, rounds: int, seed: Any) -> dict[str, Any] | None:
    path = folder / f"{cell}-{row}-r{rounds}-seed{seed}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def cost_text(d: dict[str, Any], cell: str, rows: list[str], folder: Path | None = None) -> str:
    """Bytes a round against FedAvg's, models the server holds and run time against FedAvg's
    (the same cell's kept runs; the wall times mix loads), for each row named."""
    folder = folder or ev.RESULTS / "runs" / runs_folder(d)

    def kept(row: str) -> list[dict[str, Any]]:
        got = (_summary(folder, cell, row, d["rounds"], s) for s in d["seeds"])
        return [s for s in got if s is not None]

    fedavg = _mean([s["wall_seconds"] for s in kept("fedavg") if s.get("wall_seconds")])
    parts = []
    for row in rows:
        runs = kept(row)
        if not runs:
            parts.append(f"{name(row)}: no kept run yet")
            continue
        ratio = _mean([s["bytes_ratio_vs_fedavg"] for s in runs if "bytes_ratio_vs_fedavg" in s])
        models = sorted({s["models"] for s in runs if s.get("models") is not None})
        wall = _mean([s["wall_seconds"] for s in runs if s.get("wall_seconds")])
        bits = [] if ratio is None else [f"{ratio:.2f}x FedAvg's bytes a round"]
        if models:
            bits.append(f"{'/'.join(map(str, models))} model{'s' if models != [1] else ''}")
        if wall is not None:
            bits.append(
                f"{wall / fedavg:.1f}x FedAvg's run time" if fedavg else f"{wall:.0f} s a run"
            )
        parts.append(f"{name(row)}: {', '.join(bits)} ({len(runs)} runs)")
    return "; ".join(parts)


def settings_text(d: dict[str, Any], row: str) -> str:
    """A row's run-config keys as the map ran them (the JSON's ``rows``)."""
    keys = {k: v for k, v in (d.get("rows") or {}).get(row, {}).items() if k != "method"}
    shown = (f"`{k} = {json.dumps(v)}`" for k, v in keys.items())
    return f'`method = "{d["rows"][row]["method"]}"`, ' + ", ".join(shown) if keys else ""


def _extends_text(p: dict[str, Any]) -> str:
    """An extension's chain, root first: each file's commit and the rows it added, each
    committed before any run of those rows (its base's rows, seeds and comparisons kept)."""
    parts = []
    for link in p["chain"]:
        commit = (link.get("commit") or "no commit")[:7]
        what = (
            "its cells, seeds, rows and comparisons, before any of its runs"
            if link["rows_added"] is None
            else f"adding {', '.join(map(name, link['rows_added']))} with their comparisons, "
            "before any run of them"
        )
        parts.append(f"`{link['name']}` (committed at `{commit}`: {what})")
    return "; the files, in order: " + "; ".join(parts)


def _header(d: dict[str, Any]) -> str:
    p, base = d["protocol"], d["base"]
    missing = len(d.get("missing") or [])
    runs = len(d["seeds"]) * sum(len(entry["rows"]) for entry in d["cells"].values())
    state = f"{runs - missing} of its {runs} runs kept" if missing else f"all {runs} runs kept"
    return (
        f"From the pre-registered map `{p['name']}` ([the protocol](../paper/protocols/"
        f"{p['name']}.json), committed at `{(p.get('commit') or 'no commit')[:7]}`, sha256 "
        f"`{p['sha256'][:12]}`"
        + (
            _extends_text(p)
            if p.get("chain")
            else ": cells, rows, seeds and comparisons fixed before any run"
        )
        + "): "
        f"{base['dataset']}, {base['num-partitions']} clients, {d['rounds']} rounds, fresh "
        f"federation seeds {', '.join(map(str, d['seeds']))}; {state}; read back on "
        f"{ev.machine(d)}. Margins in points of accuracy, paired per seed: mean ± the "
        "half-width of the Student-t 95% interval (seeds ahead / n). "
        + " ".join(
            f"{name(r)}: {settings_text(d, r)}."
            for r in d["protocol"]["comparisons"]
            if settings_text(d, r)
        )
    )


def decision_table(d: dict[str, Any] | None = None, folder: Path | None = None) -> str:
    """which-method.md's opening table: per cell and metric, what to use by :data:`RULE`."""
    d = load(d)
    if d is None or "protocol" not in d:
        return "**Not run yet**: no pre-registered map's read-back is committed."
    rec = recommended(d)
    lines = [
        _header(d),
        "",
        "| kind of heterogeneity | clients | what to use | margin over the next best, paired "
        "| seeds | what it costs |",
        "|---|---|---|---|---|---|",
    ]
    for cell in d["cells"]:
        for i, metric in enumerate(WHO):
            o = outcome(d, cell, rec, metric)
            kind = f"{KINDS.get(cell, cell)} (`{cell}`)" if i == 0 else ""
            shown = o["use"] or [rec]
            lines.append(
                f"| {kind} | {WHO[metric]} | {use_text(o)} | {margin_text(o)} | "
                f"{seeds_text(o, d['seeds'])} | {cost_text(d, cell, shown, folder)} |"
            )
    lines += ["", RULE.format(rec=name(rec), min_seeds=MIN_SEEDS), "", where_text(d, rec)]
    return "\n".join(lines)


STATES = (
    ("leads", "leads every rival in"),
    ("trails", "trails a rival in"),
    ("no clear winner", "has no clear winner in"),
    ("too few seeds", "has too few shared seeds for a verdict in"),
    ("missing", "has no verdict yet (runs missing) in"),
)


def grouped(d: dict[str, Any], row: str, metric: str) -> dict[str, list[str]]:
    """The cells by the rule's status of ``row``."""
    out: dict[str, list[str]] = {s: [] for s, _ in STATES}
    for cell in d["cells"]:
        out[outcome(d, cell, row, metric)["status"]].append(cell)
    return out


def where_text(d: dict[str, Any], row: str) -> str:
    """One sentence per metric: where ``row`` leads, trails, ties, or has no verdict yet."""
    out = []
    for metric in WHO:
        by = grouped(d, row, metric)
        said = [f"{text} {', '.join(by[s])}" for s, text in STATES if by[s]]
        out.append(f"{WHO_LONG[metric]}: {name(row)} " + "; ".join(said) + ".")
    return " ".join(out)


def paper_row(d: dict[str, Any] | None = None) -> str:
    """The protocol's other compared rows (the paper's Ripple-Strat), cell by cell."""
    d = load(d)
    if d is None or "protocol" not in d:
        return "**Not run yet**: no pre-registered map's read-back is committed."
    rec = recommended(d)
    paper = protocol_file(d).get("paper_row")
    others = [paper] if paper else [r for r in d["protocol"]["comparisons"] if r != rec]
    lines = []
    for row in others:
        rivals = ", ".join(map(name, d["protocol"]["comparisons"][row]))
        lines += [
            f"**{name(row)}** against its rivals ({rivals}), by the same rule:",
            "",
            "| cell | training clients | new clients, zero-shot |",
            "|---|---|---|",
        ]
        for cell in d["cells"]:
            cols = []
            for metric in WHO:
                o = outcome(d, cell, row, metric)
                m = margin_text(o)
                cols.append(use_text(o) + ("" if m == "-" else f"; {m}"))
            lines.append(f"| {cell} | " + " | ".join(cols) + " |")
        lines += ["", where_text(d, row), ""]
    return "\n".join(lines).rstrip() or "The protocol compares no other row."


def readme_choices(d: dict[str, Any] | None = None) -> str:
    """README: the decision table's answers grouped, a few lines, pointing at which-method.md."""
    d = load(d)
    if d is None or "protocol" not in d:
        return (
            "No pre-registered map is committed yet: see [which-method.md](docs/which-method.md)."
        )
    rec = recommended(d)
    answers: dict[str, dict[str, list[str]]] = {}
    for cell in d["cells"]:
        for metric in WHO:
            o = outcome(d, cell, rec, metric)
            key = (
                use_text(o).split(": runs missing")[0] if o["status"] == "missing" else use_text(o)
            )
            answers.setdefault(key, {m: [] for m in WHO})[metric].append(cell)
    lines = [
        f"From the pre-registered map `{d['protocol']['name']}` (fresh federation seeds "
        f"{', '.join(map(str, d['seeds']))}; the rule, the paired margins, the seeds and the "
        "costs: [docs/which-method.md](docs/which-method.md)):",
        "",
        "| what to use | training clients | new clients, zero-shot |",
        "|---|---|---|",
    ]
    for answer, by in answers.items():
        cols = [", ".join(by[m]) or "-" for m in WHO]
        lines.append(f"| {answer} | " + " | ".join(cols) + " |")
    return "\n".join(lines)


def development_seeds(d: dict[str, Any] | None = None) -> str:
    """The protocol's development seeds (inline): those the pages' earlier maps used."""
    d = load(d)
    seeds = protocol_file(d).get("development_seeds") if d and "protocol" in d else None
    if not seeds:
        return "not recorded"
    return (
        ", ".join(map(str, seeds[:-1])) + f" and {seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
    )


BLOCKS = {
    "docs/which-method.md": {
        "which-method-decision": decision_table,
        "which-method-paper-row": paper_row,
        "which-method-dev-seeds": development_seeds,
    },
    "README.md": {"ripple-choices": readme_choices},
}
