"""results.md's blocks on the baselines as their authors wrote them, and Table 1's notes.

Read from the committed ``docs/results/`` only: the seed-0 before/after records
(``baselines_seed0/``, ``options_off/``, seed 0's Table 1), the kept run summaries
(``runs/table1-fashion-mnist/``, ``runs/table1-fesem-*/``, ``runs/table1-options-off/``,
``runs/table1-cfl-rerun/``) and the three-seed Table 1 and CFL re-run JSON lines.
"""

from __future__ import annotations

import statistics
from typing import Any

from paper import evidence as ev
from paper.evidence_history import SEED0, stat, value_range
from paper.evidence_table1 import TABLE1, TABLE1_RUNS
from ripple_flwr.runs.statistics import above_chance

B0 = "baselines_seed0/"
# Each before/after row: the method, its record, and the setting it ran with (declared: the
# older records keep no settings; "before" is the earlier Table 1's row).
AUTHORS = (
    ("fesem", SEED0, "before: K distinct initialisations, nearest centre (L2, whole model)"),
    (
        "fesem",
        B0 + "fesem_authors.json",
        "the authors': one initialisation, K-means (1 Lloyd iteration) over the last layer "
        "every 10 rounds",
    ),
    ("fesem", B0 + "fesem_update_points_100rounds.json", '`fesem-points = "update"`'),
    (
        "fesem",
        B0 + "fesem_converged_kmeans_100rounds.json",
        "`fesem-kmeans-iters = 0` (K-means to convergence)",
    ),
    ("fesem", B0 + "fesem_update_points_converged_kmeans_100rounds.json", "both"),
    ("cfl", SEED0, "before: average, then split; eps 0.35 / 0.9; warm-up 60"),
    ("cfl", B0 + "cfl_reference_eps_paper_threshold.json", "the references' eps 0.4 / 1.6"),
    (
        "cfl",
        B0 + "cfl_paper_threshold.json",
        "eps 0.35 / 0.9 and the paper's `cfl-max-similarity = 0.5`",
    ),
    (
        "cfl",
        B0 + "cfl_default.json",
        "**default**: split first, eps 0.35 / 0.9, no similarity test (the reference code)",
    ),
    ("perfedavg", SEED0, "before: beta 1e-3 through the momentum optimiser"),
    ("perfedavg", B0 + "perfedavg.json", "the references': plain-SGD beta step, beta = lr = 0.01"),
    ("ifca", B0 + "ifca_first_draw_100rounds.json", "first draw (the default)"),
    (
        "ifca",
        B0 + "ifca_redraw_100rounds.json",
        "the original's re-draw, `ifca-init-balance = 0.4`",
    ),
)
# The option each options_off record turns off, and the file of its kept summary.
OPTIONS = (
    ("scaffold", "scaffold_noclip.json", "scaffold-noclip", "scaffold-grad-clip"),
    ("feddyn", "feddyn_noclip.json", "feddyn-noclip", "feddyn-grad-clip"),
    ("pfedme", "pfedme_nomu.json", "pfedme-nomu", "pfedme-mu"),
)
# FeSEM's sampling runs: the kept summaries' folder and what the row is (declared).
SAMPLING = (
    ("table1-fesem-global", " (the default)"),
    ("table1-fesem-global-cpr32", ""),
    ("table1-fesem-per-cluster", " (the authors')"),
)


def _value(v: Any) -> Any:
    """A cell of either record format: a stat's mean, a one-seed list's value, or itself."""
    if isinstance(v, dict):
        return v.get("mean") if "mean" in v else next(iter(v.values()))
    return v[0] if isinstance(v, list) else v


def before_after(method: str, name: str) -> dict[str, Any]:
    """One before/after record's row in one shape, whichever format the record has."""
    rec = ev.load(name)
    r = rec["rows"][method]
    return {
        "acc": _value(r["final_accuracy"]),
        "first": _value(r["first_round_target"]),
        "models": _value(r["models"]),
        "ari": (_value(r.get("ari_hard")), _value(r.get("ari_all"))),
        "rounds": rec["rounds"],
        "commit": (rec.get("machine") or {}).get("commit"),
        "curve": _curve(rec["curves"][method]),
    }


def _curve(c: Any) -> tuple[list[int], list[float]]:
    """(rounds, accuracy): the earlier ``[rounds, values]`` or the newer dict's mean."""
    return (c["rounds"], c["mean"]) if isinstance(c, dict) else (c[0], c[1])


def _ari(pair: tuple[float | None, float | None]) -> str:
    return "-" if pair[0] is None else f"{pair[0]:.3f} / {pair[1]:.3f}"


def authors_table() -> str:
    """Every before/after row of issue 22, from its record."""
    lines = [
        "| method | setting | rounds | final acc. (%) | first round >= 80% | clusters "
        "| ARI vs class, hard / all (end) | record (made at) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method, name, setting in AUTHORS:
        r = before_after(method, name)
        first = "never" if r["first"] is None else f"{r['first']:.0f}"
        made = f"`{r['commit']}`" if r["commit"] else "not recorded"
        lines.append(
            f"| {ev.label(method)} | {setting} | {r['rounds']} | {ev.pct(r['acc'])} | {first} "
            f"| {r['models']} | {_ari(r['ari'])} | [{name.split('/')[-1]}](results/{name}) "
            f"({made}) |"
        )
    return "\n".join(lines)


def _row(method: str, setting_prefix: str) -> dict[str, Any]:
    name = next(n for m, n, s in AUTHORS if m == method and s.startswith(setting_prefix))
    return before_after(method, name)


def fesem_authors() -> str:
    """Inline: the authors' FeSEM against the old variant and the update-points variant."""
    old, new = _row("fesem", "before"), _row("fesem", "the authors'")
    upd = _row("fesem", "`fesem-points")
    rounds, values = new["curve"]
    window = [i for i, r in enumerate(rounds) if r <= upd["rounds"]][-3:]
    late = sum(values[i] for i in window) / len(window)
    word = "below" if ev.shown(stat(new["acc"])) < ev.shown(stat(old["acc"])) else "not below"
    return (
        f"its clusters do not follow the classes (ARI {_ari(new['ari'])}, hard / all), and its "
        f"accuracy is {word} the old variant's ({ev.pct(new['acc'])}% against "
        f"{ev.pct(old['acc'])}%): after each reassignment many clients are scored with a "
        "centre that was not trained on data like theirs (over rounds "
        f"{rounds[window[0]]}-{rounds[window[-1]]} it averages {ev.pct(late)}%, the "
        f"update-points variant's {upd['rounds']}-round run ends at {ev.pct(upd['acc'])}%)"
    )


def kept(folder: str, row: str, **where: str) -> list[dict[str, Any]]:
    """One row's kept summaries in the tables' seed order."""
    found = [
        s
        for s in ev.summaries(folder)
        if s["row"] == row and all(s.get(k) == v for k, v in where.items())
    ]
    return sorted(found, key=lambda s: ev.SEED_ORDER.index(int(s["seed"])))


def tests(runs: list[dict[str, Any]], which: str) -> list[dict[str, Any]]:
    """The runs' permutation tests of the ARI over the ``hard`` or ``all`` clients."""
    return [s["clusters"][f"{which}_test"] for s in runs]


def _joined(values: list[float], spec: str) -> str:
    return " / ".join(format(v, spec) for v in values)


def chance(tests: list[dict[str, Any]]) -> str:
    """Where the seeds' permutation tests put the ARI (the one rule, ``above_chance``)."""
    return above_chance([t["p_value"] for t in tests])


def fesem_k10_ari() -> str:
    """Inline: FeSEM's K = 10 clusters at three seeds against chance, IFCA's and CFL's."""
    k10 = kept(TABLE1_RUNS, "fesem", k="10", rounds="300")
    k2 = kept(TABLE1_RUNS, "fesem", k="2", rounds="300")
    alls, hards = tests(k10, "all"), tests(k10, "hard")
    rows = ev.load(TABLE1)["rows"]
    ifca = kept(TABLE1_RUNS, "ifca", k=str(rows["ifca"]["k"]), rounds="300")[0]
    cfl = kept(TABLE1_RUNS, "cfl", k="10", rounds="300", seed=ifca["seed"])[0]
    mean_all = statistics.mean(t["ari"] for t in alls)
    more = [n for n in ("ifca", "cfl") if rows[n]["ari_all"]["mean"] > mean_all]
    than = " and ".join(f"{ev.label(n)}'s ({rows[n]['ari_all']['mean']:.3f})" for n in more)
    return (
        f"FeSEM's clusters at K = 10 score ARI {_joined([t['ari'] for t in alls], '.3f')} over "
        f"all {alls[0]['clients']} clients (seeds {' / '.join(s['seed'] for s in k10)}) against "
        f"chance's 99th percentile of {value_range([t['null_q99'] for t in alls], '.3f', 1)}: "
        f"{chance(alls)}, and weakly; over the {hards[0]['clients']} hard clients the test "
        f"finds them {chance(hards)}. At seed {ifca['seed']}, IFCA's K = {ifca['k']} row scores "
        f"{ifca['clusters']['all_test']['ari']:.3f} over all clients "
        f"(p {ifca['clusters']['all_test']['p_value']:.3f}) and CFL's {cfl['ari_all']:.3f} (its "
        "summary predates the test). At its best-accuracy K = 2 (the table's row) FeSEM's two "
        f"clusters are {chance(tests(k2, 'all'))} over all clients. So FeSEM leaves its cold "
        "start and its K = 10 clusters carry a little of the class structure (mean ARI "
        f"{mean_all:.3f} over all clients), "
        + (f"less than {than} in the table" if more else "no less than IFCA's or CFL's")
    )


def cfl_authors() -> str:
    """Inline: CFL in the references' order against before, and the two thresholds."""
    old, new = _row("cfl", "before"), _row("cfl", "**default**")
    never = [_row("cfl", p) for p in ("the references'", "eps 0.35 / 0.9 and")]
    fedavg = ev.load(SEED0)["rows"]["fedavg"]["final_accuracy"]
    fewer = "fewer" if new["models"] < old["models"] else "not fewer"
    purer = "purer" if new["ari"][0] > old["ari"][0] else "not purer"
    kept_ = sorted({r["models"] for r in never})
    split = " (it never splits)" if kept_ == [1] else ""
    return (
        f"ends with {fewer}, {purer} clusters than before ({new['models']} against "
        f"{old['models']}; {ev.pct(new['acc'])}% against {ev.pct(old['acc'])}%, ARI over the "
        f"hard clients {new['ari'][0]:.3f} against {old['ari'][0]:.3f}). With the references' "
        f"thresholds or the paper's similarity test it keeps {' / '.join(map(str, kept_))} "
        f"cluster{split} and scores {value_range([r['acc'] for r in never])}%, where FedAvg's "
        f"one model scores {ev.pct(fedavg)}% at seed 0"
    )


def perfedavg_authors() -> str:
    """Inline: what the references' Per-FedAvg gains, and where it stands at seed 0."""
    old, new = _row("perfedavg", "before"), _row("perfedavg", "the references'")
    rows = ev.load(SEED0)["rows"]
    one = [n for n, r in rows.items() if r["models"] == 1 and n != "perfedavg"]
    above = [
        n for n in one if ev.shown(stat(rows[n]["final_accuracy"])) > ev.shown(stat(new["acc"]))
    ]
    where = (
        "the best seed-0 row of one server model"
        if not above
        else "among the seed-0 rows with one server model below only "
        + ", ".join(f"{ev.label(n)}'s {ev.pct(rows[n]['final_accuracy'])}%" for n in above)
    )
    return (
        f"gains {ev.points(stat(new['acc']), stat(old['acc']))} points ({ev.pct(new['acc'])}%, "
        f"{where}; >= 80% from round {new['first']:.0f}, "
        + ("never before" if old["first"] is None else f"round {old['first']:.0f} before")
        + ")"
    )


def ifca_authors() -> str:
    """Inline: IFCA's re-draw against its first draw."""
    first, redraw = _row("ifca", "first draw"), _row("ifca", "the original's")
    better = ev.shown(stat(redraw["acc"])) > ev.shown(stat(first["acc"]))
    return (
        f"scores {ev.pct(redraw['acc'])}% against the first draw's "
        f"{ev.pct(first['acc'])}% at round {first['rounds']} (ARI over all clients "
        f"{redraw['ari'][1]:.3f} against {first['ari'][1]:.3f}) and is "
        + ("better" if better else "no better")
    )


def options_off() -> str:
    """Inline: each option off at one seed against the same seed's Table 1 row."""
    rows, parts, inside = ev.load(TABLE1)["rows"], [], []
    for method, record, folder, key in OPTIONS:
        off = kept(f"table1-options-off/{folder}", method)[0]
        seed = off["seed"]
        on = kept(TABLE1_RUNS, method, k="10", rounds=off["rounds"], seed=seed)[0]
        table = rows[method]["final_accuracy"]
        parts.append(
            f"{ev.label(method)} {ev.pct(off['final_accuracy'])}% with `{key} = "
            f"{off['settings'][key]:g}` against {ev.pct(on['final_accuracy'])}% with "
            f"{on['settings'][key]:g}"
        )
        gap = abs(off["final_accuracy"] - on["final_accuracy"])
        inside.append((gap < 2 * table["sigma"], ev.pct(2 * table["sigma"])))
        rec = ev.load("options_off/" + record)
    verdict = (
        "each difference is inside that method's three-seed interval"
        if all(ok for ok, _ in inside)
        else f"{sum(ok for ok, _ in inside)} of {len(inside)} differences are inside that "
        "method's three-seed interval"
    )
    lead = (
        "the references' terms change nothing measurable here"
        if all(ok for ok, _ in inside)
        else "not every one of the references' terms is inside the noise"
    )
    return (
        f"{lead}. At seed {seed}, {rec['rounds']} rounds, with the option off against the same "
        "seed's Table 1 row (option at its default): "
        + ", ".join(parts)
        + f"; {verdict} (± "
        + ", ± ".join(w for _, w in inside)
        + f"). Made on {ev.machine(rec)}"
    )


def _stat(values: list[float]) -> dict[str, Any]:
    """Mean and sample standard deviation of per-seed values, as the tables keep them."""
    sigma = statistics.stdev(values) if len(values) > 1 else None
    return {"mean": statistics.mean(values), "sigma": sigma}


def _sampling_row(folder: str) -> dict[str, Any]:
    runs = kept(folder, "fesem")
    s = runs[0]["settings"]
    return {
        "runs": runs,
        "sampling": s["fesem-sampling"],
        "cpr": s["clients-per-round"],
        "acc": _stat([r["final_accuracy"] for r in runs]),
        "bytes": _stat([r["bytes_ratio_vs_fedavg"] for r in runs]),
        "hard": tests(runs, "hard"),
        "all": tests(runs, "all"),
    }


def fesem_sampling() -> str:
    """FeSEM's sampling rules at K = 4: the table, then what the gap is made of."""
    rows = [{**_sampling_row(f), "note": note} for f, note in SAMPLING]
    r0 = rows[0]["runs"][0]
    lines = [
        f"At K = {r0['k']}, {r0['rounds']} rounds, seeds "
        + " / ".join(r["seed"] for r in rows[0]["runs"])
        + " (mean ± 2 sigma; bytes against FedAvg's at the row's clients a round; ARI at the "
        "end, hard / all, p the largest over the seeds):",
        "",
        "| sampling | final acc. (%) | bytes/round vs FedAvg | ARI vs class, hard / all |",
        "|---|---|---|---|",
    ]
    for r in rows:
        each = "up to {} in each cluster" if r["sampling"] == "per-cluster" else "{} a round"
        kind = f"{r['sampling']}, {each.format(r['cpr'])}{r['note']}"
        ari = " / ".join(f"{statistics.mean(t['ari'] for t in r[w]):.3f}" for w in ("hard", "all"))
        p = " / ".join(f"{max(t['p_value'] for t in r[w]):.3f}" for w in ("hard", "all"))
        lines.append(
            f"| {kind} | {ev.cell(r['acc'])} | {ev.plain(r['bytes'], '.2f')} | {ari} (p <= {p}) |"
        )
    return "\n".join([*lines, "", _sampling_text(rows)])


def _sampling_text(rows: list[dict[str, Any]]) -> str:
    base, big, per = rows
    gain = ev.shown(per["acc"]) - ev.shown(base["acc"])
    part = ev.shown(big["acc"]) - ev.shown(base["acc"])
    ari = [statistics.mean(t["ari"] for t in r["all"]) for r in (base, per)]
    both = per["acc"]["mean"] > base["acc"]["mean"] and ari[1] > ari[0]
    most = "most" if part > gain / 2 else "less than half"
    rip = [
        v
        for n, r in ev.load(TABLE1)["rows"].items()
        if ev.is_ripple(n) and not ev.is_oracle(n)
        for v in r["ari_all"]["per_seed"].values()
    ]
    return (
        "The authors' per-cluster sampling is "
        + ("better on both counts" if both else "not better on both counts")
        + f" ({ev.cell(per['acc'])}% against {ev.cell(base['acc'])}%; ARI over all clients "
        f"{ari[1]:.3f} against {ari[0]:.3f}); its rounds send {per['bytes']['mean']:.2f}x the "
        f"bytes of a {base['cpr']}-client round, so train about "
        f"{per['bytes']['mean'] * base['cpr']:.0f} clients. The global draw at {big['cpr']} a "
        f"round recovers {part:.1f} of its {gain:.1f} points ({most} of the gain is only the "
        "larger rounds); the rest is that every centre is trained every round. Its clusters are "
        f"{chance(per['all'])} over all clients, "
        + ("far below" if max(t["ari"] for t in per["all"]) < min(rip) else "not below")
        + " Ripple's before "
        f"round 1 ({value_range(rip, '.3f', 1)} over all clients, Table 1's seeds)."
    )


BLOCKS = {
    "docs/results.md": {
        "history-authors-table": authors_table,
        "history-fesem-authors": fesem_authors,
        "history-fesem-k10-ari": fesem_k10_ari,
        "history-cfl-authors": cfl_authors,
        "history-perfedavg-authors": perfedavg_authors,
        "history-ifca-authors": ifca_authors,
        "history-options-off": options_off,
        "history-fesem-sampling": fesem_sampling,
    }
}
