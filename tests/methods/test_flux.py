"""FLUX: the descriptor by hand, its clustering, new clients' rule, traffic, hostile replies."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import FakeGrid, tiny_run_config
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from sklearn.decomposition import PCA

from ripple_flwr.aggregation.descriptors import (
    BlockScaler,
    Layout,
    assemble,
    client_statistics,
    clip_statistics,
    cluster_descriptors,
    knee_index,
    model_dims,
    projection,
)
from ripple_flwr.app.server.resume.file import load_server_state
from ripple_flwr.app.server.run import run_server
from ripple_flwr.methods.flux.descriptors import DESCRIBE_TYPE, read_descriptor_reply
from ripple_flwr.runs.results import message_nbytes
from ripple_flwr.training.latent import latent_features
from ripple_flwr.training.models import build_model, get_state


# -- the descriptor ---------------------------------------------------------------------------
def official_descriptor(z, y, m, k, num_classes):
    """``extract_descriptors`` of the official code (Px_label_long, extended), written out."""
    rs = np.random.RandomState(1)  # np.random.seed(seed=1); np.random.uniform(0, m, ...)
    pca = PCA(n_components=k, svd_solver="full").fit(rs.uniform(0, m, (200, z.shape[1])))
    p = pca.transform(z)
    means, stds = [], []
    for c in range(num_classes):
        rows = z[y == c]
        if rows.shape[0] > 1:
            q = pca.transform(rows)
            means.append(list(q.mean(axis=0)))
            stds.append(list(q.std(axis=0)))
        else:
            means.append([-1] * k)
            stds.append([-1] * k)
    return np.array(list(p.mean(axis=0)) + list(p.std(axis=0)) + sum(means, []) + sum(stds, []))


def test_descriptor_of_a_tiny_client_equals_the_official_formula_by_hand():
    # Five examples, six latent features, three classes (class 2 has one example: -1s).
    z = np.array(
        [
            [0.0, 1.0, 2.0, 0.5, 0.0, 1.5],
            [1.0, 0.0, 0.5, 2.0, 1.0, 0.0],
            [2.0, 2.0, 0.0, 1.0, 0.5, 0.5],
            [0.5, 1.5, 1.0, 0.0, 2.0, 1.0],
            [1.5, 0.5, 1.5, 1.5, 1.5, 2.0],
        ]
    )
    y = np.array([0, 0, 1, 1, 2])
    k, m = 2, 1.02 * 2.0
    layout = Layout(k, 3, labelled=True)
    flat = client_statistics(z, y, 3, k)
    assert flat.shape == (layout.size,) and flat[2 * k] == 2.0  # the largest activation
    np.testing.assert_array_equal(layout.split(flat)["present"], [1, 1, 0])
    offset = m * projection(6, k)[1]
    mine = assemble(flat, layout, offset)
    want = official_descriptor(z, y, m, k, 3)
    assert mine.shape == (layout.descriptor_size,) == (2 * k * 4,)
    np.testing.assert_allclose(mine, want, atol=1e-12)
    # The label-free part an unseen client sends is the first 2k values, read without labels.
    free = Layout(k, 3, labelled=False)
    np.testing.assert_allclose(assemble(client_statistics(z, None, 3, k), free, offset), want[:4])


def test_the_projection_is_scikit_learns_full_pca_of_the_seeded_points():
    v, c = projection(40, 5)
    pca = PCA(n_components=5, svd_solver="full").fit(
        np.random.RandomState(1).uniform(0, 1, (200, 40))
    )
    np.testing.assert_allclose(v, pca.components_, atol=1e-12)
    np.testing.assert_allclose(c, pca.components_ @ pca.mean_, atol=1e-12)


def test_latent_features_are_the_first_linear_layers_input():
    torch.manual_seed(0)
    model = build_model("cnn", (1, 28, 28), 10)
    x = np.random.default_rng(0).random((5, 1, 28, 28), dtype=np.float32)
    z = latent_features(model, x, batch_size=2)
    model.eval()
    with torch.no_grad():
        want = model.features(torch.as_tensor(x)).numpy()
    assert z.shape == (5, 4608) and model_dims(get_state(model)) == (4608, 10)
    np.testing.assert_allclose(z, want, rtol=1e-5, atol=1e-6)


# -- the clustering ---------------------------------------------------------------------------
def line(n: int, start: float, step: float, y: float) -> np.ndarray:
    """``n`` points spaced ``step`` apart on a horizontal line (exact in floats)."""
    return np.c_[start + step * np.arange(n), np.full(n, y)]


def test_two_well_separated_groups_are_two_clusters_and_one_group_stays_whole():
    a, b = line(5, 0.0, 1.0, 0.0), line(5, 100.0, 3.0, 0.0)
    found = cluster_descriptors(np.vstack([a, b]))
    assert found.labels.tolist() == [0] * 5 + [1] * 5 and found.outliers == 0
    np.testing.assert_allclose(found.centroids, [a.mean(axis=0), b.mean(axis=0)])
    one = cluster_descriptors(line(6, 0.0, 1.0, 0.0))
    assert one.labels.tolist() == [0] * 6
    # The official rule has no outliers: a far descriptor is its own cluster (the knee eps).
    far = cluster_descriptors(np.vstack([a, line(6, 100.0, 1.0, 50.0), [[500.0, 500.0]]]))
    assert far.labels.tolist() == [0] * 5 + [1] * 6 + [2] and far.outliers == 1


def test_the_knee_rule_makes_singletons_of_a_jittered_groups_far_members():
    """A property of the official rule (docs/baselines.md#flux), not a choice of this port."""
    group = np.random.default_rng(0).normal(0.0, 0.05, (8, 6))
    found = cluster_descriptors(group)
    assert found.outliers >= 1 and len(found.centroids) > 1


def test_knee_of_a_hockey_stick_and_none_on_a_line():
    assert knee_index([1, 1, 1, 1, 1, 1, 1, 1, 10, 20]) == 7
    assert knee_index([1, 2, 3, 4, 5]) is None
    assert knee_index([2, 2, 2]) is None


def test_block_scaler_is_min_max_over_each_flattened_block():
    x = np.array([[0.0, 2.0, 10.0, 10.0], [4.0, 1.0, 10.0, 10.0]])
    scaler = BlockScaler.fit(x, 2)
    np.testing.assert_allclose(scaler.transform(x), [[0, 0.5, 0, 0], [1, 0.25, 0, 0]])
    np.testing.assert_allclose(scaler.transform(x[:, :2]), [[0, 0.5], [1, 0.25]])


def test_statistics_are_held_to_the_bound_but_flags_are_not():
    layout = Layout(1, 2, labelled=True)  # mean, std, max, 2 class means, 2 class stds, 2 flags
    stats = np.array([[50.0, 3.0, 9.0, -70.0, 1.0, 2.0, 60.0, 1.0, 1.0]])
    held, changed = clip_statistics(stats, layout, 10.0)
    assert held.tolist() == [[10.0, 3.0, 9.0, -10.0, 1.0, 2.0, 10.0, 1.0, 1.0]]
    assert changed.tolist() == [True]


# -- hostile replies ---------------------------------------------------------------------------
def reply_with(phi) -> Message:
    ask = Message(
        RecordDict({"config": ConfigRecord({})}), dst_node_id=1, message_type=DESCRIBE_TYPE
    )
    content = RecordDict({"summary": ArrayRecord({"phi": Array(np.asarray(phi))})})
    return Message(content, reply_to=ask)


GOOD = [0.5, 0.2, 1.0, 0.5, 0.1, 0.0, 0.0, 1.0, 0.0]  # k=1, C=2 (class 1 absent)


@pytest.mark.parametrize(
    ("phi", "reason"),
    [
        (GOOD[:-1], "declared"),
        ([*GOOD[:-1], np.nan], "NaN"),
        ([0.5, -0.2, *GOOD[2:]], "negative"),
        ([*GOOD[:-1], 0.5], "0 or 1"),
        ([50.0, *GOOD[1:]], "exceed"),
        ([0.5, 0.2, -1.0, *GOOD[3:]], "max-latent"),
        (np.array(GOOD, dtype=np.int64), "dtype"),
    ],
)
def test_a_hostile_descriptor_is_refused_with_its_reason(phi, reason):
    layout = Layout(1, 2, labelled=True)
    assert read_descriptor_reply(reply_with(np.array(GOOD, np.float32)), layout, 4).shape == (9,)
    with pytest.raises(ValueError, match=reason):
        read_descriptor_reply(reply_with(phi), layout, 4)


# -- a whole run --------------------------------------------------------------------------------
def nan_descriptor(msg: Message, reply: Message | None) -> Message | None:
    """Partition 5 answers its descriptor question with NaNs (its other replies are honest)."""
    if reply is None or msg.metadata.message_type != DESCRIBE_TYPE or reply.has_error():
        return reply
    phi = reply.content.array_records["summary"]["phi"].numpy().copy()
    phi[0] = np.nan
    return Message(RecordDict({"summary": ArrayRecord({"phi": Array(phi)})}), reply_to=msg)


@pytest.fixture(scope="module")
def flux_run(cache_dir, tmp_path_factory):
    """2 rounds; the clients are described and clustered at the start of round 2."""
    out = tmp_path_factory.mktemp("flux")
    cfg = tiny_run_config(
        cache_dir,
        method="flux",
        **{
            "num-server-rounds": 2,
            "flux-start-round": 1,
            "flux-latest-fraction": 0.0,
            "eval-every": 2,
            "new-clients": 2,
            "checkpoint-every": 1,
            "results-path": str(out / "flux.json"),
        },
    )
    grid = FakeGrid(cfg, faults={5: nan_descriptor})
    path = run_server(grid, cfg)
    state = load_server_state(path.with_suffix(".resume.npz"))
    return grid, json.loads(path.read_text()), state["fields"]


def describe_traffic(grid, node_ids):
    sent = [m for m in grid.sent_of_type(DESCRIBE_TYPE) if m.metadata.dst_node_id in node_ids]
    ids = {m.metadata.message_id for m in sent}
    back = [r for r in grid.replies if r.metadata.reply_to_message_id in ids]
    return sent, back


def test_descriptor_bytes_are_counted_in_the_round_they_precede(flux_run):
    grid, res, _ = flux_run
    train_nodes = {int(n) for n in res["clients"]["node_ids"]}
    sent, back = describe_traffic(grid, train_nodes)
    first = res["flux"]["descriptor_rounds"][0]
    assert res["flux"]["clustered_at"] == 2 and first["who"] == "training clients"
    assert len(sent) == 6 and first["bytes_down"] == sum(message_nbytes(m) for m in sent)
    assert first["bytes_up"] == sum(message_nbytes(r) for r in back)
    layout = Layout(10, 10, labelled=True)  # k = C = 10: 10 + 10 + 1 + 100 + 100 + 10 floats
    assert res["flux"]["descriptor_bytes_per_client"] == 4 * layout.size == 924
    train = [m for m in grid.sent_of_type("train") if m.content["config"]["server-round"] == 2]
    train_ids = {m.metadata.message_id for m in train}
    train_back = [r for r in grid.replies if r.metadata.reply_to_message_id in train_ids]
    rnd = res["bytes_per_round"]["2"]
    assert rnd["down"] == sum(message_nbytes(m) for m in train) + first["bytes_down"]
    assert rnd["up"] == sum(message_nbytes(r) for r in train_back) + first["bytes_up"]


def test_a_hostile_descriptor_leaves_the_run_going_and_its_client_in_the_largest_cluster(
    flux_run,
):
    _, res, fields = flux_run
    first = res["flux"]["descriptor_rounds"][0]
    assert list(first["rejected"]) == ["5"] and "NaN" in first["rejected"]["5"]
    labels = np.asarray(res["assignment"]["labels"])
    assert labels[5] == np.bincount(labels[:5]).argmax()  # the largest of the described
    assert np.isfinite(fields["centroids"]).all() and len(fields["centroids"]) == max(labels) + 1


def test_a_new_client_gets_the_nearest_centroids_model_from_its_label_free_descriptor(flux_run):
    grid, res, fields = flux_run
    new_nodes = {int(m.metadata.dst_node_id) for m in grid.sent} - {
        int(n) for n in res["clients"]["node_ids"]
    }
    sent, back = describe_traffic(grid, new_nodes)
    assert len(sent) == 2 and all(not m.content["config"]["labelled"] for m in sent)
    by_node = {int(m.metadata.dst_node_id): m.metadata.message_id for m in sent}
    reply_of = {r.metadata.reply_to_message_id: r for r in back}
    order = sorted(new_nodes)  # new clients' rows follow their partition ids, as node ids do
    free = Layout(10, 10, labelled=False)
    want = []
    for nid in order:
        stats = reply_of[by_node[nid]].content["summary"]["phi"].numpy().astype(np.float64)
        assert stats.shape == (free.size,)
        stats = clip_statistics(stats[None], free, fields["stat_bound"])[0][0]
        desc = assemble(stats, free, fields["offset"])
        scaled = (desc.reshape(2, 10) - fields["scale_low"][:2, None]) / (
            fields["scale_high"][:2] - fields["scale_low"][:2]
        )[:, None]
        dist = [np.linalg.norm(scaled.ravel() - c[:20]) for c in fields["centroids"]]
        want.append(int(np.argmin(dist)))
    got = res["zero_shot"]["flux"]["labels"]
    assert got == want
    # ... and is scored with that cluster's model, the one trained in the run.
    evals = [
        m
        for m in grid.sent_of_type("evaluate")
        if int(m.metadata.dst_node_id) in new_nodes and "candidate-1" not in m.content
    ]
    for m in evals:
        label = got[order.index(int(m.metadata.dst_node_id))]
        model = fields["models"][label]
        for key, value in m.content["arrays"].items():
            np.testing.assert_array_equal(value.numpy(), model[key])
    assert len(evals) == 2 and res["zero_shot"]["supported"] and res["num_models"] > 1
    assert res["zero_shot"]["best_by_loss"]["models"] == res["num_models"]  # the reference


def test_a_late_joiner_after_the_clustering_is_assigned_by_its_label_free_descriptor(
    cache_dir, tmp_path
):
    cfg = tiny_run_config(
        cache_dir,
        method="flux",
        **{
            "num-server-rounds": 3,
            "flux-start-round": 1,
            "flux-latest-fraction": 0.0,
            "eval-every": 3,
            "new-clients": 1,
            "results-path": str(tmp_path / "late.json"),
        },
    )
    grid = FakeGrid(cfg, join_after={5: 2})  # partition 5 connects after round 2's training
    res = json.loads(run_server(grid, cfg).read_text())
    first, late = res["flux"]["descriptor_rounds"][:2]
    assert (first["round"], first["answered"]) == (2, 5)
    assert (late["round"], late["who"], late["answered"]) == (3, "late joiners", 1)
    assert res["assignment"]["labels"][5] == late["labels"][0]
    sent, _ = describe_traffic(grid, {int(res["clients"]["node_ids"][5])})
    assert len(sent) == 1 and not sent[0].content["config"]["labelled"]
    train = [m for m in grid.sent_of_type("train") if m.content["config"]["server-round"] == 3]
    assert res["bytes_per_round"]["3"]["down"] == late["bytes_down"] + sum(
        message_nbytes(m) for m in train
    )


def test_onboard_py_assigns_a_new_client_as_the_run_did(flux_run):
    """A saved FLUX run (router ``descriptor``) onboards outside Flower by the same rule."""
    from ripple_flwr.app.client.data import benchmark_data
    from ripple_flwr.app.run_config import parse_run_config
    from ripple_flwr.runs.onboarding import Onboarder

    grid, res, fields = flux_run
    settings = parse_run_config(next(iter(grid.contexts.values())).run_config)
    onboarder = Onboarder.from_path(res["saved_run"])
    assert onboarder.summary_kind == "descriptor" and onboarder.run.num_models == res["num_models"]
    pids = res["zero_shot"]["partition_ids"]
    got = onboarder.onboard_many([benchmark_data(settings, p).x_train for p in pids])
    chosen = [int(np.argmax(o.model_weights)) for o in got]
    assert chosen == res["zero_shot"]["flux"]["labels"]
    for o, c in zip(got, chosen, strict=True):
        for key, value in o.state.items():
            np.testing.assert_array_equal(value, fields["models"][c][key])
