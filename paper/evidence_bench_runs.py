"""Whole runs: docs/benchmarks.md's own-data, ten-thousand-client and long-run blocks, and
docs/baselines.md's measured numbers, from the committed results (never typed by hand).

Reads ``docs/results/`` only, through :func:`paper.evidence_bench.records`.
"""

from __future__ import annotations

from typing import Any

from paper import evidence as ev
from paper.evidence_bench import at, link, one, records
from paper.evidence_table1 import FESEM_K10, TABLE1
from ripple_flwr.runs.statistics import above_chance

SCALE = (
    ("scale.json", "with Ripple's `eval_payloads_of` in `ripple.py`, quiet, AMD EPYC"),
    ("scale_10k_2b75c29.json", "+ the Ripple override below, light load"),
    ("scale_no_override_2b75c29.json", "without the override"),
    ("scale_before_f268802.json", "(before: every client evaluated)"),
    ("scale_1k.json", "+ the override, loaded"),
    ("scale_1k_full_eval.json", "(everyone evaluated), loaded"),
)
IN_PROCESS = ("scale.json", "scale_10k_2b75c29.json", "scale_1k.json", "scale_1k_full_eval.json")
QUERY_TARGET_S = 150


def own_data() -> str:
    """A silo's own ImageFolder read, one client's embedding, and cross-silo routing."""
    one_t, two_t, emb = records("local_data.json")
    sim, dep = records("cross_silo.json")
    same = (
        "the same L1 as in simulation"
        if dep["routing_l1"] == sim["routing_l1"]
        else (f"against {sim['routing_l1']:.3f} in simulation")
    )
    found = (
        "every silo's dominant component found"
        if sim["dominant_found"]
        else ("not every silo's dominant component found")
    )

    def read(d: dict[str, Any]) -> str:
        return (
            f"{d['images_per_s']:,.0f} images/s ({d['seconds']:.1f} s), peak RSS "
            f"{d['peak_rss_mb']:.0f} MB"
        )

    return "\n".join(
        [
            f"{one_t['cpus']}-core CPU, quiet, at {at('local_data.json')} "
            f"({link('local_data.json')}, {link('cross_silo.json')}; {sim['machine']}).",
            "",
            "| what | figure |",
            "|---|---|",
            f"| ImageFolder of {one_t['images']:,} JPEGs ({one_t['size']}x{one_t['size']} RGB, "
            f"{one_t['jpeg_kb']} kB each), {one_t['workers']} decoding thread | {read(one_t)} |",
            f"| the same, {two_t['workers']} threads (the default: `min(8, cpus)`) | "
            f"{read(two_t)} |",
            f"| of which the uint8 array itself | {one_t['array_mb']:.0f} MB (float32 would be "
            f"{4 * one_t['array_mb'] / 1000:.1f} GB) |",
            f"| one client's embedding, {emb['n']} images at 3x64x64 (P = {emb['P']:,}) | "
            f"{1000 * emb['seconds_per_client']:.1f} ms ({emb['repeats']} repeats, "
            f"{emb['torch_threads']} torch threads) |",
            f"| cross-silo routing L1, simulation ({len(sim['silos'])} silos, K = 4, mixtures "
            f"0.9/0.1, 0.9/0.1, 0.8/0.2) | {sim['routing_l1']:.3f} (uniform guess: "
            f"{sim['uniform_l1']:.3f}); {found} |",
            f"| the same federation deployed ({dep['mode'].split('(')[1].rstrip(')')}, own "
            f"folders) | {dep['routing_l1']:.3f}: {same}; held-out silo L1 "
            f"{dep['held_out_l1']:.3f}, zero-shot accuracy {dep['held_out_accuracy']:.2f}; "
            f"{dep['seconds']:.0f} s wall |",
            "",
            f"Peak memory: {one_t['memory']} (torch is not imported by the reader). "
            "Decoding is CPU-bound in PIL: "
            f"the {two_t['workers']}-thread read used {two_t['cpu_per_wall']:.2f} CPU-seconds "
            f"per second and ran {two_t['images_per_s'] / one_t['images_per_s']:.2f} x the "
            "one-thread rate.",
        ]
    )


def _aborted_gb(d: dict[str, Any]) -> str:
    return d["aborted"].split("above ")[1].split(" in")[0]


def _scale_row(name: str, what: str) -> str:
    d = one(name)
    label = f"`{d['commit']}` {what} ({link(name)})"
    if d["clients"] != 10000:
        label = f"{d['clients']:,} clients, {label}"
    if "aborted" in d:
        done = d.get("phases_done_s", {})
        query = f"{done['query'][0]:.0f} s" if done.get("query") else ""
        rounds = done.get("round") or []
        rnd = f"{min(rounds):.2f}-{max(rounds):.2f} s" if rounds else ""
        cells = [query, rnd, f"stopped above {_aborted_gb(d)}", f"> {_aborted_gb(d)}", "", ""]
    else:
        cells = [
            f"{d['query_round_s']:.0f} s ({d['query_round_ledger_s']:.0f} s the round alone)",
            f"{d['round_s']:.2f} s",
            f"{d['evaluation_s']:.1f} s ({d['evaluated'][0]:,} clients)",
            f"{d['peak_memory_gb']:.2f} GB",
            f"{d['data_s']:.1f} s",
            f"{d['total_s']:.0f} s",
        ]
    return f"| {label} | " + " | ".join(cells) + " |"


def scale() -> str:
    """The in-process runs of ``scale.py``: phases, memory, and the first run's phases."""
    d = one("scale.json")
    phase = d["memory_by_phase_gb"]
    model_mb = one("federation.json")["model_bytes"] / 1e6
    return "\n".join(
        [
            "| run | query round | round | evaluation | peak memory | data | total |",
            "|---|---|---|---|---|---|---|",
            *(_scale_row(name, what) for name, what in SCALE),
            "",
            f"Per phase (the first row): {phase['query']:.1f} GB through the query round, "
            f"{phase['round']:.1f} GB in the rounds, {phase['evaluation']:.1f} GB in the "
            f"evaluation ({d['evaluated'][0]:,} personalised models of {model_mb:.1f} MB, once "
            f"as the mixed stack and once serialised). The results file is "
            f"{d['results_bytes'] / 1e6:.1f} MB (per-client routing weights, roster and "
            f"scores, {d['results_bytes'] / d['clients'] / 1000:.2f} KB a client); writing it "
            f"took {d['results_s']:.1f} s (`results_s`).",
        ]
    )


def _all_models_gb(clients: int) -> float:
    return clients * one("federation.json")["model_bytes"] / 1e9


def scale_stack() -> str:
    """Inline: the mixed stack of every client's model at 10,000 clients, and the old run."""
    before = one("scale_before_f268802.json")
    gb = _all_models_gb(before["clients"])
    return (
        f"{gb:.0f} GB for the mixed stack alone: {before['clients']:,} models of "
        f"{gb / before['clients'] * 1000:.1f} MB; the run before stopped above "
        f"{_aborted_gb(before)} in its evaluation, {link('scale_before_f268802.json')}"
    )


def scale_1k() -> str:
    """Inline: the query round at 1,000 clients over the kept runs."""
    q = [one(n)["query_round_s"] for n in IN_PROCESS if one(n)["clients"] == 1000]
    return f"1,000 clients: {min(q):.1f}-{max(q):.0f} s with the load of the moment"


def scale_target() -> str:
    """Inline: the query round's target against the kept 10,000-client runs."""
    held, missed = [], []
    runs = (("scale.json", "a quiet machine"), ("scale_10k_2b75c29.json", "a lightly loaded one"))
    for name, load in runs:
        d = one(name)
        text = f"{load} ({d['query_round_s']:.0f} s at `{d['commit']}`)"
        (held if d["query_round_s"] <= QUERY_TARGET_S else missed).append(text)
    out = [f"holds on {' and on '.join(held)}"] if held else []
    out += [f"is missed on {' and on '.join(missed)}"] if missed else []
    return f"The {QUERY_TARGET_S} s target " + "; it ".join(out)


def scale_rounds() -> str:
    """Inline: the training rounds' range over every kept in-process run."""
    rounds = [r for n in IN_PROCESS for r in one(n)["rounds_s"]]
    sizes = sorted({one(n)["clients"] for n in IN_PROCESS})
    return (
        f"{min(rounds):.2f}-{max(rounds):.2f} s over the kept in-process runs "
        f"({' and '.join(f'{s:,}' for s in sizes)} clients)"
    )


def scale_everyone() -> str:
    """Inline: what evaluating all 10,000 clients at once would hold, from the model size."""
    gb = _all_models_gb(10000)
    return f"about {2 * gb:.0f} GB: {gb:.0f} GB mixed, {gb:.0f} GB serialised"


def scale_flwr() -> str:
    """Inline: the 1,000-client federation under ``flwr run``."""
    name = "scale_flwr_1k.json"
    d = one(name)
    q = [one(n)["query_round_s"] for n in IN_PROCESS if one(n)["clients"] == d["clients"]]
    rounds = " / ".join(f"{r:.2f}" if r < 1 else f"{r:.1f}" for r in d["rounds_s"])
    return (
        f"at `{d['commit']}`, {d['cpus']} CPUs, another session's `flwr run` on the machine at "
        f"the same time; {link(name)}): query round **{d['query_round_s']:.0f} s** (in "
        f"process: {min(q):.1f}-{max(q):.0f} s), rounds {rounds} s, evaluation "
        f"{d['evaluation_s']:.1f} s, peak **{d['peak_memory_gb']:.2f} GB** over all "
        f"processes, `flwr run` {d['flwr_run_wall_s']:.0f} s in all"
    )


def long_runs() -> str:
    """The long runs whose wall time a results file kept."""
    dp = one("embedding_dp.json")
    return "\n".join(
        [
            "| what | time | commit |",
            "|---|---|---|",
            "| Table 1, per-run wall column (another benchmark sharing the cores) | see the "
            "table | `61aa778` |",
            f"| DP routing cost (`benchmarks/embedding_dp.py`, {link('embedding_dp.json')}) | "
            f"{dp['seconds']:.0f} s | {at('embedding_dp.json')} |",
            "",
            "The other long runs (`benchmarks/accuracy.py` at 300 rounds, Flower's one-model "
            "strategies, Table 2, DP in a run, `tests/processes/test_deployment_tls.py`, "
            "`tests/processes/test_ray_cluster.py`) kept no wall time in `docs/results/`, so their "
            "times are not quoted.",
        ]
    )


BASELINES = "baselines_seed0"


def _row(name: str) -> dict[str, Any]:
    """The one row of a one-method table record under ``docs/results/``."""
    return next(iter(one(name)["rows"].values()))


def _acc(row: dict[str, Any], seed: str | None = None) -> float:
    """A row's final accuracy: one seed's, the only one, or the older records' float."""
    value = row["final_accuracy"]
    if isinstance(value, dict):
        return value["per_seed"][seed] if seed else value["mean"]
    return value


def _models(row: dict[str, Any]) -> int:
    models = row["models"]
    return next(iter(models.values())) if isinstance(models, dict) else models


def ifca_redraw() -> str:
    """Inline: IFCA's re-draw against its first draw (seed 0, 100 rounds)."""
    first = _row(f"{BASELINES}/ifca_first_draw_100rounds.json")
    redraw = _row(f"{BASELINES}/ifca_redraw_100rounds.json")
    gap = 100 * (_acc(redraw) - _acc(first))
    verdict = "ended no better" if round(gap, 1) <= 0 else f"ended {gap:.1f} points better"
    return (
        f"{verdict} ({100 * _acc(redraw):.1f}% against {100 * _acc(first):.1f}%, seed 0, "
        f"{one(f'{BASELINES}/ifca_redraw_100rounds.json')['rounds']} rounds, "
        f"[results/{BASELINES}/](results/{BASELINES}/))"
    )


def cfl_threshold() -> str:
    """Inline: what the paper's similarity test did to CFL's splits."""
    row = _row(f"{BASELINES}/cfl_paper_threshold.json")
    if _models(row) == 1:
        return "it refused every split on the paper's protocol (one cluster at the end)"
    return f"it ended with {_models(row)} clusters on the paper's protocol"


def _options() -> list[str]:
    """Per option: ``method off / on`` at seed 42, and whether inside the three-seed interval."""
    on = ev.load(TABLE1)["rows"]
    out = []
    for method, file in (
        ("pfedme", "pfedme_nomu"),
        ("scaffold", "scaffold_noclip"),
        ("feddyn", "feddyn_noclip"),
    ):
        off = _row(f"options_off/{file}.json")
        row = on[method]["final_accuracy"]
        gap = abs(_acc(off, "42") - row["per_seed"]["42"])
        inside = gap <= 2 * row["sigma"]
        out.append(
            f"{ev.label(method)} {100 * _acc(off, '42'):.1f} / {100 * row['per_seed']['42']:.1f}"
            + ("" if inside else " (outside its three-seed interval)")
        )
    return out


def _fesem_text() -> str:
    authors, old = (
        _row(f"{BASELINES}/fesem_authors.json"),
        ev.load("table1_fashion_300rounds_seed0.json")["rows"],
    )
    k10 = ev.load(FESEM_K10)["rows"]["fesem"]
    ari, p = list(k10["ari_all"]["per_seed"].values()), k10["ari_p_all"]["per_seed"].values()
    chance = above_chance(list(p))
    return (
        f"FeSEM as its authors wrote it leaves its cold start but its clusters barely "
        f"follow the classes (seed 0: ARI {authors['ari_hard']:.2f} over the hard clients; "
        f"{100 * _acc(authors):.1f}% against the old variant's "
        f"{100 * _acc(old['fesem']):.1f}%; at the tables' seeds "
        f"{'/'.join(k10['ari_all']['per_seed'])} and K = {k10['k']}, ARI over all clients "
        f"{min(ari):.2f}-{max(ari):.2f}, {chance} by the permutation test, "
        f"and {ev.cell(k10['final_accuracy'])}%)"
    )


def _made(recs: list[tuple[str, dict[str, Any]]]) -> str:
    """``Made on <machine>: <what> at `commit`, ...``, the machine named once when shared."""
    machines = {ev.machine({**r, "machine": {**r["machine"], "commit": ""}}) for _, r in recs}
    parts: dict[str, list[str]] = {}
    for what, r in recs:
        parts.setdefault(what, []).append(f"`{r['machine']['commit']}`")
    listed = ", ".join(f"{what} at {' and '.join(c)}" for what, c in parts.items())
    if len(machines) == 1:
        return f"Made on {machines.pop().split(' at ')[0]}: {listed}"
    return f"Made on: {listed} (machines: {'; '.join(sorted(machines))})"


def faithful() -> str:
    """docs/baselines.md: what the faithful baselines measured, and where each was made."""
    old = ev.load("table1_fashion_300rounds_seed0.json")["rows"]
    cfl, pfa = _row(f"{BASELINES}/cfl_default.json"), _row(f"{BASELINES}/perfedavg.json")
    never = all(
        _models(_row(f"{BASELINES}/{n}.json")) == 1
        for n in ("cfl_paper_threshold", "cfl_reference_eps_paper_threshold")
    )
    options = _options()
    nothing = all("outside" not in o for o in options)
    made = _made(
        [
            (f"seed 0 ({BASELINES})", one(f"{BASELINES}/cfl_default.json")),
            (f"seed 0 ({BASELINES})", one(f"{BASELINES}/perfedavg.json")),
            ("option off", one("options_off/pfedme_nomu.json")),
            ("Table 1", ev.load(TABLE1)),
            ("FeSEM at K = 10", ev.load(FESEM_K10)),
        ]
    )
    return (
        f"Measured at seed 0 ([results.md](results.md#the-baselines-as-their-authors-wrote-them)): "
        f"{_fesem_text()}; CFL in the references' order reaches {100 * _acc(cfl):.1f}% with "
        f"{_models(cfl)} clusters ({100 * _acc(old['cfl']):.1f}% before), and "
        + ("never splits" if never else "splits")
        + " under the references' thresholds or the paper's similarity test; IFCA's re-draw "
        f"(until every model is some 4 clients' choice at K = 10) {ifca_redraw()}, off by "
        f"default; Per-FedAvg with the references' plain-SGD beta step reaches "
        f"{100 * _acc(pfa):.1f}% ({100 * _acc(old['perfedavg']):.1f}% before). pFedMe's mu = "
        "1e-3 and SCAFFOLD's and FedDyn's gradient clip at 10 "
        + ("change nothing measurable" if nothing else "do not all stay inside the noise")
        + f" (seed 42, option off against on: {', '.join(options)}"
        + (", each inside the method's three-seed interval" if nothing else "")
        + "); they stay on by default because they are the references' code. "
        f"{made}; `fesem_authors.json` and the earlier table's rows name no machine."
    )


def flux_label_skew() -> str:
    """docs/baselines.md: FLUX's seed-42 run at the Table 1 protocol, from Table 1's record."""
    t = ev.load(TABLE1)
    flux, fedavg = t["rows"]["flux"], t["rows"]["fedavg"]
    kept = [s for s in ev.summaries("table1-fashion-mnist") if s["row"] == "flux"]
    rebuilt = any(s["seed"] == "42" and s.get("recovered_from") for s in kept)
    return (
        f"One run at the Table 1 protocol ({t['dataset']}, {t['clients']} clients of 200 "
        f"images, Dir(0.1), {t['rounds']} rounds, seed 42; Table 1's record, made on "
        f"{ev.machine(t)}"
        + ("; the run's own summary was lost and rebuilt from the table" if rebuilt else "")
        + f"): FLUX ended with **{flux['models']['42']} clusters**, ARI against the dominant "
        f"class {flux['ari_all']['per_seed']['42']:.3f} over all clients, final accuracy "
        f"{flux['final_accuracy']['per_seed']['42']:.3f} (FedAvg at the same seed: "
        f"{fedavg['final_accuracy']['per_seed']['42']:.3f})."
    )


def pacfl_budget() -> str:
    """Inline: PACFL's clusters under the port's per-class rule and the authors' Dirichlet
    budget, before training (``benchmarks/pacfl_budget.py``)."""
    d = one("pacfl_budget.json")

    def ari(r: dict[str, Any]) -> str:
        return "n/a" if r["ari"] is None else f"{r['ari']:.2f}"

    cells = "; ".join(
        f"{cell}: {c['dirichlet']['clusters']} against {c['per-class']['clusters']} "
        f"(ARI {ari(c['dirichlet'])} / {ari(c['per-class'])})"
        for cell, c in d["cells"].items()
    )
    most = {
        rule: max(c[rule]["summary_bytes"]["max"] for c in d["cells"].values())
        for rule in ("dirichlet", "per-class")
    }
    return (
        f"clusters at beta = {d['beta']:g}, the authors' budget against p = 3 per class, "
        f"data-seed {d['data_seed']} (ARI against the clients' dominant labels, n/a where no "
        f"client has one): {cells}; a reply is at most {most['dirichlet']:,} bytes under the "
        f"budget, {most['per-class']:,} per class ({link('pacfl_budget.json')})"
    )


def fedgwc_watch() -> str:
    """Inline: the round FedGWC's convergence check first fires on the map's protocol, from
    ``benchmarks/fedgwc_watch.py`` (its own arithmetic, no model)."""
    d = one("fedgwc_watch.json")
    proto = d["protocol"]
    seeds = len(next(iter(d["loss_models"].values()))["seeds"])
    lo, hi = d["first_below_eps"]
    split_lo, split_hi = d["first_split_tried"]
    return (
        f"on the map's protocol ({proto['num-partitions']} clients, "
        f"{proto['clients-per-round']} a round, eps {d['eps']:g}) the moving mean first falls "
        f"below eps at rounds {lo:,}-{hi:,} and the first split is tried at rounds "
        f"{split_lo:,}-{split_hi:,} ({len(d['loss_models'])} loss models x {seeds} seeds; "
        f"without W's change it would be round {d['bound_without_change']}; "
        f"{link('fedgwc_watch.json')})"
    )


BLOCKS = {
    "docs/benchmarks.md": {
        "bench-own-data": own_data,
        "bench-scale": scale,
        "bench-scale-stack": scale_stack,
        "bench-scale-1k": scale_1k,
        "bench-scale-target": scale_target,
        "bench-scale-rounds": scale_rounds,
        "bench-scale-everyone": scale_everyone,
        "bench-scale-flwr": scale_flwr,
        "bench-long-runs": long_runs,
    },
    "docs/baselines.md": {
        "baselines-ifca-redraw": ifca_redraw,
        "baselines-cfl-threshold": cfl_threshold,
        "baselines-faithful": faithful,
        "baselines-flux-run": flux_label_skew,
        "baselines-fedgwc-watch": fedgwc_watch,
        "baselines-pacfl-budget": pacfl_budget,
    },
}
