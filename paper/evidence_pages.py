"""Table 2, the figures' provenance, Ripple-HDB's numbers and the default run, for the pages.

Read from the committed ``docs/results/`` only (see :mod:`paper.evidence`).
"""

from __future__ import annotations

from typing import Any

from paper import evidence as ev
from paper.evidence_map import MAP
from paper.evidence_table1 import MARKS, ROTATED1, TABLE1

TABLE2 = "table2_fashion_100rounds_3seeds.json"
ROTATED2 = "table2_rotated_fashion_100rounds_seed42.json"
DEFAULT_RUN = "default_run_mnist5k.json"
RIPPLE2 = ("ripple-strat", "ripple-unif", "ripple-hdb")

# Each figure, the record it was drawn from, and what its own footer says (read off the
# PNGs at 982f582; a figure cannot be read back here, so this column is declared).
FIGURES = (
    (
        "accuracy-fashion-mnist-300rounds.png",
        "Ripple, oracle, local-only, FedAvg",
        "accuracy_fashion_300rounds_2seeds.json",
        "none",
    ),
    (
        "accuracy-fashion-mnist-flower-300rounds.png",
        "Flower's one-model strategies",
        "accuracy_fashion_300rounds_flower_seed0.json",
        "none",
    ),
    (
        "accuracy-fashion-mnist-baselines-300rounds.png",
        "SCAFFOLD, FedDyn, Per-FedAvg, pFedMe",
        "accuracy_fashion_300rounds_baselines_seed0.json",
        "none",
    ),
    (
        "table1-fashion-mnist-300rounds-3seeds.png",
        "Table 1, every method, three seeds",
        TABLE1,
        "machine and commit",
    ),
    (
        "table1-fashion-mnist-300rounds.png",
        "Table 1, earlier protocol",
        "table1_fashion_300rounds_seed0.json",
        "none",
    ),
    (
        "table1-rotated-fashion-mnist-100rounds.png",
        "Table 1 on rotated data (one seed: its title says so and draws no band)",
        ROTATED1,
        "machine and commit",
    ),
    (
        "table2-fashion-mnist-100rounds-3seeds.png",
        "Table 2, three seeds",
        TABLE2,
        "machine and commit",
    ),
    (
        "table2-rotated-fashion-mnist-100rounds.png",
        "Table 2 on rotated data (one seed: its title says so and draws no error bars)",
        ROTATED2,
        "machine and commit",
    ),
    (
        "table1-ifca-assignment.png",
        "IFCA's clusters x dominant class (earlier protocol)",
        "table1_fashion_300rounds_seed0.json",
        "none",
    ),
    (
        "table1-cfl-assignment.png",
        "CFL's clusters x dominant class (earlier protocol)",
        "table1_fashion_300rounds_seed0.json",
        "none",
    ),
    (
        "baselines-before-after.png",
        "baselines before and after issue 22",
        None,
        "machine and commit of the figure and of the runs",
    ),
    (
        "baselines-options-before-after.png",
        "pFedMe, SCAFFOLD, FedDyn, option off and on",
        None,
        "machine and commit",
    ),
    (
        "embedding-dp-accuracy.png",
        "Ripple with a DP embedding",
        "embedding_dp_accuracy.json",
        "none",
    ),
)


def _seeds(record: dict[str, Any]) -> list[int]:
    return record.get("seeds") or ([record["seed"]] if "seed" in record else [])


def figures() -> str:
    """One row per figure: its seeds, where it was made and what its footer says."""
    lines = [
        "| figure | what | seeds | made on (from its record) | its footer names |",
        "|---|---|---|---|---|",
    ]
    for png, what, record, footer in FIGURES:
        rec = ev.load(record) if record else {}
        seeds = ", ".join(map(str, _seeds(rec))) or "in its title"
        src = f"[{record}](results/{record}): {ev.machine(rec)}" if record else "see its footer"
        lines.append(f"| [{png}]({png}) | {what} | {seeds} | {src} | {footer} |")
    lines += [
        "",
        "A figure whose footer names nothing, and whose record names no machine, was drawn "
        "before the tables recorded it; `git log -- docs/<figure>` gives the commit that added it.",
    ]
    return "\n".join(lines)


def _where2(t: dict[str, Any]) -> str:
    return (
        f"**{t['dataset']}**: {t['clients']} training clients x 200 images, Dir(alpha_train) "
        f"over the {t['label_kind']} labels, K = {t['num_components']}, **{t['rounds']} rounds, "
        f"{ev.seeds_text(t['seeds'])}**; then 10 new clients of 200 images, Dir(alpha_test), "
        "from data no training client holds, each scored zero-shot on its own test split "
        f"(zero-shot accuracy, %; {ev.interval(t['seeds'])}). Ripple's new clients get their "
        "model from one router pass (in brackets: Ripple's best single cluster model by "
        "training loss); IFCA, FeSEM and CFL send every cluster model and the new client keeps "
        "the one with the lowest loss on its own training split; FLUX uses its nearest "
        "centroid; FedAvg gives its global model. "
        f"{ev.SPREAD_COVERS} {ev.PAPER}: {t['dataset']} at {t['rounds']} rounds. Made on "
        f"{ev.machine(t)}."
    )


def _zs(t: dict[str, Any], col: str) -> dict[str, dict[str, Any]]:
    return {m: c[col]["zero_shot_accuracy"] for m, c in t["cells"].items() if col in c}


def _cell2(c: dict[str, Any], name: str, rank: int | None) -> str:
    text = ev.marked(ev.cell(c["zero_shot_accuracy"]), rank)
    if name in RIPPLE2:
        return text + f" [best cluster: {ev.cell(c['best_cluster_by_train_loss'])}]"
    return text + (f" (K={c['k']})" if c.get("k_from_sweep") or name in ("ifca", "fesem") else "")


def _lead2(t: dict[str, Any], col: str) -> str:
    zs = _zs(t, col)
    order = ev.ordered(zs)
    lead, rip = order[0], next(n for n in order if n in RIPPLE2)
    base = next(n for n in order if n not in RIPPLE2)
    other = base if lead in RIPPLE2 else rip
    who = "the best baseline" if lead in RIPPLE2 else "Ripple's best"
    text = (
        f"At {col}, {ev.label(lead)} leads with {ev.cell(zs[lead])}; {who}, {ev.label(other)}, "
        f"has {ev.cell(zs[other])}, {ev.points(zs[lead], zs[other])} points behind"
        f"{ev.ahead_text(ev.label(lead), zs[lead], zs[other])}."
    )
    strat, avg = zs["ripple-strat"], zs["fedavg"]
    if avg["mean"] > strat["mean"] and lead != "fedavg":
        text += (
            f" FedAvg's one model ({ev.cell(avg)}) is above Ripple-Strat by "
            f"{ev.points(avg, strat)} points{ev.ahead_text('FedAvg', avg, strat)}."
        )
    return text


def table2(name: str = TABLE2) -> str:
    """A Table 2 record: the table, marked per column, and who leads each column."""
    t = ev.load(name)
    cols = list(next(iter(t["cells"].values())))
    ranks = {col: ev.ranks(_zs(t, col), exclude=lambda n: False) for col in cols}
    lines = [
        _where2(t),
        "",
        "| method | " + " | ".join(f"alpha_train/alpha_test {c}" for c in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for m, cells in t["cells"].items():
        lines.append(
            f"| {ev.label(m)} | "
            + " | ".join(_cell2(cells[c], m, ranks[c].get(m)) for c in cols)
            + " |"
        )
    won = [c for c in cols if ev.ordered(_zs(t, c))[0] in RIPPLE2]
    lines += [
        "",
        MARKS.split(", over")[0] + " per column, over every row.",
        "",
        *(f"- {_lead2(t, c)}" for c in cols),
        "",
        f"A Ripple variant leads in {len(won)} of the {len(cols)} columns"
        + (f" ({', '.join(won)})." if won else "."),
    ]
    return "\n".join(lines)


def table2_rotated() -> str:
    return table2(ROTATED2)


def hdb() -> str:
    """ripple-hdb.md: what Ripple-HDB measured in the three tables, and the earlier run."""
    t1, t2, rot = ev.load(TABLE1), ev.load(TABLE2), ev.load(ROTATED1)
    row, strat = t1["rows"]["ripple-hdb-gmm-vae"], t1["rows"]["ripple-strat-gmm-vae"]
    k1 = "/".join(str(row["models"][s]) for s in map(str, t1["seeds"]))
    k2 = {
        a: "/".join(map(str, ev.summary_models("table2-fashion-mnist", "ripple-hdb", a=a, t="1")))
        for a in ("0.01", "0.1")
    }
    cells = t2["cells"]
    old = ev.load("table1_fashion_300rounds_seed0.json")["rows"]
    return (
        f"Measured on the Table 1 federation ({t1['dataset']}, Dir(0.1), {t1['rounds']} rounds, "
        f"{ev.seeds_text(t1['seeds'])}): Ripple-HDB kept K_hat = {k1} models (one per seed) "
        f"and reached "
        f"{ev.cell(row['final_accuracy'])}% (Ripple-Strat {ev.cell(strat['final_accuracy'])}%). "
        f"In Table 2 ({t2['rounds']} rounds, {ev.seeds_text(t2['seeds'])}) it kept K_hat = "
        f"{k2['0.01']} at alpha_train = 0.01 (zero-shot "
        f"{ev.cell(cells['ripple-hdb']['0.01/1']['zero_shot_accuracy'])} "
        f"against Ripple-Strat's "
        f"{ev.cell(cells['ripple-strat']['0.01/1']['zero_shot_accuracy'])} at alpha_test = 1) "
        f"and K_hat = {k2['0.1']} at 0.1. On rotated data ({rot['dataset']}, K = "
        f"{rot['num_components']}, "
        f"{ev.seeds_text(rot['seeds'])}) it kept "
        f"{rot['rows']['ripple-hdb-gmm-vae']['models']['42']} models, "
        f"ARI {ev.plain(rot['rows']['ripple-hdb-gmm-vae']['ari_hard'])} over the hard clients. "
        f"An earlier one-seed run (seed 0, the earlier protocol: K = 10, one checkpoint for "
        f"every run, "
        f"[table1_fashion_300rounds_seed0.json](results/table1_fashion_300rounds_seed0.json), "
        f"recorded at `61aa778`) found K_hat = {old['ripple-hdb-gmm-vae']['models']} and "
        f"{ev.pct(old['ripple-hdb-gmm-vae']['final_accuracy'])}% (Ripple-Strat "
        f"{ev.pct(old['ripple-strat-gmm-vae']['final_accuracy'])}%). See [results.md](results.md)."
    )


def default_run() -> str:
    """README: the default run's numbers, from its committed results file."""
    d = ev.load(DEFAULT_RUN)
    r, m = d["results"], d["made_on"]
    first = min(r["accuracy_per_round"], key=int)
    return (
        f"Measured on {m['cpus']} CPU cores (`{m['commit']}`, {m['load']}; "
        f"[docs/results/{DEFAULT_RUN}](docs/results/{DEFAULT_RUN})): "
        f"{d['flwr_run_wall_seconds']:.0f} s for `flwr run`, of which "
        f"{r['timings']['pretrain_or_load']:.0f} s pre-training the router; routing L1 "
        f"{r['routing']['l1']:.3f}, final personalised accuracy {r['final_accuracy']:.4f} "
        f"(mean of the last three evaluations), from "
        f"{r['accuracy_per_round'][first]['weighted_mean']:.4f} at round {first}. The router's "
        "pre-training is not bit-identical across machines, so another machine can give "
        "slightly different numbers."
    )


def _leaders(t: dict[str, Any]) -> str:
    cols = list(next(iter(t["cells"].values())))
    parts = []
    for col in cols:
        zs = _zs(t, col)
        lead = ev.ordered(zs)[0]
        rip = next(n for n in ev.ordered(zs) if n in RIPPLE2)
        gap = (
            ""
            if lead in RIPPLE2
            else f", {ev.points(zs[lead], zs[rip])} points above {ev.label(rip)}"
        )
        parts.append(f"{col}: {ev.label(lead)} {ev.cell(zs[lead])}{gap}")
    return "; ".join(parts)


def which_when() -> str:
    """What the four committed tables say about which method to use, and no more."""
    t1, r1, t2, r2 = ev.load(TABLE1), ev.load(ROTATED1), ev.load(TABLE2), ev.load(ROTATED2)
    a1 = {n: r["final_accuracy"] for n, r in t1["rows"].items()}
    ar = {n: r["final_accuracy"] for n, r in r1["rows"].items()}
    o1, orr = (
        ev.ordered(a1, lambda n: not ev.is_oracle(n)),
        ev.ordered(ar, lambda n: not ev.is_oracle(n)),
    )
    base1 = next(n for n in o1 if not ev.is_ripple(n))
    rip_r = next(n for n in orr if ev.is_ripple(n))
    glob = "a global server optimiser. " if r1["rows"][orr[0]]["family"] == "global" else ""
    return "\n".join(
        [
            f"- **Label skew, the training clients** (Table 1, {t1['dataset']}, Dir(0.1), "
            f"{t1['rounds']} rounds, {ev.seeds_text(t1['seeds'])}): "
            f"{'use Ripple at this skew. ' if ev.is_ripple(o1[0]) else ''}"
            f"{ev.label(o1[0])} {ev.cell(a1[o1[0]])}; the best baseline, {ev.label(base1)}, "
            f"{ev.cell(a1[base1])}{ev.paired_text(a1[o1[0]], a1[base1])}; FedAvg "
            f"{ev.cell(a1['fedavg'])}. This is Dir(0.1) only: at milder skew (the map's "
            "`label-skew-1`) a global server optimiser leads, below.",
            f"- **Label skew, new clients zero-shot** (Table 2, {t2['rounds']} rounds, "
            f"{ev.seeds_text(t2['seeds'])}), the leader per alpha_train/alpha_test: "
            f"{_leaders(t2)}. After alpha_train = 0.01 every cluster model knows about one "
            "class, so a near-uniform new client is better served by FedAvg's one model.",
            f"- **Rotation, the training clients** (rotated Table 1, {r1['rounds']} rounds, "
            f"{ev.seeds_text(r1['seeds'])}): {glob}{ev.label(orr[0])} "
            f"{ev.cell(ar[orr[0]])}, {ev.label(orr[1])} {ev.cell(ar[orr[1]])}; Ripple's best, "
            f"{ev.label(rip_r)}, {ev.cell(ar[rip_r])}, above every clustered baseline.",
            f"- **Rotation, new clients zero-shot** (rotated Table 2, {r2['rounds']} rounds, "
            f"{ev.seeds_text(r2['seeds'])}): {_leaders(r2)}.",
            "",
            "These are four tables on one dataset, two of them at one seed; this list says no "
            "more than they do. "
            + (
                _map_scope(ev.load(MAP))
                if (ev.RESULTS / MAP).is_file()
                else "Quantity skew, label skew and rotation together, and other strengths of "
                "each shift are not measured: the heterogeneity map has not been run."
            ),
        ]
    )


def _map_scope(d: dict) -> str:
    """What the committed map adds to the four tables: its cells, seeds and missing runs."""
    cells = ", ".join(f"`{c}`" for c in d["cells"])
    missing = len(d.get("missing") or [])
    state = f"{missing} of its runs still missing" if missing else "every run done"
    return (
        f"The first heterogeneity map ([archive-first-map.md](archive-first-map.md)) "
        f"adds the cells {cells} at {ev.seeds_text(d['seeds'])} "
        f"({state})."
    )


BLOCKS = {
    "README.md": {"default-run": default_run},
    "docs/results.md": {
        "table2": table2,
        "table2-rotated": table2_rotated,
        "which-method-when": which_when,
        "figures": figures,
    },
    "docs/ripple-hdb.md": {"hdb": hdb},
}
