"""Update bounds on small hand-made arrays."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ripple_flwr.aggregation.robust import (
    RESCALE_FLOOR,
    low_median,
    out_of_bound,
    out_of_rescale,
    state_norm,
    unsafe_stacked_steps,
    unsafe_step,
    update_norm,
    update_stats,
)


def test_update_norm_by_hand_skips_counters():
    sent = {"w": np.array([1.0, 2.0], np.float32), "n": np.array(3, np.int64)}
    back = {"w": np.array([4.0, -2.0], np.float32), "n": np.array(100, np.int64)}
    assert update_norm(sent, back) == 5.0  # sqrt(3^2 + 4^2); the counter is no update
    assert state_norm(back) == pytest.approx(math.sqrt(20.0))


def test_update_norm_of_huge_floats_is_inf_not_an_error():
    sent = {"w": np.zeros(3, np.float32)}
    back = {"w": np.full(3, 3e38, np.float32)}
    assert update_norm(sent, back) == pytest.approx(math.sqrt(3) * 3e38)
    ok, huge = out_of_bound([1.0, update_norm(sent, back)])
    assert ok is None and huge.startswith("update norm 5.196e+38 is 5.2e+38 x the round's median 1")


def test_low_median_is_not_set_by_one_outlier_of_two():
    assert low_median([1.0, 1e30]) == 1.0
    assert low_median([3.0, 1.0, 2.0]) == 2.0
    assert low_median([]) is None


def test_out_of_bound_names_the_reason():
    reasons = out_of_bound([1.0, 1.2, 0.9, 50.0], factor=10.0)
    assert reasons[:3] == [None, None, None]
    assert "is 50 x the round's median 1" in reasons[3]
    assert out_of_bound([1.0, 50.0], factor=0.0) == [None, None]  # off
    assert "above max-update-norm=10" in out_of_bound([1.0, 50.0], factor=0.0, max_norm=10)[1]
    assert out_of_bound([float("nan"), 1.0]) == ["update norm is not finite", None]


def test_an_update_below_half_its_model_is_never_out_of_proportion():
    # Non-IID rounds: most clients barely move their model (0.002), one moves it by a tenth of
    # its norm (0.7 of 6.4): 350 x the median, yet honest. Above half the model's norm: out
    # (a client returning 1.6 x its model moves it by 0.6 of its norm).
    norms = [0.002, 0.001, 0.003, 0.7, 3.9]
    reasons = out_of_bound(norms, factor=10.0, model_norms=[6.4] * 5)
    assert reasons[:4] == [None] * 4
    assert "above 0.5 x the norm 6.4 of the model it was sent" in reasons[4]
    assert out_of_bound(norms, factor=10.0)[3] is not None  # without the floor: dropped
    with pytest.raises(ValueError, match="5 update norms but 2 model norms"):
        out_of_bound(norms, model_norms=[1.0, 1.0])


def test_history_bounds_a_lonely_reply():
    assert out_of_bound([1e6]) == [None]  # nothing to compare with
    # the low median of {2, 3, 1e6} is 3
    assert "median 3 " in out_of_bound([1e6], history=[2.0, 3.0])[0]


def test_update_stats_by_hand():
    sent = {"w": np.array([3.0, 4.0], np.float32), "n": np.array(1, np.int64)}
    back = {"w": np.array([6.0, 8.0], np.float32), "n": np.array(9, np.int64)}  # 2 x the model
    norm, dot = update_stats(sent, back)
    assert norm == 5.0 and dot == 25.0  # rho = 25 / ||sent||^2 = 1: it doubles the model
    huge = {"w": np.array([3e38, 3e38], np.float32), "n": np.array(1, np.int64)}
    norm, dot = update_stats(sent, huge)
    assert math.isfinite(norm) and dot == pytest.approx(7 * 3e38, rel=1e-6)  # float64, no inf


def test_out_of_rescale_holds_rho_to_the_honest_median():
    honest = [0.002, -0.001, 0.003, 0.0015, 0.004]
    assert out_of_rescale(honest) == [None] * 5
    # 1.99 x the model: rho 0.99; 0.01 x the model: rho -0.99; both named, honest kept.
    reasons = out_of_rescale([*honest, 0.99, -0.99])
    assert reasons[:5] == [None] * 5
    assert "grows the model it was sent by 0.99" in reasons[5]
    assert "shrinks the model it was sent by 0.99" in reasons[6]
    # 3 of 10 colluding at rho 0.05 cannot move the low median: all three out.
    seven = [0.002, -0.001, 0.003, 0.0015, 0.004, 0.001, 0.002]
    assert all(r is not None for r in out_of_rescale([*seven, 0.05, 0.05, 0.05])[7:])
    # The history counts: a lonely reply is held to what honest clients did before.
    assert out_of_rescale([0.05], history=honest)[0] is not None
    assert out_of_rescale([0.05]) == [None]  # nothing to compare with but itself
    # Below the floor nothing is out, however small the median; off at factor 0.
    assert out_of_rescale([1e-6, 1e-6, RESCALE_FLOOR * 0.9]) == [None] * 3
    # Shrinking has its own, higher floor: an honest client shrinking a model fitted to other
    # data by 0.036 (FeSEM, measured) is kept; a 0.8 x model (rho -0.2) is not.
    reasons = out_of_rescale([*seven, -0.036, -0.2])
    assert reasons[7] is None and "shrinks the model it was sent by 0.2" in reasons[8]
    assert out_of_rescale([*seven, 0.036])[7] is not None  # growth keeps the 0.01 floor
    assert out_of_rescale([0.0, 0.0, 0.99], factor=0.0) == [None] * 3
    assert out_of_rescale([float("nan")]) == ["radial step is not finite"]


def test_unsafe_step():
    before = {"w": np.array([3.0, 4.0])}
    assert unsafe_step(before, {"w": np.array([3.5, 4.5])}) is None
    assert "from 5 to 500" in unsafe_step(before, {"w": np.array([300.0, 400.0])})
    assert "not be finite" in unsafe_step(before, {"w": np.array([np.inf, 0.0])})


def test_unsafe_stacked_steps_match_the_one_model_rule():
    before = {"w": np.array([[3.0, 4.0], [1.0, 0.0], [0.0, 0.0]], np.float32)}
    after = {"w": np.array([[3.5, 4.5], [100.0, 0.0], [np.nan, 0.0]], np.float32)}
    got = unsafe_stacked_steps(before, after)
    want = [unsafe_step({"w": before["w"][c]}, {"w": after["w"][c]}) for c in range(3)]
    assert got == want
    assert got[0] is None and "from 1 to 100" in got[1] and "not be finite" in got[2]
