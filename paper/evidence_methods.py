"""Measured numbers of docs/methods.md, from the committed results.

Every number is read from a file under ``docs/results/``: Table 1's record and its kept
run summaries (the FedOpt step size, the bytes per round, one IFCA run's cluster sizes),
the seed-0 baselines under ``baselines_seed0/`` (IFCA's re-draw, CFL's thresholds,
Per-FedAvg's beta step) against the earlier seed-0 table, and CFL's three-seed re-run.
What the page once quoted without a file (FedOpt's step-size sweep on mnist-5k, pFedMe's
and Per-FedAvg's old learning speed, FeSEM's old distances, CFL's update norms) is not
quoted.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from paper import evidence as ev
from paper.evidence_bench import one
from paper.evidence_bench_runs import BASELINES, ifca_redraw
from paper.evidence_table1 import TABLE1, TABLE1_RUNS

OLD_SEED0 = "table1_fashion_300rounds_seed0.json"
CFL_RERUN = "table1_cfl_rerun_3seeds.json"
CFL_RERUN_RUNS = "table1-cfl-rerun"
FEDOPT = ("fedadam", "fedyogi", "fedadagrad")
STATEFUL = ("scaffold", "feddyn", "perfedavg", "pfedme")


def _md(name: str) -> str:
    """A link to a record's Markdown table (``.md`` beside the ``.json``)."""
    md = name.removesuffix(".json") + ".md"
    return f"[results/{md}](results/{md})"


def _file(name: str) -> str:
    return f"[results/{name}](results/{name})"


def _row(name: str) -> dict[str, Any]:
    """The one row of a one-method record."""
    return next(iter(one(name)["rows"].values()))


def _acc(row: dict[str, Any]) -> float:
    value = row["final_accuracy"]
    return value["mean"] if isinstance(value, dict) else value


def _models(row: dict[str, Any]) -> int:
    models = row["models"]
    return next(iter(models.values())) if isinstance(models, dict) else models


def _setting(folder: str, rows: tuple[str, ...], key: str) -> str:
    """The one value of ``key`` in the rows' kept summaries that recorded it."""
    values = {
        s["settings"][key]
        for s in ev.summaries(folder)
        if s["row"] in rows and key in s.get("settings", {})
    }
    if len(values) != 1:
        raise ValueError(f"{folder}: {key} is {sorted(values)} over {rows}")
    return str(values.pop())


def fedopt_table1() -> str:
    """Inline: the FedOpt strategies at their default step size on Table 1's protocol."""
    t = ev.load(TABLE1)
    rows = t["rows"]
    eta = _setting(TABLE1_RUNS, FEDOPT, "fedopt-eta")
    cells = ", ".join(f"{ev.label(n)} {ev.cell(rows[n]['final_accuracy'])}%" for n in FEDOPT)
    return (
        f"Table 1 ({t['dataset']}, {t['rounds']} rounds, {ev.seeds_text(t['seeds'])}, "
        f"{_md(TABLE1)}) ran them at `fedopt-eta = {eta}` (its runs' summaries): {cells}, "
        f"against FedAvg's {ev.cell(rows['fedavg']['final_accuracy'])}%"
    )


def stateful_bytes() -> str:
    """Sentence: the bytes per round of the methods with state, from Table 1's record."""
    t = ev.load(TABLE1)
    rows = t["rows"]

    def ratio(name: str) -> str:
        stat = rows[name]["bytes_ratio_vs_fedavg"]
        return f"{stat['mean']:.3f}x" if not stat.get("sigma") else f"{ev.plain(stat)}x"

    same = all(not rows[n]["bytes_ratio_vs_fedavg"].get("sigma") for n in STATEFUL)
    rest = [n for n in STATEFUL if n != "scaffold"]
    groups: dict[str, list[str]] = {}
    for n in rest:
        groups.setdefault(ratio(n), []).append(ev.label(n))
    others = "; ".join(
        f"{', '.join(names[:-1]) + ' and ' + names[-1] if len(names) > 1 else names[0]} {r}"
        for r, names in groups.items()
    )
    return (
        f"Bytes per round, measured from the messages (Table 1's record, "
        f"{ev.seeds_text(t['seeds'])}"
        + (", the same at every seed" if same else ", mean ± 2 sigma")
        + f"): SCAFFOLD {ratio('scaffold')} FedAvg (model and c down, model and delta c up), "
        f"{others}."
    )


def perfedavg_before() -> str:
    """Inline: Per-FedAvg with the plain-SGD beta step against the momentum one, seed 0."""
    new, old = _row(f"{BASELINES}/perfedavg.json"), ev.load(OLD_SEED0)["rows"]["perfedavg"]
    rec = one(f"{BASELINES}/perfedavg.json")
    return (
        f"on the tables' protocol at seed 0 ({rec['rounds']} rounds) it ends at "
        f"{100 * _acc(new):.1f}% with the plain step against {100 * _acc(old):.1f}% before "
        f"({_file(f'{BASELINES}/perfedavg.json')}, {_file(OLD_SEED0)})"
    )


def ifca_sizes() -> str:
    """Inline: the largest clusters of Table 1's K = 10 IFCA run from its first draw."""
    runs = [s for s in ev.summaries(TABLE1_RUNS) if s["row"] == "ifca" and s["k"] == "10"]
    if len(runs) != 1:
        raise ValueError(f"{TABLE1_RUNS}: {len(runs)} IFCA runs at K = 10")
    run = runs[0]
    labels = run["clusters"]["labels"]
    top = sorted(Counter(labels).values(), reverse=True)
    balance = run["settings"]["ifca-init-balance"]
    kept = f"runs/{TABLE1_RUNS}/{run['file']}"
    draw = "from its first draw" if not balance else f"at `ifca-init-balance = {balance}`"
    return (
        f"in Table 1's K sweep, the K = {run['k']} run {draw} (seed {run['seed']}, "
        f"{run['rounds']} rounds, "
        f"{_file(kept)}), two of its {run['models']} models held {top[0]} and {top[1]} of "
        f"the {len(labels)} clients at the end"
    )


def ifca_balance() -> str:
    """Inline: IFCA's re-draw against its first draw (seed 0, 100 rounds)."""
    return ifca_redraw()


def cfl_reference_eps() -> str:
    """Inline: CFL with the reference code's EPS_1 / EPS_2 and the paper's similarity test."""
    row = _row(f"{BASELINES}/cfl_reference_eps_paper_threshold.json")
    ended = (
        "never split: one model at the end, i.e. FedAvg"
        if _models(row) == 1
        else f"ended with {_models(row)} clusters"
    )
    return (
        f"{ended} ({100 * _acc(row):.1f}%, "
        f"{_file(f'{BASELINES}/cfl_reference_eps_paper_threshold.json')})"
    )


def cfl_paper_threshold() -> str:
    """Inline: CFL with the defaults' eps and the paper's similarity threshold."""
    row = _row(f"{BASELINES}/cfl_paper_threshold.json")
    split = _models(_row(f"{BASELINES}/cfl_default.json")) > 1
    if _models(row) > 1:
        ended = f"still split, to {_models(row)} clusters"
    elif split:  # the same seed splits without the test: the test refused those splits
        ended = "refused every split: one model at the end, FedAvg again"
    else:
        ended = "never split: one model at the end, FedAvg again"
    return f"{ended} ({100 * _acc(row):.1f}%, {_file(f'{BASELINES}/cfl_paper_threshold.json')})"


def cfl_default() -> str:
    """Inline: CFL at its defaults, seed 0 and the three-seed re-run."""
    row = _row(f"{BASELINES}/cfl_default.json")
    t = ev.load(CFL_RERUN)
    rerun = t["rows"]["cfl"]
    sim = _setting(CFL_RERUN_RUNS, ("cfl",), "cfl-max-similarity")
    models = ", ".join(str(rerun["models"][str(s)]) for s in t["seeds"])
    return (
        f"{100 * _acc(row):.1f}% with {_models(row)} clusters at seed 0, "
        f"{_file(f'{BASELINES}/cfl_default.json')}; at {ev.seeds_text(t['seeds'])} "
        f"(`cfl-max-similarity = {sim}`) {ev.cell(rerun['final_accuracy'])}% with "
        f"{models} clusters, {_md(CFL_RERUN)}"
    )


def one_shot_bytes() -> str:
    """Sentence: what one client sends once (Ripple's summary, PACFL's subspaces), measured by
    ``benchmarks/summary_bytes.py``."""
    d = one("summary_bytes.json")
    b = d["summary_bytes"]
    return (
        f"Sent once per client, measured on the map's protocol ({d['protocol']['dataset']}, "
        f"Dir({d['protocol']['alpha']}), the largest over {d['protocol']['num-partitions']} "
        f"clients, {_file('summary_bytes.json')}): PACFL's subspaces {b['pacfl']:,} B, "
        f"Ripple's WST embedding {b['ripple (gmm-vae)']:,} B (mean unmixing's mean image "
        f"{b['ripple (mean-unmixing)']:,} B; class-conditional Ripple adds its per-label block: "
        f"{b['ripple class-conditional (gmm-vae)']:,} B and "
        f"{b['ripple class-conditional (mean-unmixing)']:,} B), against {d['model_bytes']:,} B "
        "for one model."
    )


def cluster_optimizer_time() -> str:
    """Sentence: the server time of a round's cluster step, per optimiser, measured by
    ``benchmarks/cluster_optimizer.py``."""
    d = one("cluster_optimizer.json")
    parts = []
    for k, row in d["seconds"].items():
        others = ", ".join(f"{o} {1000 * s:.0f} ms" for o, s in row.items() if o != "none")
        parts.append(f"K = {k}: `none` {1000 * row['none']:.1f} ms, {others}")
    floor = d.get("fedopt_memory_floor_seconds")
    floor_text = (
        " Any FedYogi or FedAdam step reads 4 and writes 3 arrays of the K models' size on top "
        "of `none` (now, target and both moments in; both moments and the new models out); "
        "that traffic alone, through plain copies, takes "
        + ", ".join(f"{1000 * s:.1f} ms at K = {k}" for k, s in floor.items())
        + (
            ", more than half of `none`'s time: no such step can stay within 1.5x `none`."
            if all(s > 0.5 * d["seconds"][k]["none"] for k, s in floor.items())
            else "."
        )
        if floor
        else ""
    )
    return (
        f"Server time of one round's cluster step (median; {d['clients']} replies, a "
        f"{d['model_parameters']:,}-parameter model, {d['machine']}, "
        f"{_file('cluster_optimizer.json')}): " + "; ".join(parts) + "." + floor_text
    )


BLOCKS = {
    "docs/methods.md": {
        "methods-one-shot-bytes": one_shot_bytes,
        "methods-cluster-optimizer-time": cluster_optimizer_time,
        "methods-fedopt": fedopt_table1,
        "methods-stateful-bytes": stateful_bytes,
        "methods-perfedavg-before": perfedavg_before,
        "methods-ifca-sizes": ifca_sizes,
        "methods-ifca-balance": ifca_balance,
        "methods-cfl-reference-eps": cfl_reference_eps,
        "methods-cfl-paper-threshold": cfl_paper_threshold,
        "methods-cfl-default": cfl_default,
    },
}
