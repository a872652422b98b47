"""Flower's one-model strategies in the app: their own configure/aggregate run unchanged.

Each method runs on the in-process grid with hand-built clients; a plain
instance of the same Flower class, fed the very replies the app received,
must produce the same global model. The app only chooses who trains
(seeded), validates replies and keeps the model's dtypes.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from conftest import FakeGrid
from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import strategy as flower

from ripple_flwr.aggregation.mixing import uniform_sample
from ripple_flwr.app.protocol.records import record_to_state, state_to_record
from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.app.server.bases.flower import FlowerMethod, fedopt_kwargs
from ripple_flwr.app.server.rounds.grid import SampledGrid
from ripple_flwr.app.server.setup import make_engine
from ripple_flwr.experiments.compose import applied
from ripple_flwr.methods.registry import MethodInputs, get_method

STATE = {
    "w": np.array([1.0, -2.0, 0.5, 3.0], dtype=np.float32),
    "b": np.array([0.25], dtype=np.float32),
}


class LinearClients:
    """Deterministic updates that differ by client and by round, and counts that differ too."""

    def __init__(self) -> None:
        self.configs: list[dict] = []

    def __call__(self, msg: Message, context) -> Message:
        pid = int(context.node_config["partition-id"])
        kind = msg.metadata.message_type
        if kind.startswith("query"):
            info = ConfigRecord({"partition-id": pid, "num-partitions": 6})
            return Message(RecordDict({"info": info}), reply_to=msg)
        state = record_to_state(msg.content.array_records["arrays"])
        if kind == "train":
            cfg = dict(msg.content.config_records["config"])
            self.configs.append(cfg)
            r = int(cfg["server-round"])
            new = {
                "w": (state["w"] * 0.9 + np.float32(pid - 2.5 + 0.1 * r)).astype(np.float32),
                "b": (state["b"] - np.float32(0.05 * pid * r)).astype(np.float32),
            }
            metrics = MetricRecord({"num-examples": 10 + 3 * pid, "train_loss": 1.0 / (pid + 1)})
            content = RecordDict({"arrays": state_to_record(new), "metrics": metrics})
            return Message(content, reply_to=msg)
        metrics = MetricRecord({"loss": 1.0, "accuracy": 0.5, "num-examples": 10})
        return Message(RecordDict({"metrics": metrics}), reply_to=msg)


FLOWER_CLASSES = {
    "fedavg": lambda s: flower.FedAvg(),
    "fedprox": lambda s: flower.FedProx(proximal_mu=s.option("proximal-mu")),
    "fedavgm": lambda s: flower.FedAvgM(server_momentum=s.option("fedavgm-momentum")),
    "fedadam": lambda s: flower.FedAdam(**fedopt_kwargs(s)),
    "fedyogi": lambda s: flower.FedYogi(**fedopt_kwargs(s)),
    "fedadagrad": lambda s: flower.FedAdagrad(**fedopt_kwargs(s, moments=False)),
    "fedmedian": lambda s: flower.FedMedian(),
    "fedtrimmedavg": lambda s: flower.FedTrimmedAvg(beta=s.option("trimmed-beta")),
    "krum": lambda s: flower.Krum(num_malicious_nodes=s.option("krum-malicious")),
}
# Krum's guarantee needs clients-per-round >= 2 f + 3; these runs train 4 per round.
OVERRIDES = {"krum": {"krum-malicious": 0}}


def run_method(method: str, rounds: int = 3, **over):
    cfg = {
        "method": method,
        "num-partitions": 6,
        "clients-per-round": 4,
        "num-components": 2,
        "num-server-rounds": rounds,
        "eval-every": 1,
        "round-timeout": 5.0,
        "fedopt-eta": 0.05,
        **over,
    }
    cfg = applied(cfg, ["fedopt-eta"])[0]  # for the methods that read it (FedOpt's)
    settings = parse_run_config(cfg)
    clients = LinearClients()
    copies: list[Message] = []

    def keep_a_copy(msg, reply):  # FedMedian and friends pop arrays out of the replies
        copies.append(copy.deepcopy(reply))
        return reply

    grid = FakeGrid(cfg, app=clients, faults={p: keep_a_copy for p in range(6)})
    grid.reply_copies = copies
    strategy = make_engine(get_method(method), MethodInputs(settings, STATE))
    result = strategy.start(grid, state_to_record(STATE), num_rounds=rounds)
    return settings, strategy, grid, clients, result


@pytest.mark.parametrize("method", list(FLOWER_CLASSES))
def test_aggregate_equals_flowers_class_on_the_same_replies(method):
    settings, strategy, grid, clients, result = run_method(method, **OVERRIDES.get(method, {}))
    assert isinstance(strategy.method, FlowerMethod)
    reference = FLOWER_CLASSES[method](settings)
    arrays = state_to_record(STATE)
    train_replies = [m for m in grid.reply_copies if m.metadata.message_type == "train"]
    for rnd in range(1, 4):
        sent = [m for m in grid.sent if m.metadata.message_type == "train"][4 * (rnd - 1) :][:4]
        view = SampledGrid(grid, [m.metadata.dst_node_id for m in sent])
        list(reference.configure_train(rnd, arrays, ConfigRecord(), view))
        replies = [
            m
            for m in train_replies
            if m.metadata.reply_to_message_id in {s.metadata.message_id for s in sent}
        ]
        arrays, _ = reference.aggregate_train(rnd, replies)
        # The app sends the model in its own dtypes; so does the reference from here on.
        arrays = state_to_record(
            {k: v.astype(np.float32) for k, v in record_to_state(arrays).items()}
        )
    got = record_to_state(result.arrays)
    want = record_to_state(arrays)
    for key in STATE:
        assert got[key].dtype == np.float32
        np.testing.assert_allclose(got[key], want[key], rtol=1e-6, atol=1e-7)
    # Something happened: the model moved away from its start.
    assert not np.allclose(got["w"], STATE["w"])


@pytest.mark.parametrize("method", list(FLOWER_CLASSES))
def test_same_sampler_and_bytes_as_fedavg(method):
    _, strategy, _, clients, _ = run_method(method, **OVERRIDES.get(method, {}))
    _, fedavg, _, _, _ = run_method("fedavg")
    rng = np.random.default_rng(np.random.SeedSequence([0, 0x5A4D]))
    expected = [uniform_sample(6, 4, rng).tolist() for _ in range(3)]
    assert [r.sampled for r in strategy.ledger.rounds] == expected
    model_bytes = sum(v.nbytes for v in STATE.values())
    for mine, ref in zip(strategy.ledger.rounds, fedavg.ledger.rounds, strict=True):
        assert mine.bytes_down == mine.bytes_up == 4 * model_bytes
        assert (mine.bytes_down, mine.bytes_up) == (ref.bytes_down, ref.bytes_up)
    # Every client is scored with the global model at every round (personalised evaluation).
    assert [len(e.clients) for e in strategy.ledger.evaluations] == [6, 6, 6]


def test_fedprox_sends_proximal_mu_from_the_run_config():
    _, _, _, clients, _ = run_method("fedprox", **{"proximal-mu": 0.3})
    assert len(clients.configs) == 12
    assert all(c["proximal-mu"] == pytest.approx(0.3) for c in clients.configs)
    assert all(c["lr"] == pytest.approx(0.01) and c["local-epochs"] == 1 for c in clients.configs)
    _, _, _, plain, _ = run_method("fedavg")
    assert all("proximal-mu" not in c for c in plain.configs)


def test_fedopt_keeps_its_own_state_between_rounds():
    _, strategy, _, _, _ = run_method("fedadam")
    # Flower's FedOpt state, set by its own configure_train / aggregate_train.
    assert (
        strategy.method.flower.current_arrays is not None and strategy.method.flower.m_t is not None
    )
    assert strategy.method.flower.v_t is not None and set(strategy.method.flower.m_t) == set(STATE)
    assert (
        strategy.method.flower.beta_1,
        strategy.method.flower.beta_2,
        strategy.method.flower.tau,
    ) == (0.9, 0.99, 1e-3)


def test_bad_reply_is_dropped_before_flower_sees_it():
    def poison(msg, reply):
        if msg.metadata.message_type != "train":
            return reply
        state = record_to_state(reply.content.array_records["arrays"])
        state["w"] = np.full_like(state["w"], np.nan)
        metrics = reply.content.metric_records["metrics"]
        return Message(
            RecordDict({"arrays": state_to_record(state), "metrics": metrics}), reply_to=msg
        )

    cfg = {
        "method": "fedadam",
        "num-partitions": 6,
        "clients-per-round": 6,
        "num-components": 2,
        "round-timeout": 5.0,
    }
    settings = parse_run_config(cfg)
    grid = FakeGrid(cfg, app=LinearClients(), faults={1: poison})
    strategy = make_engine(get_method("fedadam"), MethodInputs(settings, STATE))
    result = strategy.start(grid, state_to_record(STATE), num_rounds=2)
    assert all(np.isfinite(v).all() for v in record_to_state(result.arrays).values())
    assert [[d.partition for d in r.dropped] for r in strategy.ledger.rounds] == [[1], [1]]
    assert [r.received for r in strategy.ledger.rounds] == [5, 5]
