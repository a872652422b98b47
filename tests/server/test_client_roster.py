"""ClientRoster: who takes part, from the one-shot round, and the late joiners."""

from __future__ import annotations

from conftest import FakeGrid, tiny_run_config

from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.app.server.roster.admission import ClientRoster


def test_the_query_round_orders_clients_by_partition_and_sets_new_clients_aside(cache_dir):
    cfg = tiny_run_config(cache_dir, method="fedavg", **{"new-clients": 2})
    settings = parse_run_config(cfg)
    roster = ClientRoster(settings, "none", None)
    roster.expect()
    got = roster.prepare(FakeGrid(cfg))
    assert got.partition_ids == list(range(6)) and len(got.node_ids) == 6
    assert roster.new_clients.partition_ids == [6, 7]
    assert all(n > 0 for n in got.num_examples)


def test_a_late_joiner_is_asked_when_it_shows_up_and_a_held_out_one_is_set_aside(cache_dir):
    cfg = tiny_run_config(cache_dir, method="fedavg", **{"new-clients": 1})
    settings = parse_run_config(cfg)
    grid = FakeGrid(cfg, join_after={6: 1})  # the held-out node connects after round 1
    roster = ClientRoster(settings, "none", None)
    roster.expect()
    assert roster.prepare(grid).partition_ids == list(range(6))
    assert roster.new_clients.partition_ids == []
    assert roster.admit_late_joiners(grid, 1, []) is None  # nobody new yet
    grid.last_train_round = 1  # round 1's training messages went out
    assert roster.admit_late_joiners(grid, 2, []) is None  # no training client among them
    assert roster.new_clients.partition_ids == [6]
    assert roster.joined == [
        {**roster.joined[0], "round": 2, "partitions": [], "new_clients": [6], "rejected": {}}
    ]
