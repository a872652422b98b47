"""IFCA's re-draw of its K initial models until every one is some clients' choice."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FakeGrid, tiny_run_config
from test_clustered import run_method, state

from ripple_flwr.aggregation.clustering import redraw_until_balanced
from ripple_flwr.app.protocol.candidates import split_candidates
from ripple_flwr.app.protocol.records import record_to_state, state_to_record
from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.app.server.engine import Engine
from ripple_flwr.methods.ifca.server import IFCAMethod
from ripple_flwr.runs.results import arrayrecord_nbytes


# -- the pure re-draw ----------------------------------------------------------------------------
def test_a_collapsed_draw_is_drawn_again_until_one_is_balanced():
    picks = {0: [0] * 10, 1: [0] * 6 + [1] * 4, 2: [1] * 5 + [0] * 5}
    asked: list[int] = []

    def draw(d):
        asked.append(d)
        return d  # the "models" of draw d; choices looks them up

    kept, counts = redraw_until_balanced(draw, picks.__getitem__, 2, 0.2, 20)
    assert kept == 1 and counts == [[10, 0], [6, 4]]
    assert asked == [0, 1]  # it stops at the first balanced draw


def test_the_redraw_stops_at_the_cap_and_keeps_the_most_balanced_draw():
    picks = {
        0: [0] * 10,  # least-chosen share 0
        1: [0, 0, 0, 0, 0, 1, 1, 1, 2, 2],  # 0 (model 3 unchosen)
        2: [0, 0, 0, 0, 1, 1, 1, 2, 2, 3],  # 0.1: the best, below min_share 0.15
        3: [0, 0, 0, 1, 1, 2, 2, 2, 2, 3],  # 0.1 again: a later tie does not replace it
        4: [0, 1, 2, 3] * 3,  # balanced, but past the cap
    }
    kept, counts = redraw_until_balanced(lambda d: d, picks.__getitem__, 4, 0.15, 4)
    assert kept == 2 and len(counts) == 4
    assert counts[2] == [4, 3, 2, 1] and counts[0] == [10, 0, 0, 0]


def test_a_draw_nobody_answered_ends_the_redraw():
    picks = {0: [0, 0, 0], 1: []}
    kept, counts = redraw_until_balanced(lambda d: d, picks.__getitem__, 2, 0.2, 20)
    assert kept == 0 and counts == [[3, 0], [0, 0]]
    with pytest.raises(ValueError, match="outside"):
        redraw_until_balanced(lambda d: d, lambda d: [0, 2], 2, 0.2, 20)


# -- through the strategy ------------------------------------------------------------------------
def test_ifca_trains_from_the_first_balanced_draw_and_records_what_the_draws_cost():
    # The stand-in clients want w0 = 0 (pids 0, 2) or 100 (pids 1, 3). Draw 0 (w0 = 10, 500):
    # every client prefers model 0. Draw 1 = fresh_state(2), fresh_state(3) (w0 = 10, 90).
    models = [state(10.0), state(500.0), state(10.0), state(90.0)]
    strategy, _, clients = run_method("ifca", models=models, **{"ifca-init-balance": 0.4})
    draws = strategy.run_record()["assignment"]["init_draws"]
    assert [d["counts"] for d in draws] == [[4, 0], [2, 2]]
    assert [d["kept"] for d in draws] == [False, True]
    model_bytes = arrayrecord_nbytes(state_to_record(state(0.0)))
    assert [d["bytes_down"] for d in draws] == [4 * 2 * model_bytes] * 2  # K models x 4 clients
    assert strategy.run_record()["assignment"]["init_bytes_down"] == 16 * model_bytes
    # Round 1 trained from draw 1: model 1 = mean of pids 1 and 3's training from w0 = 90.
    assert strategy.method.models[1]["w"][0] == pytest.approx((20 * 92 + 40 * 94) / 60)
    assert clients.received[("evaluate", 0)] == [2, 2, 2]  # two draws, one evaluation


def test_balance_zero_keeps_the_first_draw_without_asking():
    models = [state(10.0), state(500.0)]
    strategy, _, clients = run_method("ifca", models=models, **{"ifca-init-balance": 0.0})
    assert strategy.method.init_draws == [] and clients.received[("evaluate", 0)] == [2]
    assert strategy.method.models[1]["w"][0] == pytest.approx(500.0)  # nobody chose it


def _blown_up(st: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The classifier's weights x 1000: confident, mostly wrong logits, a huge loss."""
    out = dict(st)
    last = [k for k in st if k.endswith("weight")][-1]
    out[last] = st[last] * np.float32(1000.0)
    return out


def test_a_collapsed_first_draw_is_drawn_again_with_the_real_clients(cache_dir):
    from ripple_flwr.app.server.setup import initial_state
    from ripple_flwr.data.cache import cached_federation

    over = {"num-components": 2, "num-server-rounds": 1, "ifca-init-balance": 0.3}
    cfg = tiny_run_config(cache_dir, method="ifca", **over)
    settings = parse_run_config(cfg)
    fed = cached_federation(settings)

    def fresh(i):
        return initial_state(settings, fed.dataset.image_shape, fed.dataset.num_classes, i)

    def draw(d):  # draw 0's model 1 is rigged to lose every client
        return [fresh(0), _blown_up(fresh(1))] if d == 0 else [fresh(2 * d), fresh(2 * d + 1)]

    strategy = Engine(settings, fresh(0), IFCAMethod(settings, draw(0), draw=draw))
    grid = FakeGrid(cfg, keep_traffic=True)
    strategy.start(grid, state_to_record(fresh(0)), num_rounds=1)
    draws = strategy.method.init_draws
    assert draws[0]["counts"] == [6, 0] and not draws[0]["kept"]
    (kept,) = [d["draw"] for d in draws if d["kept"]]
    assert kept >= 1 and min(draws[kept]["counts"]) >= 1  # 0.3 / 2 of 6 clients: at least one
    assert all(d["answered"] == 6 and d["failed"] == 0 for d in draws)
    # The first training messages carried the kept draw's two models.
    train = next(m for m in grid.sent if m.metadata.message_type == "train")
    sent, _ = split_candidates(train.content.array_records)
    for got, want in zip(sent, draw(kept), strict=True):
        for key, value in want.items():
            np.testing.assert_array_equal(record_to_state(got)[key], value)
    # The kept draw's choices were the assignment round 1 started from.
    assert sorted(set(strategy.method.assignment.tolist())) == [0, 1]
