"""which-method.md's decision table follows the pre-registered map's verdicts by its rule:
the recommended row where it leads every rival, the rival that leads it, no clear winner
naming the tied rows, no verdict where runs are missing or too few seeds are shared."""

from __future__ import annotations

import json

from paper import evidence_decision as dec
from paper.hmap import protocol_verdicts
from ripple_flwr.runs.statistics import seed_stats

SEEDS = [101, 202, 303, 404, 505]
COMPARISONS = {
    "ripple-rec": ["fedyogi", "local", "ripple-strat"],
    "ripple-strat": ["fedyogi", "local"],
}
ROWS = ["ripple-rec", "ripple-strat", "fedyogi", "local"]
METHODS = {"ripple-rec": "ripple", "ripple-strat": "ripple", "fedyogi": "fedyogi", "local": "local"}


def _row(train, zero_shot=None, missing=()):
    """One row of a cell: per-seed accuracies (None: the run has no number), seeds missing."""
    have = [s for s in SEEDS if s not in missing]
    zs = zero_shot if zero_shot is not None else [None] * len(SEEDS)
    return {
        "final_accuracy": seed_stats({s: train[i] for i, s in enumerate(SEEDS) if s in have}),
        "zero_shot_accuracy": seed_stats({s: zs[i] for i, s in enumerate(SEEDS) if s in have}),
        "seeds_missing": list(missing),
    }


def _cell(rows):
    return {"rows": rows, "protocol": protocol_verdicts(rows, COMPARISONS)}


def _map(cells):
    return {
        "base": {"dataset": "fashion-mnist", "num-partitions": 100},
        "rows": {r: {"method": METHODS[r]} for r in ROWS},
        "rounds": 100,
        "seeds": SEEDS,
        "machine": {"node": "test", "processor": "x", "cpus": 2, "commit": "abc1234"},
        "protocol": {
            "name": "map-test",
            "sha256": "0" * 64,
            "commit": "f" * 40,
            "comparisons": COMPARISONS,
        },
        "cells": cells,
        "missing": [],
    }


JITTER = [0.002, -0.001, 0.003, -0.002, -0.002]  # mean 0


def _up(values, by, jitter=1.0):
    """``values`` moved by ``by``, with a little per-seed jitter (an exact gap is no lead)."""
    return [None if v is None else v + by + jitter * j for v, j in zip(values, JITTER, strict=True)]


BASE = [0.80, 0.82, 0.79, 0.81, 0.83]
NOISE = [0.03, -0.02, 0.04, -0.03, 0.01]


def synthetic(partial=False):
    zs = [0.70, 0.72, 0.71, 0.69, 0.73]
    cells = {
        # the recommended Ripple ahead of everyone at every seed, by different margins
        "label-skew-0.1": _cell(
            {
                "ripple-rec": _row(_up(BASE, 0.10), _up(zs, 0.05)),
                "ripple-strat": _row(_up(BASE, 0.05, -1.0), zs),
                "fedyogi": _row(BASE, zs),
                "local": _row(_up(BASE, -0.05, -1.0)),
            }
        ),
        # FedYogi ahead of the recommended Ripple at every seed: Ripple trails
        "label-skew-1": _cell(
            {
                "ripple-rec": _row(BASE, zs),
                "ripple-strat": _row(_up(BASE, -0.01, -1.0), zs),
                "fedyogi": _row(_up(BASE, 0.03), zs),
                "local": _row(_up(BASE, -0.10, -1.0)),
            }
        ),
        # FedYogi within the noise: no clear winner naming it
        "rotation": _cell(
            {
                "ripple-rec": _row(_up(BASE, 0.05), zs),
                "ripple-strat": _row(BASE, zs),
                "fedyogi": _row([v + 0.05 + n for v, n in zip(BASE, NOISE, strict=True)], zs),
                "local": _row(_up(BASE, -0.10, -1.0)),
            }
        ),
        # every run done, but FedYogi's diverged at three seeds: 2 shared seeds, no verdict
        "concept-shift": _cell(
            {
                "ripple-rec": _row(_up(BASE, 0.05), zs),
                "ripple-strat": _row(BASE, zs),
                "fedyogi": _row([0.5, 0.5, None, None, None], zs),
                "local": _row(_up(BASE, -0.10, -1.0)),
            }
        ),
    }
    if partial:
        # two of FedYogi's runs not made yet in a cell that would otherwise lead
        rows = {**cells["label-skew-0.1"]["rows"]}
        rows["fedyogi"] = _row(BASE, zs, missing=(404, 505))
        cells["label-skew-0.1"] = _cell(rows)
    return _map(cells)


def test_the_rule_gives_the_right_answer_in_each_cell():
    d = synthetic()
    lead = dec.outcome(d, "label-skew-0.1", "ripple-rec", "final_accuracy")
    assert lead["status"] == "leads" and lead["use"] == ["ripple-rec"]
    assert lead["against"] == "ripple-strat"  # the closest rival: the next best
    assert dec.use_text(lead) == "Ripple (recommended): leads every rival"
    assert dec.margin_text(lead).startswith("+5.0 ± ")
    assert dec.margin_text(lead).endswith(" (5/5) over Ripple-Strat (paper): leads")

    trail = dec.outcome(d, "label-skew-1", "ripple-rec", "final_accuracy")
    assert trail["status"] == "trails" and trail["use"] == ["fedyogi"]
    assert dec.use_text(trail) == "FedYogi: Ripple (recommended) trails"
    text = dec.margin_text(trail)
    assert text.startswith("+3.0 ± ")
    assert text.endswith("(5/5) FedYogi over Ripple (recommended): leads")

    tie = dec.outcome(d, "rotation", "ripple-rec", "final_accuracy")
    assert tie["status"] == "no clear winner" and tie["use"] == ["ripple-rec", "fedyogi"]
    assert dec.use_text(tie) == "no clear winner: Ripple (recommended) or FedYogi"
    assert dec.margin_text(tie).endswith("over FedYogi: no clear winner")

    few = dec.outcome(d, "concept-shift", "ripple-rec", "final_accuracy")
    assert few["status"] == "too few seeds" and few["use"] == []
    assert dec.use_text(few) == "no verdict: too few seeds shared with FedYogi"
    assert few["shared"] == ["101", "202"]


def test_a_rival_with_no_zero_shot_model_is_not_a_rival_for_zero_shot():
    d = synthetic()
    o = dec.outcome(d, "label-skew-0.1", "ripple-rec", "zero_shot_accuracy")
    assert "local" not in o["compared"] and o["status"] == "leads"


def test_a_partial_map_states_no_verdict_and_names_the_missing_runs():
    d = synthetic(partial=True)
    o = dec.outcome(d, "label-skew-0.1", "ripple-rec", "final_accuracy")
    assert o["status"] == "missing" and o["runs_missing"] == (2, 20) and o["use"] == []
    assert dec.use_text(o) == "no verdict yet: runs missing: 2 of 20"
    assert dec.margin_text(o) == "-"
    assert dec.seeds_text(o, SEEDS) == ("3 of 5 shared (101, 202, 303); missing: FedYogi 404, 505")
    table = dec.decision_table(d)
    line = next(x for x in table.splitlines() if "`label-skew-0.1`" in x)
    assert "runs missing: 2 of 20" in line and "leads" not in line
    # the other cells keep their verdicts, the trailing one said as plainly as a win
    assert "| FedYogi: Ripple (recommended) trails |" in table
    assert "trails a rival in label-skew-1" in table
    assert "has no verdict yet (runs missing) in label-skew-0.1" in table


def test_the_complete_map_renders_every_cell_both_metrics_and_the_rule():
    d = synthetic()
    table = dec.decision_table(d)
    rows = [x for x in table.splitlines() if x.startswith("| ") and "---" not in x][1:]
    assert len(rows) == 2 * len(d["cells"])
    assert "**The rule**" in table and "fewer than 3 shared seeds: no verdict" in table
    assert "leads every rival in label-skew-0.1" in table
    assert "has no clear winner in rotation" in table
    assert "has too few shared seeds for a verdict in concept-shift" in table
    assert "map-test" in table and "`fffffff`" in table
    paper = dec.paper_row(d)
    assert "**Ripple-Strat (paper)** against its rivals (FedYogi, local-only)" in paper
    readme = dec.readme_choices(d)
    assert "| FedYogi: Ripple (recommended) trails | label-skew-1 |" in readme


def test_rows_and_comparisons_come_from_the_json_not_a_list(tmp_path):
    """A later protocol's extra row (ifca-yogi) is a rival without a change to the generator,
    and the costs read the kept summaries of the cell."""
    d = synthetic()
    cell = d["cells"]["label-skew-1"]
    rows = {**cell["rows"], "ifca-yogi": _row(_up(BASE, 0.10, 2.0))}
    comparisons = {**COMPARISONS, "ripple-rec": [*COMPARISONS["ripple-rec"], "ifca-yogi"]}
    d["protocol"]["comparisons"] = comparisons
    d["rows"]["ifca-yogi"] = {"method": "ifca", "cluster-optimizer": "fedyogi"}
    for c, entry in d["cells"].items():
        r = {
            **entry["rows"],
            "ifca-yogi": rows["ifca-yogi"] if c == "label-skew-1" else entry["rows"]["fedyogi"],
        }
        d["cells"][c] = {"rows": r, "protocol": protocol_verdicts(r, comparisons)}
    o = dec.outcome(d, "label-skew-1", "ripple-rec", "final_accuracy")
    assert o["use"] == ["ifca-yogi", "fedyogi"]  # the largest lead first
    assert dec.use_text(o) == "IFCA (FedYogi per cluster) or FedYogi: Ripple (recommended) trails"
    for row, wall, ratio, models in (("ifca-yogi", 300.0, 2.5, 4), ("fedavg", 100.0, 1.0, 1)):
        for s in SEEDS[:2]:
            summary = {"wall_seconds": wall, "bytes_ratio_vs_fedavg": ratio, "models": models}
            (tmp_path / f"label-skew-1-{row}-r100-seed{s}.json").write_text(json.dumps(summary))
    cost = dec.cost_text(d, "label-skew-1", o["use"], tmp_path)
    assert cost == (
        "IFCA (FedYogi per cluster): 2.50x FedAvg's bytes a round, 4 models, 3.0x FedAvg's "
        "run time (2 runs); FedYogi: no kept run yet"
    )


def test_the_drift_check_covers_the_new_blocks_and_the_table_opens_the_page():
    from paper import reference

    assert {"which-method-decision", "which-method-paper-row", "which-method-dev-seeds"} <= set(
        reference.PAGES["docs/which-method.md"]
    )
    assert "ripple-choices" in reference.PAGES["README.md"]
    assert {"heterogeneity-map", "map-contenders-300"} <= set(
        reference.PAGES["docs/archive-first-map.md"]
    )
    head = (reference.ROOT / "docs/which-method.md").read_text().splitlines()[:40]
    assert "| kind of heterogeneity | clients | what to use |" in "\n".join(head)


def test_readme_table1_shows_every_row_its_sentences_name():
    from paper import evidence as ev
    from paper import evidence_table1 as t1

    t = ev.load(t1.TABLE1)
    table = t1.headline()
    for row in t1.named(t):
        assert f"| {ev.label(row, t1._k(t['rows'][row]))}" in table, row
