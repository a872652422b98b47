"""SCAFFOLD, FedDyn, Per-FedAvg and pFedMe: each update rule against plain PyTorch.

The app's strategy and the real client rules (``train_with_rule``, state in
each node's ``context.state`` through the in-process grid) train a tiny
linear model on two clients for three rounds; a plain-PyTorch reference
written here, sharing no code with the app, must end with the same server
and client states to 1e-6. The reference reproduces only train_local's
documented batch order (one seeded ``randperm`` per epoch).
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch
from conftest import FakeGrid
from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict
from torch import nn
from torch.nn import functional as F

from ripple_flwr.app.client.node_state import NodeStore
from ripple_flwr.app.client.work import client_rule
from ripple_flwr.app.protocol.records import record_to_state, state_to_record
from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.app.server.setup import make_engine
from ripple_flwr.methods.perfedavg.client import PerFedAvgRule
from ripple_flwr.methods.pfedme.client import PFedMeRule
from ripple_flwr.methods.registry import MethodInputs, get_method
from ripple_flwr.methods.scaffold.client import ScaffoldRule
from ripple_flwr.settings import ConfigError
from ripple_flwr.training.models import get_state, set_state
from ripple_flwr.training.rules import RoundInputs, train_with_rule

N_CLIENTS, N_EXAMPLES, BATCH, ROUNDS = 2, 8, 2, 3
LR, MOMENTUM = 0.05, 0.5
METHOD_KEYS = {
    "scaffold": {"server-lr": 1.0},
    "feddyn": {"feddyn-alpha": 0.01},
    "perfedavg": {"perfedavg-alpha": 0.01, "perfedavg-beta": 0.03},
    "pfedme": {
        "pfedme-lambda": 15.0,
        "pfedme-inner-steps": 5,
        "pfedme-personal-lr": 0.09,
        "pfedme-mu": 0.05,
        "pfedme-beta": 1.0,
    },
}


class Tiny(nn.Module):
    input_shape = (1, 1, 4)
    num_classes = 3

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x.flatten(1))


def initial_state() -> dict[str, np.ndarray]:
    torch.manual_seed(0)
    return get_state(Tiny())


def client_data(pid: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(100 + pid)
    x = rng.normal(size=(N_EXAMPLES, 1, 1, 4)).astype(np.float32)
    y = rng.integers(0, 3, size=N_EXAMPLES)
    return x, y


def seed_of(server_round: int, pid: int) -> int:
    return 1000 * server_round + pid


class RuleClients:
    """Nodes that train ``Tiny`` with the method's real client rule and keep state in
    their context; ``before_train(pid, round, context)`` may tamper (a lost state)."""

    def __init__(self, before_train=None) -> None:
        self.before_train = before_train

    def __call__(self, msg: Message, context) -> Message:
        pid = int(context.node_config["partition-id"])
        kind = msg.metadata.message_type
        settings = parse_run_config(context.run_config)
        if kind.startswith("query"):
            info = ConfigRecord(
                {"partition-id": pid, "num-partitions": N_CLIENTS, "num-examples": N_EXAMPLES}
            )
            return Message(RecordDict({"info": info}), reply_to=msg)
        rule = client_rule(settings)
        model = Tiny()
        set_state(model, record_to_state(msg.content.array_records["arrays"]))
        x, y = client_data(pid)
        store = NodeStore(context.state)
        if kind == "train":
            cfg = dict(msg.content.config_records["config"])
            r = int(cfg["server-round"])
            if self.before_train is not None:
                self.before_train(pid, r, context)
            extras = {
                n: record_to_state(rec)
                for n, rec in msg.content.array_records.items()
                if n != "arrays"
            }
            rule_cfg = msg.content.config_records.get("rule", ConfigRecord())
            inputs = RoundInputs(
                config=cfg,
                extras=extras,
                store=store,
                returning=bool(rule_cfg.get("returning", False)),
                lr=float(cfg["lr"]),
                momentum=float(cfg["momentum"]),
            )
            stats, out = train_with_rule(
                rule,
                model,
                x,
                y,
                inputs,
                epochs=1,
                batch_size=int(cfg["batch-size"]),
                seed=seed_of(r, pid),
            )
            content = RecordDict(
                {
                    "arrays": state_to_record(get_state(model)),
                    "metrics": MetricRecord(
                        {"num-examples": N_EXAMPLES, "train_loss": float(stats["mean_loss"])}
                    ),
                }
            )
            for name, arrays in out.items():
                content[name] = state_to_record(arrays)
            return Message(content, reply_to=msg)
        xt, yt = torch.as_tensor(x), torch.as_tensor(y)
        rule.personalise(model, xt, yt, store)
        with torch.no_grad():
            acc = float((model(xt).argmax(1) == yt).float().mean())
        metrics = MetricRecord({"loss": 1.0, "accuracy": acc, "num-examples": N_EXAMPLES})
        return Message(RecordDict({"metrics": metrics}), reply_to=msg)


def run(method: str, app=None, faults=None, **over):
    cfg = {
        "method": method,
        "num-partitions": N_CLIENTS,
        "clients-per-round": N_CLIENTS,
        "num-components": 2,
        "num-server-rounds": ROUNDS,
        "eval-every": 1,
        "round-timeout": 5.0,
        "lr": LR,
        "momentum": MOMENTUM,
        "batch-size": BATCH,
        **METHOD_KEYS[method],
        **over,
    }
    settings = parse_run_config(cfg)
    grid = FakeGrid(cfg, app=app or RuleClients(), faults=faults)
    strategy = make_engine(get_method(method), MethodInputs(settings, initial_state()))
    strategy.start(grid, state_to_record(initial_state()), num_rounds=ROUNDS)
    stores = [NodeStore(ctx.state) for ctx in grid.contexts.values()]
    return strategy, grid, stores


# -- the plain-PyTorch reference -------------------------------------------------------------
def as_params(state) -> list[torch.Tensor]:
    return [torch.tensor(state["fc.weight"]), torch.tensor(state["fc.bias"])]


def grad(params, x, y) -> list[torch.Tensor]:
    ps = [p.detach().clone().requires_grad_(True) for p in params]
    loss = F.cross_entropy(torch.as_tensor(x).flatten(1) @ ps[0].T + ps[1], torch.as_tensor(y))
    return list(torch.autograd.grad(loss, ps))


def batches(seed: int, size: int) -> list[torch.Tensor]:
    order = torch.randperm(N_EXAMPLES, generator=torch.Generator().manual_seed(seed))
    return [order[i : i + size] for i in range(0, N_EXAMPLES, size)]


def momentum_step(params, buf, g, lr):
    buf = list(g) if buf is None else [MOMENTUM * b + gi for b, gi in zip(buf, g, strict=True)]
    return [p - lr * b for p, b in zip(params, buf, strict=True)], buf


def f64(ts):
    return [t.double() for t in ts]


def clipped(g, max_norm: float):
    """``g`` scaled to at most ``max_norm`` in L2 over all tensors (torch's clip_grad_norm_)."""
    if not max_norm:
        return g
    norm = torch.sqrt(sum((gi.double() ** 2).sum() for gi in g))
    scale = min(1.0, max_norm / (float(norm) + 1e-6))
    return [gi * scale for gi in g]


def reference(method: str, **over):
    """The method written out by hand: (global params, server state, client states)."""
    x = as_params(initial_state())
    zeros = [torch.zeros_like(t) for t in x]
    data = [client_data(pid) for pid in range(N_CLIENTS)]
    client_state = {pid: [z.clone() for z in zeros] for pid in range(N_CLIENTS)}
    server = [torch.zeros_like(t, dtype=torch.float64) for t in x]  # c (SCAFFOLD) or h (FedDyn)
    k = {**METHOD_KEYS[method], **over}
    clip = k.get(f"{method}-grad-clip", 0.0)
    for r in range(1, ROUNDS + 1):
        outs, deltas = [], []
        for pid in range(N_CLIENTS):
            xs, ys = data[pid]
            seed = seed_of(r, pid)
            th, buf = [t.clone() for t in x], None
            if method == "scaffold":
                c = [s.float() for s in server]
                ci = client_state[pid]
                steps = 0
                for idx in batches(seed, BATCH):
                    g = grad(th, xs[idx], ys[idx])
                    g = [gi + cj - cij for gi, cj, cij in zip(g, c, ci, strict=True)]
                    th, buf = momentum_step(th, buf, clipped(g, clip), LR)
                    steps += 1
                keff = sum((1 - MOMENTUM**j) / (1 - MOMENTUM) for j in range(1, steps + 1))
                new = [
                    cij - cj + (xj - tj) / (keff * LR)
                    for cij, cj, xj, tj in zip(ci, c, x, th, strict=True)
                ]
                deltas.append([n - o for n, o in zip(new, ci, strict=True)])
                client_state[pid] = new
            elif method == "feddyn":
                alpha, gk = k["feddyn-alpha"], client_state[pid]
                for idx in batches(seed, BATCH):
                    g = grad(th, xs[idx], ys[idx])
                    g = [
                        gi - gki + alpha * (t - xj)
                        for gi, gki, t, xj in zip(g, gk, th, x, strict=True)
                    ]
                    th, buf = momentum_step(th, buf, clipped(g, clip), LR)
                client_state[pid] = [
                    gki - alpha * (t - xj) for gki, t, xj in zip(gk, th, x, strict=True)
                ]
            elif method == "perfedavg":
                alpha, beta = k["perfedavg-alpha"], k["perfedavg-beta"]
                for idx in batches(seed, 2 * BATCH):
                    a, b = idx[:BATCH], idx[BATCH:]
                    temp = [t - alpha * g for t, g in zip(th, grad(th, xs[a], ys[a]), strict=True)]
                    # The meta step is plain SGD (every reference), not the run's momentum.
                    th = [t - beta * g for t, g in zip(th, grad(temp, xs[b], ys[b]), strict=True)]
            else:  # pfedme
                lam, plr, mu = k["pfedme-lambda"], k["pfedme-personal-lr"], k["pfedme-mu"]
                w, tt = [t.clone() for t in x], [t.clone() for t in x]
                for idx in batches(seed, BATCH):
                    for _ in range(k["pfedme-inner-steps"]):
                        g = grad(tt, xs[idx], ys[idx])
                        tt = [
                            t - plr * (gi + lam * (t - wi) + mu * t)
                            for t, gi, wi in zip(tt, g, w, strict=True)
                        ]
                    w, buf = momentum_step(
                        w, buf, [lam * (wi - t) for wi, t in zip(w, tt, strict=True)], LR
                    )
                client_state[pid] = tt
                th = w
            outs.append(th)
        mean = [torch.stack([f64(o)[j] for o in outs]).mean(0) for j in range(len(x))]
        prev = f64(x)
        if method == "scaffold":
            eta = k["server-lr"]
            new_x = [p + eta * (m - p) for p, m in zip(prev, mean, strict=True)]
            server = [
                s + torch.stack([f64(d)[j] for d in deltas]).sum(0) / N_CLIENTS
                for j, s in enumerate(server)
            ]
        elif method == "feddyn":
            alpha = k["feddyn-alpha"]
            server = [
                h - alpha * N_CLIENTS * (m - p) / N_CLIENTS
                for h, m, p in zip(server, mean, prev, strict=True)
            ]
            new_x = [m - h / alpha for m, h in zip(mean, server, strict=True)]
        elif method == "perfedavg":
            new_x = mean
        else:
            beta = k["pfedme-beta"]
            new_x = [(1 - beta) * p + beta * m for p, m in zip(prev, mean, strict=True)]
        x = [t.float() for t in new_x]
    return x, server, client_state


def close(got: np.ndarray, want: torch.Tensor) -> None:
    np.testing.assert_allclose(
        np.asarray(got, dtype=np.float64), want.double().numpy(), atol=1e-6, rtol=0
    )


@pytest.mark.parametrize("method", list(METHOD_KEYS))
def test_update_rule_matches_plain_pytorch(method):
    strategy, grid, stores = run(method)
    want_x, want_server, want_clients = reference(method)
    got = strategy.method.global_state
    close(got["fc.weight"], want_x[0])
    close(got["fc.bias"], want_x[1])
    # The model moved: the comparison is not between two untouched initialisations.
    assert not np.allclose(got["fc.weight"], initial_state()["fc.weight"], atol=1e-4)
    key = {"scaffold": "scaffold.c_i", "feddyn": "feddyn.g", "pfedme": "pfedme.theta"}.get(method)
    if method == "scaffold":
        close(strategy.method.control["fc.weight"], want_server[0])
        close(strategy.method.control["fc.bias"], want_server[1])
        assert np.abs(strategy.method.control["fc.weight"]).max() > 1e-3
    if method == "feddyn":
        close(strategy.method.h["fc.weight"], want_server[0])
        assert np.abs(strategy.method.h["fc.weight"]).max() > 1e-5
    for pid, store in enumerate(stores):
        if key is None:
            assert len(store) == 0  # Per-FedAvg keeps nothing between rounds
            continue
        close(store[key]["fc.weight"], want_clients[pid][0])
        close(store[key]["fc.bias"], want_clients[pid][1])
    assert all(not r.dropped and r.received == N_CLIENTS for r in strategy.ledger.rounds)


@pytest.mark.parametrize("method", ["scaffold", "feddyn"])
def test_gradient_clipping_matches_plain_pytorch(method):
    """``<method>-grad-clip`` clips every (corrected) step's gradient as Acar et al.'s code does."""
    key = f"{method}-grad-clip"
    strategy, _, _ = run(method, **{key: 0.05})
    want_x, _, _ = reference(method, **{key: 0.05})
    close(strategy.method.global_state["fc.weight"], want_x[0])
    close(strategy.method.global_state["fc.bias"], want_x[1])
    # The clip bit: without it the model lands elsewhere.
    unclipped, _, _ = reference(method, **{key: 0.0})
    assert not np.allclose(want_x[0].numpy(), unclipped[0].numpy(), atol=1e-4)


def test_perfedavg_meta_step_ignores_the_runs_momentum():
    """Per-FedAvg's beta step is plain SGD: the result does not depend on ``momentum``."""
    a, _, _ = run("perfedavg", momentum=0.0)
    b, _, _ = run("perfedavg", momentum=0.9)
    np.testing.assert_array_equal(
        a.method.global_state["fc.weight"], b.method.global_state["fc.weight"]
    )


def test_scaffold_sends_and_receives_two_records():
    strategy, grid, _ = run("scaffold")
    model_bytes = sum(v.nbytes for v in initial_state().values())
    for rec in strategy.ledger.rounds:
        assert rec.bytes_down == rec.bytes_up == 2 * N_CLIENTS * model_bytes
    train = grid.sent_of_type("train")
    assert all(set(m.content.array_records) == {"arrays", "control"} for m in train)
    # Round 1's c is zero; later ones carry the server's c.
    assert not np.any(record_to_state(train[0].content.array_records["control"])["fc.weight"])
    assert np.any(record_to_state(train[-1].content.array_records["control"])["fc.weight"])
    # The other methods send the model alone: FedAvg's bytes.
    for method in ("feddyn", "perfedavg", "pfedme"):
        other, _, _ = run(method)
        assert all(
            r.bytes_down == r.bytes_up == N_CLIENTS * model_bytes for r in other.ledger.rounds
        )


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (lambda content: content.array_records.pop("control"), "no 'control' record"),
        (
            lambda content: content.__setitem__(
                "control",
                state_to_record(
                    {
                        "fc.weight": np.full((3, 4), np.nan, dtype=np.float32),
                        "fc.bias": np.zeros(3, dtype=np.float32),
                    }
                ),
            ),
            "'control' tensor 'fc.weight' is not finite",
        ),
        (
            lambda content: content.__setitem__(
                "control",
                state_to_record({"fc.weight": record_to_state(content["control"])["fc.weight"]}),
            ),
            "'control' keys differ",
        ),
        (  # finite but enormous: c, and every later correction, would be 1e30
            lambda content: content.__setitem__(
                "control",
                state_to_record(
                    {
                        k: np.full_like(v, 1e30)
                        for k, v in record_to_state(content["control"]).items()
                    }
                ),
            ),
            "control delta moves c by",
        ),
        (  # the honest delta, 1e3 x: more than the reply's own update can produce
            lambda content: content.__setitem__(
                "control",
                state_to_record(
                    {k: v * 1e3 for k, v in record_to_state(content["control"]).items()}
                ),
            ),
            "control delta moves c by",
        ),
    ],
)
def test_bad_control_delta_is_dropped_and_server_state_stays_finite(tamper, reason):
    def fault(msg, reply):
        if msg.metadata.message_type == "train" and not reply.has_error():
            tamper(reply.content)
        return reply

    strategy, _, _ = run("scaffold", faults={1: fault})
    for rec in strategy.ledger.rounds:
        assert rec.received == 1
        assert [d.partition for d in rec.dropped] == [1]
        assert reason in rec.dropped[0].reason
    assert all(np.all(np.isfinite(v)) for v in strategy.method.control.values())
    assert all(np.all(np.isfinite(v)) for v in strategy.method.global_state.values())
    assert np.abs(strategy.method.control["fc.weight"]).max() > 0  # partition 0's deltas were used


@pytest.mark.parametrize("method", ["scaffold", "feddyn", "pfedme"])
def test_node_that_lost_its_state_starts_from_zero_with_a_warning(method, caplog):
    def restart(pid, server_round, context):
        if pid == 0 and server_round == 3:
            for key in list(context.state.keys()):
                del context.state[key]

    with caplog.at_level(logging.WARNING, logger="flwr.ripple"):
        strategy, _, stores = run(method, app=RuleClients(before_train=restart))
    assert all(r.received == N_CLIENTS for r in strategy.ledger.rounds)
    assert all(np.all(np.isfinite(v)) for v in strategy.method.global_state.values())
    if method != "pfedme":  # pFedMe's training needs no state; its personal model is rebuilt
        assert any("starting again from zero" in r.getMessage() for r in caplog.records)
    assert all(len(s) for s in stores)  # the state is rebuilt after the restart


def test_real_handlers_keep_state_per_node_and_report_it(cache_dir, tmp_path):
    from conftest import tiny_run_config

    from ripple_flwr.app.server.run import run_server

    cfg = tiny_run_config(
        cache_dir,
        method="scaffold",
        **{"num-server-rounds": 3, "results-path": str(tmp_path / "r.json")},
    )
    grid = FakeGrid(cfg)
    path = run_server(grid, cfg)
    import json

    res = json.loads(path.read_text())
    trained: dict[int, int] = {}
    for rec in res["rounds"]:
        assert rec["received"] == 3 and not rec["dropped"]
        assert rec["bytes_down"] == rec["bytes_up"] == 2 * 3 * res["model_bytes"]
        for pid in rec["sampled"]:
            trained[pid] = trained.get(pid, 0) + 1
    assert res["client_state"]["lost"] == []
    for ctx in grid.contexts.values():
        pid = int(ctx.node_config["partition-id"])
        store = NodeStore(ctx.state)
        if pid in trained:
            assert "scaffold.c_i" in store
            assert int(ctx.state.config_records["ripple.rule-state"]["trained"]) == trained[pid]
        else:
            assert len(store) == 0


def test_perfedavg_personalises_with_one_alpha_step_on_the_train_split():
    model = Tiny()
    set_state(model, initial_state())
    x, y = client_data(0)
    want = [
        p - 0.01 * g
        for p, g in zip(
            as_params(initial_state()), grad(as_params(initial_state()), x, y), strict=True
        )
    ]
    PerFedAvgRule(alpha=0.01, beta=1e-3).personalise(
        model, torch.as_tensor(x), torch.as_tensor(y), {}
    )
    close(model.fc.weight.detach().numpy(), want[0])
    close(model.fc.bias.detach().numpy(), want[1])


def test_pfedme_scores_its_personal_model_and_the_global_one_without_it():
    model = Tiny()
    set_state(model, initial_state())
    rule = PFedMeRule(lam=15.0, inner_steps=5, personal_lr=0.09)
    x, y = torch.as_tensor(client_data(0)[0]), torch.as_tensor(client_data(0)[1])
    rule.personalise(model, x, y, {})
    np.testing.assert_array_equal(get_state(model)["fc.weight"], initial_state()["fc.weight"])
    personal = {k: v + 1.0 for k, v in initial_state().items()}
    rule.personalise(model, x, y, {"pfedme.theta": personal})
    np.testing.assert_array_equal(get_state(model)["fc.weight"], personal["fc.weight"])


def test_scaffold_option_two_with_momentum_uses_effective_steps():
    rule = ScaffoldRule()
    rule.momentum = 0.0
    assert rule.effective_steps(5) == 5.0
    rule.momentum = 0.9
    # 1 + 1.9 + 2.71 + 3.439 + 4.0951: what 5 momentum steps move for a constant gradient.
    assert rule.effective_steps(5) == pytest.approx(13.1441)
    with pytest.raises(ValueError, match="no 'control' record"):
        rule.begin(Tiny(), RoundInputs())


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("feddyn-alpha", 0.0),
        ("perfedavg-alpha", -0.01),
        ("perfedavg-beta", math.inf),
        ("pfedme-lambda", 0.0),
        ("pfedme-inner-steps", 0),
        ("pfedme-personal-lr", 0.0),
        ("pfedme-beta", 0.0),
        ("pfedme-beta", 2.5),
    ],
)
def test_new_keys_are_validated(key, value):
    with pytest.raises(ConfigError, match=key):
        parse_run_config({key: value})


def test_paper_and_reference_defaults():
    s = parse_run_config({})
    assert [s.option(k) for k in ("feddyn-alpha", "perfedavg-alpha")] == [0.01, 0.01]
    assert (s.option("pfedme-lambda"), s.option("pfedme-inner-steps")) == (15.0, 5)
    # The references' values: PFLlib's Per-FedAvg beta = the client lr; the pFedMe optimiser's
    # mu; Acar et al.'s gradient clip for SCAFFOLD and FedDyn.
    assert s.option("perfedavg-beta") == s.training.lr
    assert s.option("pfedme-mu") == 1e-3
    assert s.option("scaffold-grad-clip") == s.option("feddyn-grad-clip") == 10.0


def test_a_client_that_failed_before_keeping_state_is_not_reported_lost(cache_dir, tmp_path):
    import json

    from conftest import tiny_run_config

    from ripple_flwr.app.client.handlers import dispatch
    from ripple_flwr.app.server.run import run_server

    def app(msg, context):
        cfg = msg.content.config_records.get("config")
        first = cfg is not None and int(cfg.get("server-round", 0)) == 1
        if msg.metadata.message_type == "train" and first:
            if int(context.node_config["partition-id"]) == 0:
                raise RuntimeError("crashed before training")
        return dispatch(msg, context)

    cfg = tiny_run_config(
        cache_dir,
        method="pfedme",
        **{
            "num-server-rounds": 3,
            "clients-per-round": 6,
            "eval-every": 3,
            "results-path": str(tmp_path / "r.json"),
        },
    )
    grid = FakeGrid(cfg, app=app)
    res = json.loads(run_server(grid, cfg).read_text())
    assert [len(r["dropped"]) for r in res["rounds"]] == [1, 0, 0]
    assert res["client_state"]["lost"] == []
    node0 = next(c for c in grid.contexts.values() if c.node_config["partition-id"] == 0)
    assert int(node0.state.config_records["ripple.rule-state"]["trained"]) == 2
    assert "pfedme.theta" in NodeStore(node0.state)
