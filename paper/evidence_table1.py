"""Table 1's generated blocks: the README headline, the full table, who leads, the K sweep.

Read from ``docs/results/table1_fashion_300rounds_3seeds.json`` (the table's JSON line),
its kept run summaries under ``docs/results/runs/table1-fashion-mnist/`` and, for the
rotated variant, ``table1_rotated_fashion_100rounds_seed42.json``.
"""

from __future__ import annotations

from typing import Any

from paper import evidence as ev

TABLE1 = "table1_fashion_300rounds_3seeds.json"
TABLE1_RUNS = "table1-fashion-mnist"
ROTATED1 = "table1_rotated_fashion_100rounds_seed42.json"
FESEM_K10 = "table1_fashion_300rounds_3seeds_fesem_k10.json"
HEADLINE = (
    "oracle",
    "ripple-unif-mean-unmixing",
    "ripple-strat-mean-unmixing",
    "ripple-unif-gmm-vae",
    "ripple-strat-gmm-vae",
    "ripple-hdb-gmm-vae",
    "local",
    "perfedavg",
    "pfedme",
    "ifca",
    "cfl",
    "fedyogi",
    "fedadam",
    "fedavgm",
    "fesem",
    "fedavg",
)
MARKS = (
    "Bold: the best mean, italic: the second (printed ties share a mark), over the methods "
    "one can run (the oracles, which need each client's true mixture, are not ranked)."
)


def _settings(folder: str) -> dict[str, Any]:
    return next(s["settings"] for s in ev.summaries(folder) if "partition-size" in s["settings"])


def where(t: dict[str, Any], folder: str) -> str:
    """The dataset and protocol of a Table 1 record, and how it differs from the paper's."""
    s = _settings(folder)
    kind = "rotations (the domain label)" if t["label_kind"] == "domain" else "class labels"
    return (
        f"**{t['dataset']}**: {t['clients']} clients x {s['partition-size']} images, "
        f"Dir({s['alpha']}) over the {kind}, {s['clients-per-round']} clients a round, the "
        f"paper's CNN, K = {t['num_components']}, **{t['rounds']} rounds, "
        f"{ev.seeds_text(t['seeds'])}**; final personalised accuracy (%, mean of the last "
        f"three evaluations; {ev.interval(t['seeds'])}). {ev.SPREAD_COVERS} "
        f"{ev.PAPER}: {t['dataset']} at {t['rounds']} rounds. Table assembled on "
        f"{ev.machine(t)}; {ev.runs_made_on(folder)}."
    )


def router_budget(folder: str) -> str:
    """The small router's bank and steps, as the folder's kept Ripple summaries record them."""
    found = ev.router_settings(folder)
    return " or ".join(f"{b:,} synthetic clients and {n:,} steps" for b, n in sorted(found))


def router(folder: str) -> str:
    """What router the Ripple rows used, from their kept summaries' settings."""
    text = router_budget(folder)
    return (
        f"Ripple's rows route with the small router each run pre-trains ({text}: "
        "`pretrain-bank-size` and `pretrain-steps` in every kept summary that records its "
        "settings), not the pre-training settings the paper reports."
    )


def _first_round(stat: dict[str, Any], seeds: int) -> str:
    if not stat or not stat.get("n"):
        return "never"
    text = f"{stat['mean']:.0f}"
    if stat.get("sigma") is not None:
        text += f" ± {2 * stat['sigma']:.0f}"
    return text + (f" ({stat['n']}/{seeds} seeds; others never)" if stat["n"] < seeds else "")


def _recovered_note(rec: dict[str, list[str]], name: str) -> str:
    seeds = rec.get(name)
    return f"{len(seeds)} recovered from the table † ({', '.join(seeds)})" if seeds else "kept"


def _acc(t: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: r["final_accuracy"] for n, r in t["rows"].items()}


def _k(row: dict[str, Any]) -> int | None:
    return row["k"] if row.get("k_from_sweep") else None


def headline() -> str:
    """README: the headline rows of Table 1, marked, with the recovered cells flagged."""
    t, rec = ev.load(TABLE1), ev.recovered(TABLE1_RUNS, ev.load(TABLE1)["rounds"])
    acc, rank = _acc(t), ev.ranks(_acc(t))
    lines = [
        where(t, TABLE1_RUNS),
        "",
        "| method | final accuracy (%) | bytes/round vs FedAvg | first round >= 80% |",
        "|---|---|---|---|",
    ]
    # Every row the sentences under the table name is in the table, in order of accuracy.
    shown = sorted(dict.fromkeys([*HEADLINE, *named(t)]), key=lambda n: -(acc[n]["mean"] or 0.0))
    for name in shown:
        row = t["rows"][name]
        dagger = " †" if name in rec else ""
        lines.append(
            f"| {ev.label(name, _k(row))}{dagger} | "
            f"{ev.marked(ev.cell(acc[name]), rank.get(name))} | "
            f"{row['bytes_ratio_vs_fedavg']['mean']:.2f} | "
            f"{_first_round(row['first_round_target'], len(t['seeds']))} |"
        )
    lines += ["", MARKS + " " + _dagger_text(rec, t), "", router(TABLE1_RUNS), "", lead(t)]
    return "\n".join(lines)


def _dagger_text(rec: dict[str, list[str]], t: dict[str, Any]) -> str:
    total = sum(len(v) for v in rec.values())
    runs = sum(len(r["seeds_done"]) for r in t["rows"].values())
    rows = ", ".join(f"{ev.label(n)} ({', '.join(s)})" for n, s in rec.items())
    return (
        f"†: {total} of the table's {runs} run summaries were rebuilt from the table's own "
        f"JSON after "
        f"their results files were lost (`recovered_from`), so those cells cannot be traced "
        f"to a run: {rows}."
    )


def _leaders(t: dict[str, Any]) -> tuple[str, str, dict[str, str], str, str]:
    """Table 1's leader, runner-up, best baseline per family, best baseline and better oracle."""
    acc, rows = _acc(t), t["rows"]
    order = ev.ordered(acc, lambda n: not ev.is_oracle(n))
    fam = {
        f: next(n for n in order if rows[n]["family"] == f)
        for f in ("personalised", "clustered", "global")
    }
    base = next(n for n in order if not ev.is_ripple(n))
    return order[0], order[1], fam, base, ev.ordered(acc, ev.is_oracle)[0]


def named(t: dict[str, Any]) -> list[str]:
    """The rows :func:`lead`'s sentences name (the table under them must show each)."""
    best, second, fam, base, oracle = _leaders(t)
    return list(dict.fromkeys([best, second, oracle, base, *fam.values(), "fedavg"]))


def lead(t: dict[str, Any]) -> str:
    """Who leads Table 1, the best baseline per family, and what FedAvg scores."""
    acc, rows = _acc(t), t["rows"]
    order = ev.ordered(acc, lambda n: not ev.is_oracle(n))
    best, second, fam, base, oracle = _leaders(t)
    text = (
        f"{ev.label(best)} leads with {ev.cell(acc[best])}, then {ev.label(second)} with "
        f"{ev.cell(acc[second])}{ev.paired_text(acc[best], acc[second])}; the better oracle, "
        f"{ev.label(oracle)}, scores {ev.cell(acc[oracle])}. The best baseline "
        f"is {ev.label(base, _k(rows[base]))} with {ev.cell(acc[base])}, "
        f"{ev.points(acc[best], acc[base])} "
        f"points below the leader. "
    )
    parts = [
        f"{f}: {ev.label(n, _k(rows[n]))} {ev.cell(acc[n])} at "
        f"{rows[n]['bytes_ratio_vs_fedavg']['mean']:.1f}x FedAvg's bytes"
        for f, n in fam.items()
    ]
    ripple = [n for n in order if ev.is_ripple(n)]
    firsts = [rows[n]["first_round_target"]["mean"] for n in ripple]
    text += "Best of each baseline family: " + "; ".join(parts) + ". "
    text += (
        f"FedAvg scores {ev.cell(acc['fedavg'])}. Every Ripple row is above every baseline "
        if min(acc[n]["mean"] for n in ripple) > acc[base]["mean"]
        else f"FedAvg scores {ev.cell(acc['fedavg'])}. Not every Ripple row is above the best "
        "baseline "
    )
    return text + (
        f"and reaches 80% at round {min(firsts):.0f}-{max(firsts):.0f} (mean over seeds), at "
        f"{max(rows[n]['bytes_ratio_vs_fedavg']['mean'] for n in ripple):.1f}x FedAvg's bytes."
    )


def _ari(row: dict[str, Any]) -> str:
    """ARI hard / all and when, with the largest permutation p over the seeds if kept."""
    if not row.get("ari_when"):
        return ""
    p = [row.get(f"ari_p_{w}") or {} for w in ("hard", "all")]
    ps = [
        max((v for v in q.get("per_seed", {}).values() if v is not None), default=None) for q in p
    ]
    ptext = f"; p <= {ps[0]:.3f} / {ps[1]:.3f}" if None not in ps else ""
    return f"{ev.plain(row['ari_hard'])} / {ev.plain(row['ari_all'])} ({row['ari_when']}{ptext})"


def full_table() -> str:
    """results.md: every row of Table 1 with its recovered cells flagged, then who leads."""
    t = ev.load(TABLE1)
    rec, acc = ev.recovered(TABLE1_RUNS, t["rounds"]), _acc(t)
    rank = ev.ranks(acc)
    lines = [
        where(t, TABLE1_RUNS),
        "",
        "| method | family | K | final acc. (%) | first round >= 80% | bytes/round vs FedAvg | "
        "models | ARI vs class, hard / all (when) | run summaries |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ev.ordered(acc):
        row = t["rows"][name]
        k = (
            f"{row['k']} (best of sweep)"
            if row.get("k_from_sweep")
            else (row["k"] if row["family"] in ("ripple", "clustered") else "-")
        )
        models = "/".join(str(m) for m in sorted(set(row["models"].values())))
        lines.append(
            f"| {ev.label(name)} | {row['family']} | {k} | "
            f"{ev.marked(ev.cell(acc[name]), rank.get(name))} | "
            f"{_first_round(row['first_round_target'], len(t['seeds']))} | "
            f"{ev.plain(row['bytes_ratio_vs_fedavg'])} | {models} | {_ari(row)} | "
            f"{_recovered_note(rec, name)} |"
        )
    lines += ["", MARKS + " " + _dagger_text(rec, t), "", router(TABLE1_RUNS), "", lead(t)]
    return "\n".join(lines)


def sweep() -> str:
    """The K sweep of IFCA and FeSEM as one sentence per method."""
    s = ev.load(TABLE1)["sweep"]
    parts = []
    for name, m in s["methods"].items():
        ks = [k for k in map(str, s["ks"]) if k in m["by_k"]]
        vals = " / ".join(ev.cell(m["by_k"][k]["final_accuracy"]) for k in ks)
        parts.append(f"{ev.label(name)} {vals} at K = {' / '.join(ks)} (best K = {m['best_k']})")
    return (
        f"The K sweep ({ev.seeds_text(s['seeds'])}, {s['rounds']} rounds): "
        + "; ".join(parts)
        + "."
    )


def fesem_k10() -> str:
    """FeSEM at K = 10 beside the table's K = 2 row (inline)."""
    k10 = ev.load(FESEM_K10)["rows"]["fesem"]["final_accuracy"]
    k2 = ev.load(TABLE1)["rows"]["fesem"]["final_accuracy"]
    return f"{ev.cell(k10)}%, beside the K = 2 row's {ev.cell(k2)}%{ev.paired_text(k10, k2)}"


def rotated() -> str:
    """The rotated Table 1 (one seed): every row, marked, and where Ripple stands."""
    t = ev.load(ROTATED1)
    acc = _acc(t)
    rank = ev.ranks(acc)
    lines = [
        where(t, "table1-rotated-fashion-mnist"),
        "",
        "| method | family | final acc. (%) | bytes/round vs FedAvg | ARI vs rotation, hard / "
        "all (when) |",
        "|---|---|---|---|---|",
    ]
    for name in ev.ordered(acc):
        row = t["rows"][name]
        ari = _ari(row)
        lines.append(
            f"| {ev.label(name)} | {row['family']} | "
            f"{ev.marked(ev.cell(acc[name]), rank.get(name))} | "
            f"{ev.plain(row['bytes_ratio_vs_fedavg'])} | {ari} |"
        )
    order = ev.ordered(acc, lambda n: not ev.is_oracle(n))
    rip = next(n for n in order if ev.is_ripple(n))
    above = [n for n in order[: order.index(rip)]]
    clustered = [n for n in order if t["rows"][n]["family"] == "clustered"]
    lines += [
        "",
        MARKS,
        "",
        f"{ev.label(order[0])} leads with {ev.cell(acc[order[0]])}. Ripple's best row, "
        f"{ev.label(rip)}, "
        f"scores {ev.cell(acc[rip])} and is below {len(above)} global method(s): "
        + ", ".join(f"{ev.label(n)} {ev.cell(acc[n])}" for n in above)
        + ". It is above every clustered baseline ("
        + ", ".join(f"{ev.label(n)} {ev.cell(acc[n])}" for n in clustered)
        + f") and above FedAvg ({ev.cell(acc['fedavg'])}). One seed: no interval, so differences "
        "of a point or two are not resolved. " + router("table1-rotated-fashion-mnist"),
    ]
    return "\n".join(lines)


BLOCKS = {
    "README.md": {"table1-headline": headline},
    "docs/results.md": {
        "table1-full": full_table,
        "table1-sweep": sweep,
        "fesem-k10": fesem_k10,
        "table1-rotated": rotated,
    },
}
