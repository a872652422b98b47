"""results.md's block on the paper's router: Table 1's Ripple rows with the pre-training the
paper reports, beside the default small router each run pre-trains.

Reads the committed results only: the paper-router rows' JSON line
(``table1_paper_router_3seeds.json``, written by ``ripple-tables table1 --checkpoint``),
Table 1's JSON line and the router's pre-training report
(``pretrain_paper_router_fashion.json``, written by ``pretrain_vae.py``).
"""

from __future__ import annotations

from typing import Any

from paper import evidence as ev
from paper.evidence_table1 import TABLE1, router_budget

PAPER_ROWS = "table1_paper_router_3seeds.json"
PAPER_REPORT = "pretrain_paper_router_fashion.json"
ROWS = ("ripple-strat-gmm-vae", "ripple-unif-gmm-vae")


def _pretraining(report: dict[str, Any]) -> str:
    s = report["settings"]
    train, bank = s["train"], s["bank"]
    return (
        f"{train['steps']:,} steps at batch {train['batch_size']} (the paper's 1,000 epochs x "
        f"10 steps), AdamW lr {train['lr']:g}, weight decay {train['weight_decay']:g}, "
        f"{train['lr_schedule']} rate, no weight average (EMA {train['ema']:g}), no early stop; "
        f"alpha {bank['alpha_dist']} in [{bank['alpha_low']:g}, {bank['alpha_high']:g}], "
        f"supervised term {train['loss']['supervised']} (KL(q || y), the paper's) with "
        f"lambda_sup {train['loss']['lambda_sup']:g} and lambda_kl "
        f"{train['loss']['lambda_kl']:g}; a bank of {bank['num_clients']:,} synthetic "
        f"clients of {bank['client_size']} images (the paper draws fresh ones every step) "
        f"from a D_aux of {s['aux_size']:,}. It took {report['pretrain_seconds']:.0f} s on "
        f"{report['device']}"
    )


def _routing(report: dict[str, Any]) -> str:
    def pair(key: str) -> str:
        return f"{report[key]:.3f} (mean unmixing {report[key + '_mean_unmixing']:.3f})"

    return (
        f"routing L1 on held-out synthetic clients {pair('routing_l1_heldout')}, on "
        f"{report['settings']['real_clients']} real clients at Dir(0.1) "
        f"{pair('routing_l1_real_a0.1')} and at Dir(1.0) {pair('routing_l1_real_a1.0')}"
    )


def router_comparison() -> str:
    """The two routers' Table 1 rows side by side, and what the numbers say."""
    if not (ev.RESULTS / PAPER_ROWS).is_file():
        return "Not run yet: no `docs/results/table1_paper_router_3seeds.json` is committed."
    paper, small, report = ev.load(PAPER_ROWS), ev.load(TABLE1), ev.load(PAPER_REPORT)
    lines = [
        f"**{paper['dataset']}**, Table 1's protocol ({paper['clients']} clients, "
        f"{paper['rounds']} rounds, {ev.seeds_text(paper['seeds'])}; "
        f"{ev.interval(paper['seeds'])}). The paper's router: {_pretraining(report)}; "
        f"{_routing(report)}. The default router: each run pre-trains its own from the run's "
        f"settings and seed ({router_budget('table1-fashion-mnist')}, as its kept summaries "
        "record).",
        "",
        "| row | router | final acc. (%) | per seed (42 / 7 / 123) "
        "| ARI hard / all (before round 1) |",
        "|---|---|---|---|---|",
    ]
    verdicts = []
    for row in ROWS:
        cells = {}
        for router, table in (("the paper's", paper), ("default (small)", small)):
            r = table["rows"].get(row)
            if r is None:
                continue
            seeds = " / ".join(
                ev.pct(r["final_accuracy"]["per_seed"].get(str(s))) for s in paper["seeds"]
            )
            lines.append(
                f"| {ev.label(row)} | {router} | {ev.cell(r['final_accuracy'])} | {seeds} | "
                f"{ev.plain(r['ari_hard'])} / {ev.plain(r['ari_all'])} |"
            )
            cells[router] = r
        if len(cells) == 2:
            a, b = (
                cells["the paper's"]["final_accuracy"],
                cells["default (small)"]["final_accuracy"],
            )
            diff = ev.shown(a) - ev.shown(b)
            verdicts.append(
                f"{ev.label(row)}: the paper's router is {abs(diff):.1f} points "
                f"{'above' if diff > 0 else 'below' if diff < 0 else 'level with'} the default"
                f"{ev.paired_text(a, b)}"
            )
    lines += [
        "",
        "; ".join(verdicts) + ". One router serves the three seeds, and the partitions follow "
        "`data-seed`, not the run's seed, so its routing (and ARI) is the same at every seed.",
        "",
        _decision(paper, small, report),
    ]
    return "\n".join(lines)


def _decision(paper: dict[str, Any], small: dict[str, Any], report: dict[str, Any]) -> str:
    """Which router the tables default to, from the numbers above."""
    better = [
        row
        for row in ROWS
        if row in paper["rows"]
        and row in small["rows"]
        and ev.shown(paper["rows"][row]["final_accuracy"])
        > ev.shown(small["rows"][row]["final_accuracy"])
        and ev.paired_of(
            paper["rows"][row]["final_accuracy"], small["rows"][row]["final_accuracy"]
        )["verdict"]
        == "leads"
    ]
    if better and len(better) == len(ROWS):
        return (
            "The paper's router is ahead beyond the intervals on both rows: pass its checkpoint "
            "(`--checkpoint`) for the Ripple rows of the tables."
        )
    return (
        "The paper's router is not ahead beyond the intervals on "
        + ("either row" if not better else "both rows")
        + ", so the tables keep the default: each run pre-trains its small router from its own "
        "seed (a router per seed, as each seed is its own experiment; the paper's took "
        f"{report['pretrain_seconds']:.0f} s once). `--checkpoint FILE` gives every run the "
        "paper's router instead."
    )


BLOCKS = {"docs/results.md": {"router-comparison": router_comparison}}
