"""Read the committed results and format their numbers for the pages' generated blocks.

Everything here reads ``docs/results/`` (the tables' JSON lines, the kept run summaries
under ``docs/results/runs/``) and nothing else: no run is made and no script under
``benchmarks/`` is imported. The ``paper.evidence_*`` modules turn these numbers
into the tables and sentences that :mod:`paper.reference` writes into the pages.

A cell is printed as the tables print it: mean ± 2 sigma over the seeds (sigma the sample
standard deviation), in percent with one decimal; one seed prints its value alone.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from ripple_flwr.runs.statistics import paired

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"

PAPER = (
    "The paper's benchmarks are MNIST, CIFAR-10, CIFAR-100, Office-Home and GLDv2 at "
    "1,000 rounds; this is none of them"
)

LABELS = {
    "oracle": "oracle (w = pi*)",
    "oracle-unif": "oracle-unif (w = pi*)",
    "ripple-strat-gmm-vae": "Ripple-Strat (GMM-VAE)",
    "ripple-unif-gmm-vae": "Ripple-Unif (GMM-VAE)",
    "ripple-strat-mean-unmixing": "Ripple-Strat (mean unmixing)",
    "ripple-unif-mean-unmixing": "Ripple-Unif (mean unmixing)",
    "ripple-hdb-gmm-vae": "Ripple-HDB (GMM-VAE)",
    "ripple-strat-yogi": "Ripple-Strat (GMM-VAE, FedYogi per cluster)",
    "ripple-unif-yogi": "Ripple-Unif (GMM-VAE, FedYogi per cluster)",
    "ripple-rec": "Ripple (recommended)",
    "ripple-rec-min10": "Ripple (recommended, min-label-count 10)",
    "ripple-strat": "Ripple-Strat",
    "ripple-unif": "Ripple-Unif",
    "ripple-hdb": "Ripple-HDB",
    "local": "local-only",
    "perfedavg": "Per-FedAvg",
    "pfedme": "pFedMe",
    "ifca": "IFCA",
    "cfl": "CFL",
    "fesem": "FeSEM",
    "flux": "FLUX",
    "fedavg": "FedAvg",
    "fedprox": "FedProx",
    "fedadam": "FedAdam",
    "fedyogi": "FedYogi",
    "pacfl": "PACFL",
    "fedgwc": "FedGWC",
    "fedadagrad": "FedAdagrad",
    "fedavgm": "FedAvgM",
    "feddyn": "FedDyn",
    "scaffold": "SCAFFOLD",
    "krum": "Krum",
    "fedtrimmedavg": "FedTrimmedAvg",
    "fedmedian": "FedMedian",
}

SPREAD_COVERS = (
    "The seeds redraw the training (model initialisation, client sampling, local shuffles) on "
    "one federation (`data-seed = 0`: the same partitions, D_aux and new clients at every "
    "seed), so the spread says nothing about another draw of the clients; the map over "
    "federations (`docs/which-method.md`) redraws them."
)
SEED_ORDER = [42, 7, 123, 0, 1]  # the tables' seeds in their order, then the earlier ones

_RUN_NAME = re.compile(
    r"^(?P<row>.+?)-k(?P<k>\d+)-r(?P<rounds>\d+)(?:-a(?P<a>[\d.]+)-t(?P<t>[\d.]+))?"
    r"-seed(?P<seed>\d+)\.json$"
)


@cache
def load(name: str) -> dict[str, Any]:
    """The last JSON line of ``docs/results/<name>`` (a table's or a benchmark's record)."""
    lines = [line for line in (RESULTS / name).read_text().splitlines() if line.strip()]
    return json.loads(lines[-1])


@cache
def summaries(folder: str) -> tuple[dict[str, Any], ...]:
    """Every kept run summary under ``docs/results/runs/<folder>``, its name parsed."""
    out = []
    for path in sorted((RESULTS / "runs" / folder).glob("*.json")):
        match = _RUN_NAME.match(path.name)
        if match:
            out.append({**match.groupdict(), "file": path.name, **json.loads(path.read_text())})
    return tuple(out)


# The option rows of a baseline, ``<method>-<suffix>`` (paper/variants.py's map rows).
OPTION_LABELS = {"yogi": "FedYogi per cluster", "dirichlet": "the authors' Dirichlet budget"}


def label(name: str, k: int | None = None) -> str:
    """A row's name as the pages write it; ``k`` adds the K a sweep chose."""
    text = LABELS.get(name)
    if text is None:  # a baseline with an option row (paper/variants.py): its base's name
        base, _, option = name.rpartition("-")
        known = base in LABELS and option in OPTION_LABELS
        text = f"{LABELS[base]} ({OPTION_LABELS[option]})" if known else name
    return f"{text} (K = {k})" if k is not None else text


def is_ripple(name: str) -> bool:
    return name.startswith(("ripple", "oracle"))


def is_oracle(name: str) -> bool:
    """The oracles route with the true mixtures: a reference, not a method one can run."""
    return name.startswith("oracle")


def pct(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{100 * value:.{digits}f}"


def cell(stat: dict[str, Any] | None, digits: int = 1) -> str:
    """``mean ± 2 sigma`` in percent, or the one seed's value alone."""
    if not stat or stat.get("mean") is None:
        return "n/a"
    text = pct(stat["mean"], digits)
    if stat.get("sigma") is not None:
        text += f" ± {pct(2 * stat['sigma'], digits)}"
    return text


def plain(stat: dict[str, Any] | None, spec: str = ".3f") -> str:
    """A unitless ``mean ± 2 sigma`` (bytes ratio, ARI)."""
    if not stat or stat.get("mean") is None:
        return "n/a"
    text = format(stat["mean"], spec)
    if stat.get("sigma") is not None:
        text += f" ± {format(2 * stat['sigma'], spec)}"
    return text


def shown(stat: dict[str, Any] | None) -> float | None:
    """The mean as printed (one decimal of a percent), so printed ties rank as ties."""
    if not stat or stat.get("mean") is None:
        return None
    return round(100 * stat["mean"], 1)


def ranks(stats: dict[str, dict[str, Any]], exclude=is_oracle) -> dict[str, int]:
    """1 for the best printed mean (ties share it), 2 for the next; oracles not ranked."""
    values = sorted(
        {v for n, s in stats.items() if not exclude(n) and (v := shown(s)) is not None},
        reverse=True,
    )
    top = values[:2]
    return {
        n: top.index(shown(s)) + 1 for n, s in stats.items() if not exclude(n) and shown(s) in top
    }


def marked(text: str, rank: int | None) -> str:
    """Bold for the best, italic for the second best."""
    return {1: f"**{text}**", 2: f"*{text}*"}.get(rank or 0, text)


def ordered(stats: dict[str, dict[str, Any]], keep=lambda n: True) -> list[str]:
    """Names by mean, best first (the table's order among equals)."""
    names = [n for n, s in stats.items() if keep(n) and shown(s) is not None]
    return sorted(names, key=lambda n: -stats[n]["mean"])


def points(a: dict[str, Any], b: dict[str, Any]) -> str:
    """``a``'s mean minus ``b``'s, in points, from the printed means."""
    return f"{shown(a) - shown(b):.1f}"


def paired_of(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """``a`` minus ``b`` paired per seed, with its t 95% interval and verdict."""
    return paired(a.get("per_seed", {}), b.get("per_seed", {}))


def paired_text(a: dict[str, Any], b: dict[str, Any]) -> str:
    """`` (paired: +0.2 ± 0.3 points, t 95%, 2/3 seeds ahead: no clear winner)``, from ``a``'s
    side; nothing below two common seeds (no interval)."""
    p = paired_of(a, b)
    if p["half"] is None:
        return ""
    return (
        f" (paired per seed: {100 * p['mean']:+.1f} ± {100 * p['half']:.1f} points, t 95%, "
        f"ahead at {p['wins']} of {p['n']} seeds: {p['verdict']})"
    )


def seeds_ahead(a: dict[str, Any], b: dict[str, Any]) -> tuple[int, int]:
    """At how many of the seeds both ran ``a`` scored above ``b``, and of how many."""
    common = [s for s in a["per_seed"] if s in b["per_seed"]]
    common = [s for s in common if a["per_seed"][s] is not None and b["per_seed"][s] is not None]
    return sum(a["per_seed"][s] > b["per_seed"][s] for s in common), len(common)


def ahead_text(name: str, a: dict[str, Any], b: dict[str, Any]) -> str:
    """`` (X ahead at k of n seeds)``, or nothing for one seed (the cell says it all)."""
    k, n = seeds_ahead(a, b)
    return f" ({name} ahead at {k} of {n} seeds)" if n > 1 else ""


def seeds_text(seeds: list[int]) -> str:
    return f"seed {seeds[0]}" if len(seeds) == 1 else "seeds " + ", ".join(map(str, seeds))


def interval(seeds: list[int]) -> str:
    if len(seeds) == 1:
        return "one seed: each cell is one run, no interval"
    return "mean ± 2 sigma over the seeds (the seed spread, not a test)"


def recovered(folder: str, rounds: int) -> dict[str, list[str]]:
    """Per row, the seeds whose kept summary was rebuilt from the table's own JSON.

    ``python -m paper.recover`` wrote those summaries after the runs'
    results files were lost (``recovered_from`` names the table); their cells cannot be
    traced to a run.
    """
    out: dict[str, list[str]] = {}
    for s in summaries(folder):
        if s.get("recovered_from") and int(s["rounds"]) == rounds:
            out.setdefault(s["row"], []).append(s["seed"])
    return {
        row: sorted(seeds, key=lambda x: SEED_ORDER.index(int(x))) for row, seeds in out.items()
    }


def router_settings(folder: str) -> set[tuple[Any, Any]]:
    """(pretrain-bank-size, pretrain-steps) of every Ripple summary that kept them."""
    return {
        (s["settings"]["pretrain-bank-size"], s["settings"]["pretrain-steps"])
        for s in summaries(folder)
        if s["row"].startswith("ripple") and "pretrain-steps" in s.get("settings", {})
    }


def machine(record: dict[str, Any]) -> str:
    m = record.get("machine") or record.get("made_on")
    if not m:
        return "not recorded"
    where = f"{m.get('node', '?')} ({m.get('processor', '?')}, {m.get('cpus', '?')} CPUs)"
    return f"{where} at `{m.get('commit', '?')}`"


def runs_made_on(folder: str) -> str:
    """Where and at which commits a folder's kept runs were made, read from each summary's
    ``made_on`` ("not recorded" for the summaries without one)."""
    from collections import Counter

    runs = sorted((RESULTS / "runs" / folder).glob("*.json"))
    made = Counter()
    for path in runs:
        m = json.loads(path.read_text()).get("made_on") or {}
        made[(m.get("node"), m.get("commit"))] += 1
    parts = [
        f"{n} on {node} at `{commit}`" if node else f"{n} not recorded"
        for (node, commit), n in sorted(made.items(), key=lambda kv: (kv[0][0] is None, -kv[1]))
    ]
    return f"its {len(runs)} runs were made: " + ", ".join(parts) if runs else "no kept runs"


def summary_models(folder: str, row: str, **where: str) -> list[int]:
    """The model counts of one row's kept summaries (seed order of the files)."""
    found = [
        s
        for s in summaries(folder)
        if s["row"] == row and all(s.get(k) == v for k, v in where.items())
    ]
    return [s["models"] for s in sorted(found, key=lambda s: SEED_ORDER.index(int(s["seed"])))]
