"""Every field of every reply a client sends, mutated: the run finishes, names the client, and
no claim buys a client more than a bounded share (issue 21, findings 1, 2 and 10)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import FakeGrid, tiny_run_config

from ripple_flwr.app.server.replies.fields import (
    MAX_CLIENT_EXAMPLES,
    SIZE_CAP_FACTOR,
    as_count,
    as_number,
    size_cap,
)
from ripple_flwr.app.server.roster.query import QueryResult
from ripple_flwr.app.server.run import run_server
from ripple_flwr.settings import ConfigError
from ripple_flwr.testing.faults import FAULTS, MISSING, combine, set_field

HOSTILE = 1
# (message kind, record, key) of every scalar field the server reads from a reply.
FIELDS = [
    ("query", "info", "partition-id"),
    ("query", "info", "num-partitions"),
    ("query", "info", "num-examples"),
    ("query", "info", "num-test-examples"),
    ("query", "info", "seconds"),
    ("query", "info", "data"),
    ("train", "metrics", "num-examples"),
    ("train", "metrics", "train_loss"),
    ("train", "metrics", "bogus"),
    ("evaluate", "metrics", "accuracy"),
    ("evaluate", "metrics", "loss"),
    ("evaluate", "metrics", "num-examples"),
    ("evaluate", "metrics", "bogus"),
]
VALUES = {
    "missing": MISSING,
    "inf": math.inf,
    "nan": math.nan,
    "negative": -1,
    "huge": 10**15,
    "list": [1, 2],
    "text": "x",  # config records only (a metric record cannot carry it)
}
# Values a field may take without the reply being refused (a default stands in).
ACCEPTED = {
    ("query", "info", "num-partitions"): {"missing"},
    ("query", "info", "seconds"): {"missing"},
    ("query", "info", "data"): {"missing"},
    ("query", "info", "num-test-examples"): {"missing"},
    ("query", "info", "num-examples"): {"missing"},
    # Counts the server replaces by the query round's sizes: any positive integer passes.
    ("train", "metrics", "num-examples"): {"huge"},
    ("evaluate", "metrics", "num-examples"): {"huge"},
    # A loss is any finite number within [-1e6, 1e6] (the server does not assume its kind).
    ("train", "metrics", "train_loss"): {"negative"},
    ("evaluate", "metrics", "loss"): {"negative"},
    # A key the server does not read is dropped from the reply, whatever its value.
    ("train", "metrics", "bogus"): set(VALUES),
    ("evaluate", "metrics", "bogus"): set(VALUES),
}


def config(cache_dir, tmp_path, **over):
    return tiny_run_config(
        cache_dir,
        **{
            "method": "fedavg",
            "num-server-rounds": 1,
            "clients-per-round": 6,
            "results-path": str(tmp_path / "r.json"),
            "overwrite-results": True,
            **over,
        },
    )


def run(cfg, faults):
    return json.loads(run_server(FakeGrid(cfg, faults=faults), cfg).read_text())


def named(results, kind) -> bool:
    """Whether the hostile client is recorded as left out / dropped / not scored."""
    if kind == "query":
        return (
            len(results["clients"]["left_out"]) == 1
            and HOSTILE not in (results["clients"]["partition_ids"])
        )
    if kind == "train":
        return any(d["partition"] == HOSTILE for r in results["rounds"] for d in r["dropped"])
    return any(f["partition"] == HOSTILE for e in results["evaluations"] for f in e["failed"])


CASES = [
    (field, name)
    for field in FIELDS
    for name in VALUES
    if not (name == "text" and field[1] == "metrics")
]


@pytest.mark.parametrize(("field", "value"), CASES, ids=[f"{f[0]}-{f[2]}-{v}" for f, v in CASES])
def test_a_mutated_reply_field_never_crashes_the_run(field, value, cache_dir, tmp_path):
    kind, record, key = field
    r = run(config(cache_dir, tmp_path), {HOSTILE: set_field(kind, record, key, VALUES[value])})
    assert math.isfinite(r["final_accuracy"])
    assert r["final_accuracy_coverage"] > 0
    if value not in ACCEPTED.get(field, set()):
        assert named(r, kind), (field, value, r["clients"], r["rounds"], r["evaluations"])


def test_claimed_sizes_buy_no_weight_and_no_headline(cache_dir, tmp_path):
    clean = run(config(cache_dir, tmp_path, **{"num-server-rounds": 3}), {})
    # Sizes within the absolute bound but far above the others. A benchmark partition's
    # sizes are the server's own (it rebuilds the federation): the claim is replaced.
    big = combine(
        set_field("query", "info", "num-examples", MAX_CLIENT_EXAMPLES),
        set_field("query", "info", "num-test-examples", MAX_CLIENT_EXAMPLES),
        FAULTS["inflated-count"](),
    )
    hostile = run(config(cache_dir, tmp_path, **{"num-server-rounds": 3}), {HOSTILE: big})
    claimed = [MAX_CLIENT_EXAMPLES, MAX_CLIENT_EXAMPLES]
    assert hostile["clients"]["sizes_corrected"] == {str(HOSTILE): claimed}
    assert hostile["clients"]["sizes_capped"] == {}
    assert [r["num_examples"] for r in hostile["rounds"]] == [6 * 48] * 3  # 60 images, 48 train
    assert hostile["final_accuracy"] == clean["final_accuracy"]  # nothing changed at all
    # The headline weighs every client once: a fake perfect score moves it by at most 1/6.
    faked = run(
        config(cache_dir, tmp_path, **{"num-server-rounds": 3}),
        {HOSTILE: combine(big, FAULTS["fake-evaluation"]())},
    )
    assert faked["final_accuracy_weighting"] == "clients"
    assert faked["final_accuracy"] <= clean["final_accuracy"] + 1 / 6 + 1e-9
    assert faked["final_accuracy"] < 1.0


def test_sizes_nobody_can_check_are_held_to_four_medians():
    # Nodes with their own data: the server cannot know their sizes; each is capped.
    result = QueryResult([1, 2, 3, 4], [0, 1, 2, 3], [10, 12, 11, MAX_CLIENT_EXAMPLES], None)
    result.num_test = [3, 3, 3, MAX_CLIENT_EXAMPLES]
    cap = size_cap(result.num_examples)
    assert cap == int(SIZE_CAP_FACTOR * 11)  # the low median of the four
    assert size_cap([10, MAX_CLIENT_EXAMPLES]) == int(SIZE_CAP_FACTOR * 10)  # one of two
    assert result.cap_sizes(cap) == [3]
    assert result.num_examples == [10, 12, 11, cap] and result.num_test == [3, 3, 3, cap]


def test_two_nodes_claiming_one_partition_are_both_refused_and_named(cache_dir, tmp_path):
    # Node 1 impersonates partition 0: neither claimant is trusted with partition 0.
    r = run(config(cache_dir, tmp_path), {HOSTILE: set_field("query", "info", "partition-id", 0)})
    assert r["clients"]["partition_ids"] == [2, 3, 4, 5]
    reasons = list(r["clients"]["left_out"].values())
    assert len(reasons) == 2 and all("claimed by several nodes" in x for x in reasons)


def test_a_server_side_partition_map_refuses_the_impostor_and_keeps_the_honest_node(
    cache_dir, tmp_path, monkeypatch
):
    from ripple_flwr.testing.inprocess import NODE_ID_BASE

    # Node i holds partition i (the in-process grid's ids); the file binds each id to it.
    binding = {str(NODE_ID_BASE + 2 * i): i for i in range(6)}
    path = tmp_path / "partitions.json"
    path.write_text(json.dumps(binding))
    monkeypatch.setenv("RIPPLE_PARTITION_MAP", str(path))
    r = run(config(cache_dir, tmp_path), {HOSTILE: set_field("query", "info", "partition-id", 0)})
    assert r["clients"]["partition_ids"] == [0, 2, 3, 4, 5]  # the honest holder of 0 trains
    (reason,) = r["clients"]["left_out"].values()
    assert "claims partition 0, but the server's partition map binds it to partition 1" in reason
    # A node the file does not list is refused; a broken file stops the run in one line.
    del binding[str(NODE_ID_BASE + 2 * 5)]
    path.write_text(json.dumps(binding))
    r = run(config(cache_dir, tmp_path), {})
    assert "not in the server's partition map" in next(iter(r["clients"]["left_out"].values()))
    for bad in ('{"1": 0, "2": 0}', '{"x": 0}', '{"1": 99}', "[]", "{"):
        path.write_text(bad)
        with pytest.raises(ConfigError, match="RIPPLE_PARTITION_MAP") as err:
            run(config(cache_dir, tmp_path), {})
        assert "\n" not in str(err.value)


def test_an_embedding_whose_header_promises_terabytes_is_refused_before_decoding():
    from flwr.app import Array, ArrayRecord, RecordDict

    from ripple_flwr.app.server.roster.query import validate_summary

    honest = Array(np.zeros(1953, dtype=np.float32))
    lying = Array(dtype=honest.dtype, shape=(2**40,), stype=honest.stype, data=honest.data)
    reply = RecordDict({"summary": ArrayRecord({"phi": lying})})
    with pytest.raises(ValueError, match="declared"):
        validate_summary(reply, "embedding", 1953)
    ok = RecordDict({"summary": ArrayRecord({"phi": honest})})
    assert validate_summary(ok, "embedding", 1953).shape == (1953,)


def test_converters_name_the_field():
    for raw in (True, "3", [3], math.inf, 2.5, 0, MAX_CLIENT_EXAMPLES + 1):
        with pytest.raises(ValueError, match="num-examples"):
            as_count(raw, "num-examples")
    assert as_count(3.0, "n") == 3 and as_count(np.int64(5), "n") == 5
    assert math.isnan(as_number(math.nan, "loss", missing_ok=True))
    with pytest.raises(ValueError, match="loss"):
        as_number(math.inf, "loss", missing_ok=True)
