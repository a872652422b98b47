"""A restarted SuperNode (a new node id, the same partition) takes over its partition once the
old node failed a round; while the holder answers, a second claimant is refused as before.
(The same with real processes: tests/processes/test_faults_real.py, case (a).)"""

from __future__ import annotations

import json

from conftest import FakeGrid, tiny_run_config

from ripple_flwr.app.server.run import run_server


class RestartGrid(FakeGrid):
    """Partitions 0-2; the node of partition 2 stops answering from round ``kill_round`` on
    (still listed, as Flower lists a killed node until its heartbeat lapses), and a second
    node claiming partition 2 connects from round ``appear_round`` on."""

    def __init__(self, cfg, kill_round: int, appear_round: int) -> None:
        self.kill_round, self.appear_round = kill_round, appear_round
        configs = [{"partition-id": p, "num-partitions": 3} for p in (0, 1, 2, 2)]
        super().__init__(cfg, node_configs=configs)
        ids = list(self.contexts)
        self.old, self.new = ids[2], ids[3]

    def get_node_ids(self):
        # Admission looks at the start of a round, before its training is pushed.
        return [
            n
            for n in self.contexts
            if n != self.new or self.last_train_round >= self.appear_round - 1
        ]

    def _deliver(self, msg):
        if msg.metadata.dst_node_id == self.old and self.last_train_round >= self.kill_round:
            return None  # no reply: the round closes without it
        return super()._deliver(msg)


def config(cache_dir, tmp_path, name):
    cfg = tiny_run_config(
        cache_dir,
        method="fedavg",
        **{"num-partitions": 3, "clients-per-round": 3, "num-server-rounds": 4, "eval-every": 4},
    )
    cfg["results-path"] = str(tmp_path / f"{name}.json")
    cfg["round-timeout"] = 0.5
    return cfg


def test_a_restarted_node_takes_over_the_partition_of_the_node_that_failed(cache_dir, tmp_path):
    cfg = config(cache_dir, tmp_path, "restart")
    grid = RestartGrid(cfg, kill_round=2, appear_round=3)
    res = json.loads(run_server(grid, cfg).read_text())
    rounds = {r["round"]: r for r in res["rounds"]}
    assert [d["partition"] for d in rounds[2]["dropped"]] == [2]
    (joined,) = res["late_joiners"]
    assert joined["round"] == 3 and joined["partitions"] == []
    assert joined["took_over"] == {"2": {"from": str(grid.old), "to": str(grid.new)}}
    assert res["clients"]["partition_ids"] == [0, 1, 2]
    assert res["clients"]["node_ids"][2] == str(grid.new)
    assert all(rounds[r]["received"] == 3 and not rounds[r]["dropped"] for r in (3, 4))


def test_a_second_claimant_is_refused_while_the_holder_answers(cache_dir, tmp_path):
    cfg = config(cache_dir, tmp_path, "claim")
    grid = RestartGrid(cfg, kill_round=99, appear_round=2)
    res = json.loads(run_server(grid, cfg).read_text())
    (joined,) = res["late_joiners"]
    assert "took_over" not in joined
    assert "already held" in joined["rejected"][str(grid.new)]
    assert res["clients"]["node_ids"][2] == str(grid.old)
    assert all(r["received"] == 3 for r in res["rounds"])
