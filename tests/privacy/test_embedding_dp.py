"""The differentially private embedding in a run: public mechanism, client release, config."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import tiny_run_config
from flwr.app import ConfigRecord, Context, Message, RecordDict

from ripple_flwr.app.protocol.records import (
    DP_CONFIG,
    DP_RECORD,
    mechanism_parts,
    mechanism_records,
)
from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.privacy.mechanism import gaussian_sigma, privatize_embedding
from ripple_flwr.privacy.release import (
    NOISE_SEED_KEY,
    PublicMechanism,
    noise_generator,
    public_mechanism,
)
from ripple_flwr.settings import ConfigError


def mechanism(p: int = 6, r: int = 2, epsilon: float = 1.0) -> PublicMechanism:
    rng = np.random.default_rng(0)
    basis, _ = np.linalg.qr(rng.normal(size=(p, r)))
    return PublicMechanism(
        center=rng.normal(size=p),
        scale=rng.uniform(0.5, 2.0, size=p),
        basis=basis,
        lift=basis * 1.5,
        clip=0.7,
        epsilon=epsilon,
        delta=1e-5,
    )


def test_the_mechanism_travels_unchanged_and_releases_as_privatize_embedding():
    mech = mechanism()
    recs = mechanism_records(mech)
    back = PublicMechanism.from_parts(*mechanism_parts(recs[DP_RECORD], recs[DP_CONFIG]))
    for key in ("center", "scale", "basis", "lift"):
        np.testing.assert_array_equal(getattr(back, key), getattr(mech, key))
    assert (back.clip, back.epsilon, back.delta, back.log_space) == (0.7, 1.0, 1e-5, True)
    assert back.sigma == pytest.approx(gaussian_sigma(1.0, 1e-5, 1.4))
    phi = np.abs(np.random.default_rng(1).normal(size=6)) * 5
    got = back.release(phi, np.random.default_rng(3))
    want = privatize_embedding(
        phi,
        1.0,
        1e-5,
        0.7,
        np.random.default_rng(3),
        center=mech.center,
        scale=mech.scale,
        basis=mech.basis,
        lift=mech.lift,
        log_space=True,
    )
    np.testing.assert_array_equal(got, want)
    assert not np.allclose(got, phi)


def test_noise_is_secret_unless_the_node_fixes_its_seed():
    a = noise_generator({}).normal(size=4)
    b = noise_generator({}).normal(size=4)
    assert not np.allclose(a, b)  # fresh OS entropy each time
    c = noise_generator({NOISE_SEED_KEY: 5}).normal(size=4)
    d = noise_generator({NOISE_SEED_KEY: 5}).normal(size=4)
    np.testing.assert_array_equal(c, d)


@pytest.mark.parametrize(
    "over, match",
    [
        ({"method": "fedavg"}, "sends none"),
        ({"router": "mean-unmixing"}, "sends none"),
        ({"embedding-dp-delta": 0.0}, "embedding-dp-delta"),
        ({"embedding-dp-epsilon": -1.0}, "embedding-dp-epsilon"),
        ({"embedding-dp-clip": -2.0}, "embedding-dp-clip"),
    ],
)
def test_bad_dp_settings_are_refused(over, match):
    cfg = {"method": "ripple", "embedding-dp-epsilon": 4.0, **over}
    with pytest.raises(ConfigError, match=match):
        parse_run_config(cfg).validate()


def test_the_client_sends_the_noisy_release_only(tiny_checkpoint, cache_dir):
    from ripple_flwr.app.client.handlers import handle_query
    from ripple_flwr.app.client.work import client_summary, embedder_for
    from ripple_flwr.data.cache import cached_federation
    from ripple_flwr.router.checkpoint import load_checkpoint

    cfg = tiny_run_config(cache_dir, method="ripple", checkpoint=str(tiny_checkpoint))
    settings = parse_run_config(cfg)
    fed = cached_federation(settings)
    ckpt = load_checkpoint(tiny_checkpoint)
    emb = embedder_for(settings, fed.dataset.image_shape)
    mech = public_mechanism(
        ckpt, fed, emb, epsilon=4.0, delta=1e-5, reference_clients=50, client_size=60
    )
    # Public: from D_aux only, so the same for every client and every call.
    again = public_mechanism(
        ckpt, fed, emb, epsilon=4.0, delta=1e-5, reference_clients=50, client_size=60
    )
    np.testing.assert_array_equal(mech.basis, again.basis)
    assert mech.clip == again.clip and mech.clip > 0
    assert mech.basis.shape == (emb.output_dim, settings.embedding.num_components - 1)

    node = {"partition-id": 2, "num-partitions": 6, NOISE_SEED_KEY: 11}
    ctx = Context(run_id=1, node_id=5, node_config=node, state=RecordDict(), run_config=cfg)
    msg = Message(
        RecordDict({"config": ConfigRecord({"summary": "embedding"}), **mechanism_records(mech)}),
        dst_node_id=5,
        message_type="query.embed",
    )
    reply = handle_query(msg, ctx)
    sent = reply.content.array_records["summary"]["phi"].numpy()
    clean = client_summary(settings, 2, "embedding")
    np.testing.assert_array_equal(sent, mech.release(clean, noise_generator(node)))
    assert not np.allclose(sent, clean)
    assert reply.content.config_records["info"]["private"] is True


def test_a_node_asked_twice_in_a_run_sends_its_one_release_again(cache_dir, monkeypatch):
    """A second DP query (same run, mechanism and data) gets the same vector: no second epsilon."""
    from ripple_flwr.app.client.handlers import handle_query
    from ripple_flwr.app.client.node_release import RELEASE_STATE_KEY
    from ripple_flwr.app.client.work import embedder_for
    from ripple_flwr.data.cache import cached_federation

    cfg = tiny_run_config(cache_dir, method="ripple")
    settings = parse_run_config(cfg)
    dim = embedder_for(settings, cached_federation(settings).dataset.image_shape).output_dim
    calls = []
    real = PublicMechanism.release
    monkeypatch.setattr(
        PublicMechanism, "release", lambda self, e, rng: calls.append(1) or real(self, e, rng)
    )
    node = {"partition-id": 1, "num-partitions": 6}  # secret noise: nothing fixes its seed
    ctx = Context(run_id=1, node_id=5, node_config=node, state=RecordDict(), run_config=cfg)

    def ask(mech):
        query = {"config": ConfigRecord({"summary": "embedding"}), **mechanism_records(mech)}
        msg = Message(
            RecordDict(query),
            dst_node_id=5,
            message_type="query.embed",
        )
        reply = handle_query(msg, ctx)
        info = reply.content.config_records["info"]
        return reply.content.array_records["summary"]["phi"].numpy(), info["release-reused"]

    first, reused_first = ask(mechanism(p=dim, r=3))
    again, reused_again = ask(mechanism(p=dim, r=3))
    assert (reused_first, reused_again) == (False, True) and len(calls) == 1
    np.testing.assert_array_equal(again, first)
    # Another mechanism (another budget) is another release, and the node's state counts it.
    other, reused_other = ask(mechanism(p=dim, r=3, epsilon=2.0))
    assert not reused_other and len(calls) == 2 and not np.allclose(other, first)
    assert ctx.state.config_records[RELEASE_STATE_KEY]["releases"] == 2


@pytest.mark.slow
def test_a_private_run_routes_the_noisy_embeddings(tiny_checkpoint, cache_dir, tmp_path):
    from ripple_flwr.app.server.run import run_server
    from ripple_flwr.testing.inprocess import InProcessGrid

    results = {}
    for eps in (0.0, 1.0):
        cfg = tiny_run_config(
            cache_dir,
            method="ripple",
            checkpoint=str(tiny_checkpoint),
            **{
                "embedding-dp-epsilon": eps,
                "num-server-rounds": 1,
                "results-path": str(tmp_path / f"dp{eps:g}.json"),
            },
        )
        nodes = [
            {"partition-id": i, "num-partitions": 6, NOISE_SEED_KEY: 100 + i} for i in range(6)
        ]
        grid = InProcessGrid(cfg, node_configs=nodes)
        results[eps] = json.loads(run_server(grid, cfg).read_text())
    dp = results[1.0]["embedding_dp"]
    assert results[0.0]["embedding_dp"] is None
    assert dp["epsilon"] == 1.0 and dp["sigma"] == pytest.approx(
        gaussian_sigma(1.0, 1e-5, 2 * dp["clip"])
    )
    w_clean = np.asarray(results[0.0]["routing"]["weights"])
    w_dp = np.asarray(results[1.0]["routing"]["weights"])
    assert w_dp.shape == w_clean.shape and not np.allclose(w_dp, w_clean)
    np.testing.assert_allclose(w_dp.sum(axis=1), 1.0, atol=1e-6)
