"""docs/robustness.md's generated blocks: hostile clients and honest ranges, from the files.

Every number is read from ``docs/results/hostile.json`` (``benchmarks/hostile.py``),
``docs/results/hostile_capped_sizes.json`` (the same benchmark before benchmark sizes were
corrected) and ``docs/results/honest_ranges.json`` (``benchmarks/honest_ranges.py``).
"""

from __future__ import annotations

import json
from typing import Any

from paper import evidence as ev

HOSTILE = "hostile.json"
CAPPED = "hostile_capped_sizes.json"
HONEST = "honest_ranges.json"

# What the server did when a case names its culprit without dropping a reply (the file
# records the verdict, not the defence that gave it).
ACTIONS = {
    "far-embedding": "routed 1/K (out of domain)",
    "inflated-count": "counts replaced",
    "fake-evaluation": "counts replaced",
    "query-sizes": "left out at the query",
    "capped-sizes": "sizes replaced",
    "capped-sizes-by-examples": "sizes replaced",
}


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def _attacks(name: str = HOSTILE) -> list[dict[str, Any]]:
    return [c for c in ev.load(name)["cases"] if c["case"] != "clean"]


def _case(case: str, method: str, name: str = HOSTILE) -> dict[str, Any]:
    return next(c for c in ev.load(name)["cases"] if c["case"] == case and c["method"] == method)


def _norm(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _action(c: dict[str, Any]) -> str:
    if c["case"] in ACTIONS:
        return ACTIONS[c["case"]]
    dropped = "dropped " + ", ".join(map(str, c["dropped_partitions"]))
    return dropped + (" (no reply)" if c["case"] == "killed" else "")


def tolerance() -> str:
    """Inline: the benchmark's tolerance, in points and percent."""
    t = ev.load(HOSTILE)["tolerance"]
    return f"{100 * t['accuracy']:.0f} points / {100 * t['model_norm']:.0f}%"


def tally() -> str:
    """The benchmark's tally line, as the file records it."""
    return "```json\n" + json.dumps(ev.load(HOSTILE)["tally"]) + "\n```"


def outcomes() -> str:
    """One row per attack: verdict, accuracies, norm, and what the server did."""
    rows = [
        "| method | case (culprits) | verdict | headline (coverage) | honest clients "
        "| honest clients: clean run / without the culprits' training "
        "| saved model's norm (clean run's) | what the server did |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in _attacks():
        culprits = ", ".join(map(str, c["culprits"]))
        norm = (
            "-"
            if c["model_norm"] is None
            else (f"{_norm(c['model_norm'])} ({_norm(c['clean_model_norm'])})")
        )
        rows.append(
            f"| {c['method']} | {c['case']} ({culprits}) | {c['outcome']} | "
            f"{_pct(c['headline_accuracy'])} ({c['coverage']:.2f}) | "
            f"{_pct(c['honest_accuracy'])} | {_pct(c['clean_honest_accuracy'])} / "
            f"{_pct(c['absent_honest_accuracy'])} | {norm} | {_action(c)} |"
        )
    return "\n".join(rows)


def growth() -> str:
    """Inline: the growth attacks' final norm against the clean run's."""
    cases = [c for c in _attacks() if c["case"].startswith("growing-weights")]
    norms = sorted({_norm(c["model_norm"]) for c in cases})
    return f"{' / '.join(norms)} against {_norm(cases[0]['clean_model_norm'])}"


def fake_score() -> str:
    """Inline: the clean headline and the one with a fake perfect score."""
    clean = _case("clean", "fedavg")["headline_accuracy"]
    fake = _case("fake-evaluation", "fedavg")["headline_accuracy"]
    return f"{_pct(clean)} -> {_pct(fake)}"


def absent_cost() -> str:
    """Inline: what dropping one client costs FedAvg's and Ripple's honest clients."""
    out = []
    for method, name in (("fedavg", "FedAvg's"), ("ripple", "Ripple's")):
        c = _case("doubled-weights", method)
        cost = float(_pct(c["clean_honest_accuracy"])) - float(_pct(c["absent_honest_accuracy"]))
        out.append(f"{cost:.1f} points of {name}")
    return ", ".join(out)


def capped() -> str:
    """Inline: one client at the size cap, before benchmark sizes were corrected."""
    c = _case("capped-sizes", "fedavg", CAPPED)
    e = _case("capped-sizes-by-examples", "fedavg", CAPPED)
    return (
        f"pulled FedAvg's honest accuracy from "
        f"{_pct(c['clean_honest_accuracy'])}% to {_pct(c['honest_accuracy'])}% (under "
        f'`headline-weighting = "examples"` its fake perfect score lifted the headline to '
        f"{_pct(e['headline_accuracy'])}%)"
    )


def _updates() -> list[dict[str, Any]]:
    return ev.load(HONEST)["updates"]


def honest_update() -> str:
    """Inline: the largest honest update, as a share of the model's norm."""
    return f"{max(u['relative_update']['max'] for u in _updates()):.2f}"


def honest_radial() -> str:
    """Inline: the largest honest |rho| and the largest honest update beside it."""
    rho = max(u["abs_radial_step"]["max"] for u in _updates())
    return f"|rho| <= {rho:.3f} in the same runs, against updates of up to {honest_update()}"


def honest_embedding() -> str:
    """Inline: how far real clients' embeddings reach (largest max |z| and RMS z)."""
    e = max(ev.load(HONEST)["embeddings"], key=lambda e: e["max_abs_z"]["max"])
    name = {"fashion-mnist": "Fashion-MNIST"}.get(e["dataset"], e["dataset"])
    return (
        f"real clients reach {e['max_abs_z']['max']:.1f} and {e['rms_z']['max']:.1f}: "
        f"{name}, {e['clients']} clients at Dir({e['alpha']}), "
        f"[results/{HONEST}](results/{HONEST})"
    )


BLOCKS = {
    "docs/robustness.md": {
        "hostile-honest-update": honest_update,
        "hostile-honest-radial": honest_radial,
        "hostile-honest-embedding": honest_embedding,
        "hostile-capped": capped,
        "hostile-tolerance": tolerance,
        "hostile-tally": tally,
        "hostile-outcomes": outcomes,
        "hostile-growth": growth,
        "hostile-fake-score": fake_score,
        "hostile-absent-cost": absent_cost,
    },
}
