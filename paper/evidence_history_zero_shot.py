"""results.md's earlier zero-shot blocks: seed 0's Table 2, zero_shot.py's record, the map's state.

Read from the committed ``docs/results/`` only: ``table2_fashion_100rounds_seed0.json``,
``zero_shot.json`` (``benchmarks/zero_shot.py``: its own Table 2 run of the same protocol,
the rotated datasets and the onboarding time) and ``heterogeneity_map.json``.
"""

from __future__ import annotations

from typing import Any

from paper import evidence as ev
from paper.evidence_history import pdiff, span, value_range
from paper.evidence_map import MAP

TABLE2_SEED0 = "table2_fashion_100rounds_seed0.json"
ZERO_SHOT = "zero_shot.json"
RIPPLE = ("ripple-strat", "ripple-unif", "ripple-hdb")
CLUSTERED = ("ifca", "fesem", "cfl", "flux")


def _zs(t: dict[str, Any], col: str) -> dict[str, float]:
    return {m: c[col]["zero_shot_accuracy"] for m, c in t["cells"].items() if col in c}


def _key(col: str) -> str:
    """A Table 2 column (``0.01/1``) as zero_shot.json's table names it."""
    a, b = col.split("/")
    return f"train{a}_test{float(b)}"


def table2_seed0() -> str:
    """Seed 0's Table 2 (the earlier protocol): the table and what it shows."""
    t = ev.load(TABLE2_SEED0)
    cols = list(next(iter(t["cells"].values())))
    lines = [
        f"**{t['dataset']}**: {t['clients']} training clients, **{t['rounds']} rounds, "
        f"{ev.seeds_text(t['seeds'])}, the earlier protocol** (one seed: no interval); "
        "zero-shot personalised accuracy (%):",
        "",
        "| method | " + " | ".join(f"alpha_train/alpha_test {c}" for c in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for m, cells in t["cells"].items():
        out = []
        for c in cols:
            text = ev.pct(cells[c]["zero_shot_accuracy"])
            if "best_cluster_by_train_loss" in cells[c]:
                text += f" [best cluster: {ev.pct(cells[c]['best_cluster_by_train_loss'])}]"
            out.append(text)
        lines.append(f"| {ev.label(m)} | " + " | ".join(out) + " |")
    return "\n".join([*lines, "", *_seed0_notes(t, cols)])


def _by(t: dict[str, Any], col: str, names: tuple[str, ...]) -> list[float]:
    return [v for m, v in _zs(t, col).items() if m in names]


def _seed0_notes(t: dict[str, Any], cols: list[str]) -> list[str]:
    hi, lo = (c for c in cols if c.startswith("0.1/")), (c for c in cols if c.startswith("0.01/"))
    hi, lo = list(hi), list(lo)
    parts, mix = [], []
    for c in hi:
        rip, clus = _by(t, c, RIPPLE), _by(t, c, CLUSTERED)
        word = "above" if min(rip) > max(clus) else "not above"
        parts.append(
            f"{value_range(rip)} against {value_range(clus)} at alpha_test = {c.split('/')[1]}"
            f" ({word} every clustered method)"
        )
        cells = t["cells"]
        mix += [
            pdiff(cells[m][c]["zero_shot_accuracy"], cells[m][c]["best_cluster_by_train_loss"])
            for m in RIPPLE
        ]
    zs = ev.load(ZERO_SHOT)["table"]
    return [
        f"- At alpha_train = {hi[0].split('/')[0]}, Ripple's one-pass models score "
        + "; ".join(parts)
        + f", and are {span(mix)} their own best cluster model picked by training loss (the "
        "brackets): mixing helps a client whose data spans several clusters.",
        *_one_class(t, lo),
        "- Ripple-HDB "
        + (
            "equals"
            if all(t["cells"]["ripple-hdb"][c] == t["cells"]["ripple-strat"][c] for c in lo)
            else "does not equal"
        )
        + f" Ripple-Strat at alpha_train = {lo[0].split('/')[0]}; in zero_shot.py's run of the "
        f"same protocol ([{ZERO_SHOT}](results/{ZERO_SHOT})) HDBSCAN kept K_hat = "
        + " and ".join(f"{zs[_key(c)]['hdb_k_hat']} at {c.split('/')[0]}" for c in (lo[0], hi[0]))
        + ".",
    ]


def _one_class(t: dict[str, Any], lo: list[str]) -> list[str]:
    one, many = lo[0], lo[-1]
    avg = _zs(t, many)["fedavg"]
    rip, clus = _by(t, many, RIPPLE), _by(t, many, CLUSTERED)
    trained = ev.load(ZERO_SHOT)["table"][_key(one)]["trained_acc"]["ripple-strat"]
    every = value_range(list(_zs(t, one).values()))
    return [
        f"- At alpha_train = {one.split('/')[0]} every training client holds about one class, "
        "so every cluster model (Ripple's and the baselines') knows about one class. At "
        f"alpha_test = {one.split('/')[1]} all methods score {every}; at alpha_test = "
        f"{many.split('/')[1]} (each new client holds every class) FedAvg's global model "
        f"scores {ev.pct(avg)}, {span([pdiff(avg, max(rip + clus))])} the best clustered "
        f"method: Ripple mixes one-class models ({value_range(rip)}), the baselines pick one "
        f"({value_range(clus)}). This is a limit of clustering itself at this skew, not of "
        f"Ripple's routing (its training clients score {ev.pct(trained)}% in zero_shot.py's run "
        "of the same protocol).",
    ]


def zero_shot_script() -> str:
    """Inline: zero_shot.py's earlier best-by-loss column against the in-run brackets."""
    t, zs = ev.load(TABLE2_SEED0), ev.load(ZERO_SHOT)
    cols = list(next(iter(t["cells"].values())))
    old = " / ".join(ev.pct(zs["table"][_key(c)]["best-by-loss"]) for c in cols)
    new = " / ".join(
        ev.pct(t["cells"]["ripple-strat"][c]["best_cluster_by_train_loss"]) for c in cols
    )
    return (
        f"{old} in the column order above). Both that script and the in-run reference now choose "
        f"on the training split ({new}, Ripple-Strat's brackets above"
    )


def onboarding() -> str:
    """Inline: the onboarding time zero_shot.json records."""
    ms = ev.load(ZERO_SHOT)["onboard_ms_per_client"]
    return f"{ms:.1f} ms (`onboard_ms_per_client` in [{ZERO_SHOT}](results/{ZERO_SHOT}))"


def rotated_zero_shot() -> str:
    """zero_shot.py's rotated datasets: ARI of the routing and accuracy against FedAvg."""
    rot = ev.load(ZERO_SHOT)["rotated"]
    lines = [
        "| dataset | ARI argmax w, before round 1 (hard clients) | ARI HDB meta-clusters "
        "(K_hat) | routing L1 | Ripple-Strat acc. (%) | FedAvg acc. (%) |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in rot.items():
        rs, fa = r["acc_ripple-strat"], r["acc_fedavg"]
        cells = [ev.marked(ev.pct(v), 1 if v == max(rs, fa) else None) for v in (rs, fa)]
        lines.append(
            f"| {name} | {r['ari_argmax_w']:.3f} ({r['ari_clients']} clients) | "
            f"{r['ari_hdb']:.3f} ({r['hdb_k_hat']}) | {r['routing_l1']:.3f} | "
            + " | ".join(cells)
            + " |"
        )
    gaps = [pdiff(r["acc_ripple-strat"], r["acc_fedavg"]) for r in rot.values()]
    lines += ["", f"Bold: the better of the two. Ripple-Strat is {span(gaps)} FedAvg."]
    return "\n".join(lines)


def map_status() -> str:
    """Inline: whether the heterogeneity map is committed, its cells and seeds."""
    if not (ev.RESULTS / MAP).is_file():
        return "**has not been run**"
    d = ev.load(MAP)
    return (
        f"is committed for {len(d['cells'])} cells ({', '.join(d['cells'])}) at "
        f"{ev.seeds_text(d['seeds'])} on one federation ([archive-first-map.md]"
        "(archive-first-map.md); what to use, from the pre-registered map over fresh "
        "federations: [which-method.md](which-method.md))"
    )


BLOCKS = {
    "docs/results.md": {
        "history-table2-seed0": table2_seed0,
        "history-zero-shot-script": zero_shot_script,
        "history-onboarding": onboarding,
        "history-rotated-zero-shot": rotated_zero_shot,
        "history-map-status": map_status,
    }
}
