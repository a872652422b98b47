"""ClientApp handlers called directly (no Flower runtime), and the on-disk federation cache."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import tiny_run_config
from flwr.app import ConfigRecord, Context, Message, RecordDict

from ripple_flwr.app.client.handlers import handle_evaluate, handle_query, handle_train
from ripple_flwr.app.client.work import check_partition, evaluate_client
from ripple_flwr.app.protocol.messages import (
    ProtocolError,
    TrainRequest,
    decode_query,
    evaluate_config,
    query_config,
    train_config,
    with_round,
)
from ripple_flwr.app.protocol.records import record_to_state, state_to_record
from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.data import cache as federation_cache
from ripple_flwr.settings import RunSettings
from ripple_flwr.training.models import build_model, get_state
from ripple_flwr.wst.embedder import PrototypeSettings, SpectralEmbedder


def _context(cfg, pid=1, n=None):
    n = cfg["num-partitions"] if n is None else n
    return Context(
        run_id=1,
        node_id=7,
        node_config={"partition-id": pid, "num-partitions": n},
        state=RecordDict(),
        run_config=cfg,
    )


def _msg(content, kind):
    return Message(RecordDict(content), dst_node_id=7, message_type=kind)


def test_query_sends_the_wst_embedding_once(cache_dir):
    cfg = tiny_run_config(cache_dir, method="ripple")
    reply = handle_query(
        _msg({"config": ConfigRecord({"summary": "embedding"})}, "query.embed"), _context(cfg)
    )
    phi = reply.content.array_records["summary"]["phi"].numpy()
    info = reply.content.config_records["info"]
    assert info["partition-id"] == 1 and info["num-partitions"] == 6
    fed = federation_cache.cached_federation(parse_run_config(cfg))
    expected = SpectralEmbedder((1, 28, 28), J=3, L=8, prototype=PrototypeSettings(20)).embed(
        fed.client_images(1)
    )
    np.testing.assert_allclose(phi, expected, rtol=1e-5, atol=1e-6)
    assert phi.dtype == np.float32 and phi.shape == (1953,)


def test_query_mean_and_none(cache_dir):
    cfg = tiny_run_config(cache_dir, method="ripple", router="mean-unmixing")
    reply = handle_query(
        _msg({"config": ConfigRecord({"summary": "mean"})}, "query.embed"), _context(cfg, pid=2)
    )
    mean = reply.content.array_records["summary"]["phi"].numpy()
    fed = federation_cache.cached_federation(parse_run_config(cfg))
    np.testing.assert_allclose(mean, fed.client_images(2).reshape(60, -1).mean(0), rtol=1e-6)
    reply = handle_query(
        _msg({"config": ConfigRecord({"summary": "none"})}, "query.embed"), _context(cfg)
    )
    assert "summary" not in reply.content.array_records


def test_partition_checks():
    s = RunSettings.of(num_partitions=6, clients_per_round=3)
    assert check_partition(s, {"partition-id": 5, "num-partitions": 6}) == 5
    with pytest.raises(ValueError, match="lacks 'partition-id'"):
        check_partition(s, {})
    with pytest.raises(ValueError, match="num-supernodes must equal that sum"):
        check_partition(s, {"partition-id": 0, "num-partitions": 2})
    with pytest.raises(ValueError, match="out of range"):
        check_partition(s, {"partition-id": 6, "num-partitions": 6})
    # Held-out new clients take the ids after the training ones.
    s = RunSettings.of(num_partitions=6, new_clients=2, clients_per_round=3)
    assert check_partition(s, {"partition-id": 7, "num-partitions": 8}) == 7
    with pytest.raises(ValueError, match=r"num-partitions=6 \+ new-clients=2"):
        check_partition(s, {"partition-id": 0, "num-partitions": 6})


def test_train_and_evaluate_handlers(cache_dir):
    cfg = tiny_run_config(cache_dir)
    state = get_state(build_model("cnn", (1, 28, 28), 10))
    config = ConfigRecord(
        {"server-round": 1, "lr": 0.05, "momentum": 0.9, "local-epochs": 2, "batch-size": 16}
    )
    content = {"arrays": state_to_record(state), "config": config}
    reply = handle_train(_msg(content, "train"), _context(cfg, pid=0))
    new = record_to_state(reply.content.array_records["arrays"])
    metrics = reply.content.metric_records["metrics"]
    assert list(new) == list(state)
    assert any(not np.array_equal(new[k], state[k]) for k in state)
    assert metrics["num-examples"] == 48 and np.isfinite(metrics["train_loss"])
    # Same round, same client, same model: the same result (seeded shuffles and dropout).
    again = handle_train(_msg(content, "train"), _context(cfg, pid=0))
    np.testing.assert_array_equal(
        record_to_state(again.content.array_records["arrays"])["classifier.2.bias"],
        new["classifier.2.bias"],
    )
    reply = handle_evaluate(
        _msg({"arrays": state_to_record(new), "config": evaluate_config(1)}, "evaluate"),
        _context(cfg, pid=0),
    )
    m = reply.content.metric_records["metrics"]
    assert m["num-examples"] == 12 and m["partition-id"] == 0
    # A share of the client's 12 test images, and the same as scoring the model directly.
    assert m["accuracy"] * 12 == pytest.approx(round(m["accuracy"] * 12))
    direct = evaluate_client(parse_run_config(cfg), 0, new)
    assert (m["accuracy"], m["loss"]) == (direct["accuracy"], direct["loss"])


@pytest.mark.parametrize("key", ["server-round", "lr", "momentum", "local-epochs", "batch-size"])
def test_a_training_message_without_a_key_is_refused_naming_it(key):
    """The client never falls back to its own settings: a missing key is an error that names it."""
    full = train_config(0.05, 0.9, 1, 16)
    content = RecordDict({"config": ConfigRecord({k: v for k, v in with_round(full, 3).items()})})
    assert TrainRequest.decode(content).server_round == 3
    del content["config"][key]
    with pytest.raises(ProtocolError, match=f"the train message's config lacks '{key}'"):
        TrainRequest.decode(content)
    with pytest.raises(ProtocolError, match="the train message lacks its 'config' record"):
        TrainRequest.decode(RecordDict({}))


def test_a_query_without_its_summary_kind_is_answered_with_the_reason(cache_dir):
    """A query that does not say which summary it wants is refused by the handler, not guessed."""
    cfg = tiny_run_config(cache_dir)
    with pytest.raises(ProtocolError, match="the query.embed message's config lacks 'summary'"):
        handle_query(_msg({"config": ConfigRecord({})}, "query.embed"), _context(cfg))
    with pytest.raises(ProtocolError, match="asks for summary 'phi'"):
        decode_query(RecordDict({"config": query_config("phi")}))


def test_federation_cache_on_disk(tmp_path):
    cfg = tiny_run_config(tmp_path)
    settings = parse_run_config(cfg)
    federation_cache.PROCESS_DATA.clear()  # built in another cache folder earlier
    built = federation_cache.cached_federation(settings)
    files = list((tmp_path / "federations").glob("federation-*.npz"))
    assert len(files) == 1
    federation_cache.PROCESS_DATA.clear()  # a fresh process (as in deployment)
    loaded = federation_cache.cached_federation(settings)
    assert loaded is not built
    for a, b in zip(
        built.train_indices + built.test_indices,
        loaded.train_indices + loaded.test_indices,
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(built.mixtures, loaded.mixtures)
    # A corrupt cache file is rebuilt, not trusted.
    files[0].write_bytes(b"not an npz")
    federation_cache.PROCESS_DATA.clear()
    rebuilt = federation_cache.cached_federation(settings)
    np.testing.assert_array_equal(rebuilt.aux_indices, built.aux_indices)


def test_the_client_runtime_holds_the_process_caches_and_forgets_them(cache_dir):
    """The parsed config and the embedder are built once and kept in one object, RUNTIME."""
    from ripple_flwr.app.client.runtime import RUNTIME

    cfg = tiny_run_config(cache_dir)
    RUNTIME.clear()
    query = _msg({"config": query_config("embedding")}, "query.embed")
    handle_query(query, _context(cfg))
    settings, embedder = RUNTIME.settings.value, RUNTIME.embedder.value
    assert settings is not None and embedder is not None
    handle_query(query, _context(cfg, pid=2))
    assert RUNTIME.settings.value is settings and RUNTIME.embedder.value is embedder
    RUNTIME.clear()
    assert RUNTIME.settings.value is None and RUNTIME.embedder.value is None
    assert RUNTIME.threads is None and not RUNTIME.node_settings
