"""results.md's earlier-protocol blocks: the accuracy runs (seeds 0 and 1) and seed 0's Table 1.

Read from the committed ``docs/results/`` only (see :mod:`paper.evidence`):
``accuracy_fashion_300rounds_2seeds.json`` (no curves: final accuracy per seed, the first
round reaching 90%, the largest gap to the oracle), ``..._flower_seed0.json`` and
``..._baselines_seed0.json`` (curves), and ``table1_fashion_300rounds_seed0.json``, whose
rows reuse those seed-0 runs (bytes and wall time are taken from it when a row's final
accuracy equals the accuracy record's to the last digit, i.e. it is the same run).
"""

from __future__ import annotations

from typing import Any

from paper import evidence as ev
from paper.evidence_table1 import TABLE1_RUNS

ACC2 = "accuracy_fashion_300rounds_2seeds.json"
FLOWER = "accuracy_fashion_300rounds_flower_seed0.json"
STATE = "accuracy_fashion_300rounds_baselines_seed0.json"
SEED0 = "table1_fashion_300rounds_seed0.json"
SHOWN_ROUNDS = (20, 30, 100, 200, 300)  # the curve columns the tables print
ON_H200 = ("pfedme",)  # rows of STATE run on the H200 (the section's prose says why)
STATE_LINK = "[the baselines with state](#the-baselines-with-state-between-rounds)"
FLOWER_LINK = "[Flower's strategies](#flowers-one-model-strategies-on-the-same-protocol)"


def stat(value: float | None) -> dict[str, Any]:
    """An earlier record's plain number as a one-seed cell."""
    return {"mean": value, "sigma": None}


def span(diffs: list[float], unit: str = " points") -> str:
    """Signed differences (printed points) as 'a-b points above' / 'below' / 'between'."""
    lo, hi = min(diffs), max(diffs)

    def rng(a: float, b: float) -> str:
        return f"{a:.1f}" if f"{a:.1f}" == f"{b:.1f}" else f"{a:.1f}-{b:.1f}"

    if lo > 0:
        return f"{rng(lo, hi)}{unit} above"
    if hi < 0:
        return f"{rng(-hi, -lo)}{unit} below"
    return f"between {-lo:.1f}{unit} below and {hi:.1f}{unit} above"


def pdiff(a: float, b: float) -> float:
    """``a`` minus ``b`` in points, from the printed percentages (one decimal)."""
    return ev.shown(stat(a)) - ev.shown(stat(b))


def diffs(names: list[str], acc: dict[str, float], ref: float) -> list[float]:
    """Each name's printed accuracy minus ``ref``'s, in points."""
    return [pdiff(acc[n], ref) for n in names]


def value_range(values: list[float], spec: str = ".1f", scale: float = 100) -> str:
    """``lo-hi`` as printed (one value when they print alike); percent by default."""
    lo, hi = (format(scale * v, spec) for v in (min(values), max(values)))
    return lo if lo == hi else f"{lo}-{hi}"


def _rounds(first: list[int | None]) -> str:
    return " / ".join("never" if r is None else f"{r:.0f}" for r in first)


def _ripple(names: Any) -> list[str]:
    return [n for n in names if ev.is_ripple(n) and not ev.is_oracle(n)]


def accuracy_two_seeds() -> str:
    """The two-seed accuracy record: final accuracy per seed, first round >= 90%, gaps."""
    d = ev.load(ACC2)
    m, seeds = d["methods"], " / ".join(map(str, d["seeds"]))
    acc = {n: r["final_accuracy"] for n, r in m.items()}
    lines = [
        f"**{d['dataset']}**: {d['clients']} clients, **{d['rounds']} rounds, "
        f"{ev.seeds_text(d['seeds'])}**; personalised accuracy (%, sample-weighted mean over "
        "the clients, mean of the last three evaluations), the seeds' mean then each seed. "
        "The JSON line keeps no curves, so no per-round column is printed.",
        "",
        f"| method | final acc. (%): mean (seed {seeds}) | first round >= 90% (seed {seeds}) "
        "| max gap to its oracle (points, round) |",
        "|---|---|---|---|",
    ]
    for n in ev.ordered({k: stat(v) for k, v in acc.items()}):
        r = m[n]
        per = " / ".join(ev.pct(v) for v in r["final_accuracy_per_seed"])
        gap = (
            f"{ev.pct(r['max_gap_to_oracle'])} (round {r['max_gap_round']})"
            if "max_gap_to_oracle" in r
            else "-"
        )
        lines.append(
            f"| {ev.label(n)} | {ev.pct(acc[n])} ({per}) | {_rounds(r['first_round_90'])} | {gap} |"
        )
    return "\n".join([*lines, "", _two_seed_lead(d)])


def _two_seed_lead(d: dict[str, Any]) -> str:
    m = d["methods"]
    acc = {n: r["final_accuracy"] for n, r in m.items()}
    rip = _ripple(m)
    firsts = [r for n in rip for r in m[n]["first_round_90"]]
    reach = (
        f"reaches 90% by round {max(firsts)} at every seed"
        if None not in firsts
        else f"reaches 90% in {sum(r is not None for r in firsts)} of {len(firsts)} runs"
    )
    gaps = [m[n]["max_gap_to_oracle"] for n in rip]
    gmm = [m[n]["max_gap_to_oracle"] for n in rip if n.endswith("gmm-vae")]
    seeds = " / ".join(map(str, d["seeds"]))
    return (
        f"Every Ripple variant ends {span(diffs(rip, acc, acc['fedavg']))} FedAvg "
        f"({ev.pct(acc['fedavg'])}) and {span(diffs(rip, acc, acc['local']))} local-only "
        f"training ({ev.pct(acc['local'])}), and {reach} (local-only: "
        f"{_rounds(m['local']['first_round_90'])}, FedAvg: "
        f"{_rounds(m['fedavg']['first_round_90'])} at seed {seeds}). Every variant stays within "
        f"{ev.pct(max(gaps))} points of its oracle at every evaluation (the GMM-VAE router "
        f"within {ev.pct(max(gmm))})."
    )


def _at(curve: list[list[float]], rnd: int) -> str:
    rounds, values = curve
    return ev.pct(values[rounds.index(rnd)]) if rnd in rounds else "n/a"


def _same_run(name: str, record: dict[str, Any]) -> dict[str, Any] | None:
    """Seed 0's Table 1 row of ``name`` when it is the accuracy record's run, else None."""
    row = ev.load(SEED0)["rows"].get(name)
    ok = row is not None and row["final_accuracy"] == record["methods"][name]["final_accuracy"]
    return row if ok else None


def _curve_table(record: dict[str, Any], names: list[str], h200: tuple[str, ...] = ()) -> str:
    head = " | ".join(f"r{r}" for r in SHOWN_ROUNDS)
    lines = [
        f"| method (seed {record['seeds'][0]}) | {head} | mean of last 3 | first round >= 90% "
        "| bytes/round vs FedAvg |",
        "|---|" + "---|" * (len(SHOWN_ROUNDS) + 3),
    ]
    for n in names:
        r, row = record["methods"][n], _same_run(n, record)
        cells = " | ".join(_at(r["curve"], x) for x in SHOWN_ROUNDS)
        byte = f"{row['bytes_ratio_vs_fedavg']:.3f}" if row else "n/a"
        where = " (H200)" if n in h200 else ""
        lines.append(
            f"| {ev.label(n)}{where} | {cells} | {ev.pct(r['final_accuracy'])} | "
            f"{_rounds(r['first_round_90'])} | {byte} |"
        )
    return "\n".join(lines)


def _caption(record: dict[str, Any]) -> str:
    return (
        f"**{record['dataset']}**: {record['clients']} clients, **{record['rounds']} rounds, "
        f"{ev.seeds_text(record['seeds'])}** (one seed: no interval); personalised accuracy "
        "(%) at the rounds shown and the mean of the last three evaluations; bytes per round "
        f"against FedAvg's from [{SEED0}](results/{SEED0}), which reuses these runs (n/a where "
        "its row is another run)."
    )


def _minutes(record: dict[str, Any]) -> str:
    walls = [r["wall_seconds"] for n in record["methods"] if (r := _same_run(n, record))]
    return f"{min(walls) / 60:.0f}-{max(walls) / 60:.0f} minutes"


def flower() -> str:
    """Flower's one-model strategies at seed 0: the table and what it shows."""
    d, two = ev.load(FLOWER), ev.load(ACC2)
    m = d["methods"]
    acc = {n: r["final_accuracy"] for n, r in m.items()}
    s0 = two["seeds"].index(d["seeds"][0])
    same = acc["fedavg"] == two["methods"]["fedavg"]["final_accuracy_per_seed"][s0]
    rip0 = {n: two["methods"][n]["final_accuracy_per_seed"][s0] for n in _ripple(two["methods"])}
    local0 = two["methods"]["local"]["final_accuracy_per_seed"][s0]
    adaptive = [n for n in ("fedadam", "fedyogi", "fedadagrad") if n in m]
    worst = [pdiff(acc[n], min(rip0.values())) for n in adaptive]
    prox = max(
        abs(a - b) for a, b in zip(m["fedprox"]["curve"][1], m["fedavg"]["curve"][1], strict=True)
    )
    return "\n".join(
        [
            _caption(d) + f" One run took {_minutes(d)} on the loaded 2-core development CPU "
            f"(`wall_seconds` in [{SEED0}](results/{SEED0})).",
            "",
            _curve_table(d, ev.ordered({n: stat(v) for n, v in acc.items()})),
            "",
            f"FedAvg's {ev.pct(acc['fedavg'])} "
            + ("equals" if same else "differs from")
            + f" the two-seed record's seed-{d['seeds'][0]} run "
            f"({ev.pct(two['methods']['fedavg']['final_accuracy_per_seed'][s0])})"
            + (
                " to the last digit: the same seeded sampler trains the same clients. "
                if same
                else ". "
            )
            + f"{', '.join(ev.label(n) for n in adaptive)} end "
            f"{span(diffs(adaptive, acc, acc['fedavg']))} FedAvg, and "
            f"{span(worst)} the lowest Ripple variant at seed "
            f"{d['seeds'][0]} ({value_range(list(rip0.values()))} for the four) and "
            f"{span(diffs(adaptive, acc, local0))} local-only training ({ev.pct(local0)}). "
            f"FedProx ends {abs(pdiff(acc['fedprox'], acc['fedavg'])):.1f} points from FedAvg "
            f"and is at most {ev.pct(prox)} points from it at any evaluation.",
        ]
    )


def with_state() -> str:
    """SCAFFOLD, FedDyn, Per-FedAvg and pFedMe at seed 0 against FedAvg, Ripple, local-only."""
    d = ev.load(STATE)
    m = d["methods"]
    acc = {n: r["final_accuracy"] for n, r in m.items()}
    four = [n for n in ("scaffold", "feddyn", "perfedavg", "pfedme") if n in m]
    rip, local = "ripple-strat-gmm-vae", acc["local"]
    vs_local = [f"{ev.label(n)} {span(diffs([n], acc, local))}" for n in sorted(four, key=acc.get)]
    return "\n".join(
        [
            _caption(d),
            "",
            _curve_table(d, list(m), ON_H200),
            "",
            f"{', '.join(ev.label(n) for n in four)} end {span(diffs(four, acc, acc['fedavg']))} "
            "FedAvg "
            f"({ev.pct(acc['fedavg'])}) and {span(diffs(four, acc, acc[rip]))} "
            f"{ev.label(rip)} ({ev.pct(acc[rip])}; the oracle {ev.pct(acc['oracle'])}). "
            f"Against local-only training ({ev.pct(local)}): " + "; ".join(vs_local) + ".",
        ]
    )


def vs_fedavg(name: str) -> str:
    """Where ``name``'s seed-0 curve is under FedAvg's, and from when it stays above."""
    m = ev.load(STATE)["methods"]
    rounds, p = m[name]["curve"]
    f = m["fedavg"]["curve"][1]
    below = [i for i in range(len(rounds)) if p[i] < f[i]]
    if not below:
        return "is above FedAvg at every evaluation"
    worst = min(below, key=lambda i: p[i] - f[i])
    n = below[-1] + 1
    where = (
        f"at {len(below)} of its first {n} evaluations"
        if len(below) < n
        else ("at its first evaluation" if n == 1 else f"at its first {n} evaluations")
    )
    text = (
        f"is under FedAvg {where} (by the most at round {rounds[worst]}: "
        f"{ev.pct(p[worst])} against {ev.pct(f[worst])})"
    )
    if below[-1] + 1 < len(rounds):
        text += f" and above it at every evaluation from round {rounds[below[-1] + 1]} on"
    return text


def perfedavg_vs_fedavg() -> str:
    """Inline: Per-FedAvg's seed-0 curve against FedAvg's."""
    return vs_fedavg("perfedavg")


def state_vs_fedavg() -> str:
    """Inline: SCAFFOLD's and FedDyn's seed-0 curves against FedAvg's."""
    return "; ".join(f"{ev.label(n)} {vs_fedavg(n)}" for n in ("scaffold", "feddyn"))


def fedavg_seed0() -> str:
    """Inline: FedAvg's final accuracy in the seed-0 accuracy record."""
    return f"{ev.pct(ev.load(STATE)['methods']['fedavg']['final_accuracy'])}%"


def perfedavg_beta() -> str:
    """Inline: the beta Table 1's Per-FedAvg runs kept in their settings."""
    betas = {
        s["settings"]["perfedavg-beta"]
        for s in ev.summaries(TABLE1_RUNS)
        if s["row"] == "perfedavg" and "perfedavg-beta" in s.get("settings", {})
    }
    return f"`perfedavg-beta = {' / '.join(f'{b:g}' for b in sorted(betas))}`"


def _ari0(row: dict[str, Any]) -> str:
    if row.get("ari_hard") is None:
        return ""
    return f"{row['ari_hard']:.3f} / {row['ari_all']:.3f} ({row['ari_when']})"


def table1_seed0() -> str:
    """Seed 0's Table 1 (the earlier protocol): every row, then what the rows show."""
    t = ev.load(SEED0)
    rows = t["rows"]
    acc = {n: stat(r["final_accuracy"]) for n, r in rows.items()}
    lines = [
        f"**{t['dataset']}**: {t['clients']} clients, **{t['rounds']} rounds, "
        f"{ev.seeds_text(t['seeds'])}, the earlier protocol** (one seed: no interval).",
        "",
        "| method | final acc. (%) | first round >= 80% | bytes/round vs FedAvg | wall (s) "
        "| models | ARI hard / all (when) |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in ev.ordered(acc):
        r = rows[n]
        lines.append(
            f"| {ev.label(n)} | {ev.pct(r['final_accuracy'])} | "
            f"{_rounds(r['first_round_target'])} | {r['bytes_ratio_vs_fedavg']:.3f} | "
            f"{r['wall_seconds']:.0f} | {r['models']} | {_ari0(r)} |"
        )
    lines += ["", _reused(rows)]
    return "\n".join([*lines, "", *_seed0_notes(t)])


def _reused(rows: dict[str, Any]) -> str:
    """Which rows are the seed-0 runs of the two sections above (equal final accuracy)."""
    parts = []
    for name, link in ((FLOWER, FLOWER_LINK), (STATE, STATE_LINK)):
        rec = ev.load(name)
        same = [n for n in rec["methods"] if n in rows and _same_run(n, rec)]
        labels = [ev.label(n) + (" (on the H200)" if n in ON_H200 else "") for n in same]
        parts.append(f"{link}: {', '.join(labels) or 'none'}")
    h200 = [ev.label(n) for n in ON_H200 if n in rows and _same_run(n, ev.load(STATE))]
    return (
        "Rows that are the seed-0 runs of the sections above (the same final accuracy to the "
        "last digit): "
        + "; ".join(parts)
        + "."
        + (
            f" {', '.join(h200)}'s wall time is therefore the H200's, not the CPU's."
            if h200
            else ""
        )
    )


def _seed0_notes(t: dict[str, Any]) -> list[str]:
    rows = t["rows"]
    acc = {n: r["final_accuracy"] for n, r in rows.items()}
    order = sorted((n for n in rows if not ev.is_oracle(n)), key=lambda n: -acc[n])
    rip, base = _ripple(order), [n for n in order if not ev.is_ripple(n)]
    clus = next(n for n in base if n in ("ifca", "fesem", "cfl", "flux"))
    above = min(acc[n] for n in rip) > acc[base[0]]
    beat = [ev.label(n) for n in base if pdiff(acc[n], acc["local"]) > 0]
    wall = rows[clus]["wall_seconds"] / rows["fedavg"]["wall_seconds"]
    robust = [n for n in ("krum", "fedtrimmedavg", "fedmedian") if n in rows]
    under = all(acc[n] < acc["fedavg"] for n in robust)

    def ari(key: str) -> str:
        return value_range([rows[n][key] for n in rip], ".3f", 1)

    return [
        f"- Ripple's variants score {value_range([acc[n] for n in rip])}%: "
        + ("every one above every baseline" if above else "not every one above every baseline")
        + f", at {max(rows[n]['bytes_ratio_vs_fedavg'] for n in rip):.1f}x FedAvg's traffic. "
        f"The best baseline is {ev.label(base[0])} ({ev.pct(acc[base[0]])}%); the best "
        f"clustered one, {ev.label(clus)} ({ev.pct(acc[clus])}%), needs "
        f"{rows[clus]['bytes_ratio_vs_fedavg']:.1f}x FedAvg's bytes per round (every cluster "
        f"model goes down to each client) and {wall:.1f}x its wall time (each client evaluates "
        f"every cluster model). Local-only training reaches {ev.pct(acc['local'])}%; "
        + (
            f"of the baselines only {', '.join(beat)} above it."
            if beat
            else "no baseline above it."
        ),
        f"- Clusters: Ripple's routing gives ARI {ari('ari_hard')} over the hard clients "
        f"before round 1 ({ari('ari_all')} over all clients). At the end, ARI hard / all: "
        f"IFCA's {rows['ifca']['models']} models {_pair(rows['ifca'])}; CFL ended with "
        f"{rows['cfl']['models']} clusters, {_pair(rows['cfl'])}; FeSEM's "
        f"{rows['fesem']['models']} clusters {_pair(rows['fesem'])}.",
        f"- {', '.join(ev.label(n) for n in robust)} ("
        + ", ".join(ev.pct(acc[n]) for n in robust)
        + ") are robust aggregators, not personalised methods: under this heterogeneity they "
        + ("are all below" if under else "are not all below")
        + f" FedAvg ({ev.pct(acc['fedavg'])}).",
    ]


def _pair(row: dict[str, Any]) -> str:
    return f"{row['ari_hard']:.3f} / {row['ari_all']:.3f}"


BLOCKS = {
    "docs/results.md": {
        "history-accuracy-2seeds": accuracy_two_seeds,
        "history-flower": flower,
        "history-with-state": with_state,
        "history-perfedavg-curve": perfedavg_vs_fedavg,
        "history-state-curves": state_vs_fedavg,
        "history-fedavg-seed0": fedavg_seed0,
        "history-perfedavg-beta": perfedavg_beta,
        "history-table1-seed0": table1_seed0,
    }
}
