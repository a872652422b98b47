"""The one statistics rule of every page: paired per seed, Student-t 95%, and the cases
where there is nothing to conclude (too few shared seeds, no spread) said as such."""

from __future__ import annotations

import math

import pytest

from ripple_flwr.runs.statistics import MIN_SEEDS, fmt_paired, paired, t_critical, verdict


def test_a_clear_paired_difference_leads_and_its_interval_is_students():
    p = paired({1: 0.80, 2: 0.71, 3: 0.90}, {1: 0.70, 2: 0.65, 3: 0.78})
    diffs = [0.10, 0.06, 0.12]
    mean, sd = sum(diffs) / 3, math.sqrt(sum((d - 0.28 / 3) ** 2 for d in diffs) / 2)
    assert math.isclose(p["mean"], mean) and math.isclose(p["half"], t_critical(2) * sd / 3**0.5)
    assert p["verdict"] == "leads" and p["wins"] == 3 and p["unpaired"] == []
    assert paired({1: 0.1, 2: 0.2, 3: 0.3}, {1: 0.3, 2: 0.41, 3: 0.49})["verdict"] == "trails"


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ({1: 0.6, 2: 0.7, 3: 0.8}, {1: 0.5, 2: 0.6, 3: 0.7}, "exact gap"),
        ({1: 0.6, 2: 0.7, 3: 0.8}, {1: 0.6, 2: 0.7, 3: 0.8}, "exact tie"),
    ],
)
def test_no_spread_is_an_exact_tie_or_gap_without_an_interval_never_leads(a, b, expected):
    p = paired(a, b)
    assert p["verdict"] == expected and p["half"] is None
    assert "±" not in fmt_paired(p) and "at every seed" in fmt_paired(p)


def test_fewer_than_three_shared_seeds_give_no_verdict():
    assert MIN_SEEDS == 3
    p = paired({1: 0.9, 2: 0.8}, {1: 0.1, 2: 0.2})  # a wide gap, but two seeds
    assert p["n"] == 2 and p["verdict"] == "too few seeds"
    assert verdict(None) == "no clear winner"


def test_seeds_on_one_side_only_are_listed_not_dropped_without_a_word():
    p = paired({1: 0.8, 2: 0.7, 3: 0.9, 5: 0.1, 9: None}, {1: 0.7, 2: 0.6, 3: 0.7, 7: 0.5})
    assert p["n"] == 3 and p["unpaired"] == ["5", "7"]  # 9 has no number on either side
    assert fmt_paired(p).endswith("[seeds on one side only: 5, 7]")
