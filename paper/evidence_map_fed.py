"""The map over federation seeds: paired verdicts per cell, Ripple's own choices compared.

Reads ``docs/results/heterogeneity_map_fed.json``, the read-back (``ripple-map
--reuse-only``) of the kept summaries in ``docs/results/runs/heterogeneity-map-fed/``.
Each seed there draws the whole federation (partitions, D_aux, splits, 50 new clients
of 500 images) and seeds the training, so a paired per-seed difference compares two
methods on the same federation, and the spread covers federations, not only training
randomness. A cell's verdict is the best Ripple variant against the best other method
(the oracle aside), each chosen by mean, with the Student-t 95% interval of the paired
difference; "leads" only when it excludes 0.
"""

from __future__ import annotations

from typing import Any

from paper import evidence as ev
from paper.hmap import router_text
from ripple_flwr.runs.statistics import fmt_paired

MAP_FED = "heterogeneity_map_fed.json"
PLAN = (
    "Ripple's four variants, FedYogi, Per-FedAvg and local-only at five federation seeds in "
    "every cell, the oracle, FedAvg, IFCA, CFL and FLUX at three"
)
KEPT = "heterogeneity-map-fed"
WHO = {"final_accuracy": "training clients", "zero_shot_accuracy": "new clients, zero-shot"}
NAMES = {
    "ripple-strat": "Ripple-Strat (GMM-VAE)",
    "ripple-unif": "Ripple-Unif (GMM-VAE)",
    "ripple-strat-mu": "Ripple-Strat (mean unmixing)",
    "ripple-unif-mu": "Ripple-Unif (mean unmixing)",
}
OPTIMISER_ROWS = ("ripple-strat-yogi", "ripple-unif-yogi")


def _name(row: str) -> str:
    return NAMES.get(row, ev.label(row))


def _margin(m: dict[str, Any] | None) -> str:
    if not m or m.get("mean") is None:
        return "n/a"
    return f"{_name(m['ripple'])} {fmt_paired(m)} vs {_name(m['best_other'])}: {m['verdict']}"


def _seeds(rows: dict[str, Any]) -> str:
    n = [r["final_accuracy"]["n"] for r in rows.values()]
    return f"{min(n)}-{max(n)}" if min(n) != max(n) else str(min(n))


def _kept() -> list[dict[str, Any]]:
    import json

    folder = ev.RESULTS / "runs" / KEPT
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def map_federations() -> str:
    """Per cell: the best Ripple variant's paired margin and the router comparison."""
    if not (ev.RESULTS / MAP_FED).is_file():
        return "**Not run yet**: no `docs/results/heterogeneity_map_fed.json` is committed."
    d = ev.load(MAP_FED)
    base = d["base"]
    kept = _kept()
    hours = sum(s["wall_seconds"] for s in kept) / 3600
    lines = [
        f"Fashion-MNIST, {base['num-partitions']} clients x {base['partition-size']} images, "
        f"{base['clients-per-round']} a round, {d['rounds']} rounds, {base['new-clients']} new "
        f"clients of {base.get('new-partition-size') or base['partition-size']} images a run; "
        f"federation seeds {', '.join(map(str, d['seeds']))} (each draws the partitions, D_aux, "
        f"the splits and the new clients). The plan: {PLAN}; {len(kept)} runs kept so far "
        "(the seeds column: how many each cell's rows have). Assembled on "
        f"{ev.machine(d)}, {ev.runs_made_on(KEPT)}; they took {hours:.1f} h of run "
        f"time, about {hours / 2:.1f} h at `--jobs 2`. Points, paired per seed: mean "
        "± the half-width of the Student-t 95% interval (seeds ahead / n):",
        "",
        "| cell | seeds | best Ripple vs best other, training | ... zero-shot "
        "| mean unmixing - GMM-VAE, training | ... zero-shot |",
        "|---|---|---|---|---|---|",
    ]
    for cell, entry in d["cells"].items():
        rows = entry["rows"]
        if not any(r["final_accuracy"]["n"] for r in rows.values()):
            continue
        cols = [_margin(entry["margin"].get(m)) for m in WHO]
        cols += [router_text(entry.get("router", {}).get(m, {})) for m in WHO]
        lines.append(f"| {cell} | {_seeds(rows)} | " + " | ".join(cols) + " |")
    return "\n".join(lines)


def advice() -> str:
    """Which of Ripple's own choices (router, sampler) to take, per cell, from the pairs."""
    if not (ev.RESULTS / MAP_FED).is_file():
        return "**Not run yet**: the map over federation seeds has no committed read-back."
    d = ev.load(MAP_FED)
    lines = []
    for cell, entry in d["cells"].items():
        m = entry["margin"].get("final_accuracy")
        if not m or m.get("mean") is None:
            continue
        best = _name(m["ripple"])
        if m["verdict"] == "leads":
            what = (
                f"the best of the paper's Ripple variants, {best}, leads "
                f"{_name(m['best_other'])} ({fmt_paired(m)})"
            )
        elif m["verdict"] == "trails":
            what = (
                f"{_name(m['best_other'])} leads the best of the paper's Ripple variants, "
                f"{best} ({fmt_paired(m)})"
            )
        else:
            what = f"no clear winner between {best} and {_name(m['best_other'])} ({fmt_paired(m)})"
        routers = entry.get("router", {}).get("final_accuracy", {})
        lead = [s for s, p in routers.items() if p.get("verdict") == "leads"]
        trail = [s for s, p in routers.items() if p.get("verdict") == "trails"]
        if lead:
            what += f"; mean unmixing leads the GMM-VAE at the {' and '.join(lead)} sampler"
        if trail:
            what += f"; the GMM-VAE leads mean unmixing at the {' and '.join(trail)} sampler"
        if not lead and not trail and routers:
            what += "; the two routers: no clear winner"
        what += _optimiser_clause(entry)
        lines.append(f"- **{cell}** (training clients): {what}.")
    return "\n".join(lines) or "No cell has runs yet."


def _optimiser_best(entry: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """Ripple's best row with FedYogi per cluster and its paired margin against the best other
    method (training clients), where it ran."""
    adds = entry.get("additions", {}).get("final_accuracy", {})
    got = [
        (name, adds[name]["other"])
        for name in OPTIMISER_ROWS
        if (adds.get(name) or {}).get("other") and adds[name]["other"].get("mean") is not None
    ]
    return max(got, key=lambda g: g[1]["mean"]) if got else None


def _optimiser_clause(entry: dict[str, Any]) -> str:
    best = _optimiser_best(entry)
    if best is None:
        return ""
    name, p = best
    return (
        f'; with `cluster-optimizer = "fedyogi"` (beyond the paper), {_name(name)} against '
        f"{_name(p['against'])}: {fmt_paired(p)}, {p['verdict']}"
    )


def additions() -> str:
    """Per cell, each row added by issue 48 against the best of the paper's Ripple variants and
    against the best other method, paired per seed, training clients and zero-shot."""
    if not (ev.RESULTS / MAP_FED).is_file():
        return "**Not run yet**: the map over federation seeds has no committed read-back."
    d = ev.load(MAP_FED)
    lines = [
        "| cell | row | vs Ripple (paper's rule), training | ... zero-shot "
        "| vs best other, training | ... zero-shot |",
        "|---|---|---|---|---|---|",
    ]
    for cell, entry in d["cells"].items():
        adds = entry.get("additions", {})
        for name in dict.fromkeys(k for m in WHO for k in adds.get(m, {})):
            cols = []
            for side in ("ripple", "other"):
                for m in WHO:
                    p = (adds.get(m, {}).get(name) or {}).get(side)
                    cols.append(
                        "n/a"
                        if not p or p.get("mean") is None
                        else f"{fmt_paired(p)} vs {_name(p['against'])}: {p['verdict']}"
                    )
            lines.append(f"| {cell} | {_name(name)} | " + " | ".join(cols) + " |")
    if len(lines) == 2:
        return "No added row has runs yet."
    return _where_they_win(d) + "\n\n" + "\n".join(lines) + _table1_additions()


VERDICTS = ("leads", "no clear winner", "trails")


def _where_they_win(d: dict[str, Any]) -> str:
    """One line per added row: the map cells where it leads, ties and trails, training
    clients, against the paper's best Ripple variant and against the best other method."""
    sides = {"ripple": "Ripple (paper's rule)", "other": "the best other method"}
    names = dict.fromkeys(
        k for e in d["cells"].values() for k in e.get("additions", {}).get("final_accuracy", {})
    )
    out = []
    for name in names:
        parts = []
        for side, side_text in sides.items():
            by: dict[str, list[str]] = {v: [] for v in VERDICTS}
            for cell, entry in d["cells"].items():
                p = entry.get("additions", {}).get("final_accuracy", {}).get(name, {}).get(side)
                if p and p.get("mean") is not None:
                    by[p["verdict"]].append(cell)
            said = [f"{v} in {', '.join(c)}" for v, c in by.items() if c]
            if said:
                parts.append(f"against {side_text}, " + "; ".join(said))
        if parts:
            out.append(f"- **{_name(name)}**: " + "; ".join(parts) + ".")
    return "Where each added row wins (training clients, the verdicts of the table below):\n\n" + (
        "\n".join(out)
    )


TABLE1_PAPER_RIPPLE = tuple(
    f"ripple-{s}-{r}" for s in ("strat", "unif") for r in ("gmm-vae", "mean-unmixing")
)
TABLE1_ADDED = ("pacfl", "fedgwc", "ripple-strat-yogi", "ripple-unif-yogi")


def _table1_additions() -> str:
    """Table 1's rows added by issue 48, paired per seed against its best paper-rule Ripple row
    and its best other runnable row (each chosen by mean; the oracles aside)."""
    from paper.evidence_table1 import TABLE1

    t = ev.load(TABLE1)
    rows = {n: r for n, r in t["rows"].items() if r["final_accuracy"].get("n")}

    def best(names: Any) -> str | None:
        have = [n for n in names if n in rows]
        return max(have, key=lambda n: rows[n]["final_accuracy"]["mean"]) if have else None

    ripple = best(TABLE1_PAPER_RIPPLE)
    out = []
    for name in (n for n in TABLE1_ADDED if n in rows):
        others = [n for n in rows if n != name and n not in TABLE1_ADDED and not ev.is_ripple(n)]
        parts = []
        for against in dict.fromkeys(a for a in (ripple, best(others)) if a):
            p = ev.paired_of(rows[name]["final_accuracy"], rows[against]["final_accuracy"])
            parts.append(f"{fmt_paired(p)} vs {_name(against)}: {p['verdict']}")
        acc = rows[name]["final_accuracy"]["mean"]
        out.append(f"- {_name(name)}: {100 * acc:.1f}%; " + "; ".join(parts) + ".")
    if not out:
        return ""
    return (
        f"\n\nIn Table 1 ({t['dataset']}, Dir(0.1), one federation, {t['rounds']} rounds, "
        f"{ev.seeds_text(t['seeds'])}; training clients, paired per seed, points, t 95%, "
        "seeds ahead), against the best of the paper's four Ripple rows and the best other "
        "row one can run:\n\n" + "\n".join(out)
    )


BLOCKS = {
    "docs/which-method.md": {
        "map-federations": map_federations,
        "map-federations-advice": advice,
        "map-additions": additions,
    },
}
