"""Ripple's class-conditional summary: per-label blocks, the concepts found from them, the
unmixing, and what a hostile or unlabelled client can and cannot do (issue 60)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from ripple_flwr.aggregation.concepts import (
    block_size,
    find_concepts,
    label_block,
    read_blocks,
    unmix,
)
from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.methods.api import QueryResult
from ripple_flwr.methods.ripple.server import RippleMethod
from ripple_flwr.router.routers import MeanUnmixingRouter

CLASSES, SIDE, MIN = 4, 6, 5
D = SIDE * SIDE
# Three concepts: the identity and two permutations that move every class.
MAPS = np.array([[0, 1, 2, 3], [1, 2, 3, 0], [3, 0, 1, 2]])


def class_means(rng: np.random.Generator) -> np.ndarray:
    """(CLASSES, D) well-separated class mean images in [0.2, 0.8]."""
    return rng.uniform(0.2, 0.8, size=(CLASSES, D))


def client(rng, means, concept: int, classes=None, n: int = 12):
    """``n`` images of each class in ``classes``, labelled under ``concept``."""
    classes = range(CLASSES) if classes is None else classes
    x, y = [], []
    for c in classes:
        x.append(np.clip(means[c] + rng.normal(0, 0.05, size=(n, D)), 0, 1))
        y += [MAPS[concept][c]] * n
    return np.concatenate(x).reshape(-1, 1, SIDE, SIDE).astype(np.float32), np.array(y)


def federation(seed: int, per_concept: int = 8, concepts: int = 3):
    """Blocks of clients that each hold one concept over two or more classes, and the truth."""
    rng = np.random.default_rng(seed)
    means = class_means(rng)
    blocks, truth, images = [], [], []
    for g in range(concepts):
        for _ in range(per_concept):
            held = sorted(rng.choice(CLASSES, size=rng.integers(2, CLASSES + 1), replace=False))
            x, y = client(rng, means, g, held)
            blocks.append(label_block(x, y, CLASSES, MIN))
            truth.append(g)
            images.append(x)
    return np.stack(blocks), np.array(truth), images, means, rng


def test_the_concepts_of_a_permuted_federation_are_recovered_without_their_number():
    blocks, truth, _, means, rng = federation(0)
    stacks, reasons = read_blocks(blocks, CLASSES, D, MIN)
    assert reasons == [None] * len(blocks)
    found = find_concepts(stacks, None, 3, np.random.default_rng(0))
    assert found.num_concepts == 3
    w, why = unmix(stacks, found)
    assert why == [None] * len(blocks)
    assert adjusted_rand_score(truth, w.argmax(axis=1)) == pytest.approx(1.0)
    # A newcomer holding one label only is placed by it.
    x, y = client(rng, means, 2, [1], n=20)
    new, _ = read_blocks(label_block(x, y, CLASSES, MIN)[None], CLASSES, D, MIN)
    w_new, _ = unmix(new, found)
    assert w_new[0].argmax() == w[truth == 2][0].argmax() and w_new[0].max() > 0.99


def test_without_concept_shift_one_concept_is_found():
    blocks, _, _, _, _ = federation(1, concepts=1, per_concept=24)
    stacks, _ = read_blocks(blocks, CLASSES, D, MIN)
    assert find_concepts(stacks, None, 3, np.random.default_rng(0)).num_concepts == 1


def test_a_given_number_of_concepts_is_kept():
    blocks, truth, _, _, _ = federation(2)
    stacks, _ = read_blocks(blocks, CLASSES, D, MIN)
    found = find_concepts(stacks, 3, 3, np.random.default_rng(0))
    assert found.rule == "given" and found.num_concepts == 3
    assert adjusted_rand_score(truth, unmix(stacks, found)[0].argmax(1)) == pytest.approx(1.0)


def test_rare_labels_send_nothing_and_are_masked():
    rng = np.random.default_rng(3)
    x, y = client(rng, class_means(rng), 0, [0, 1], n=MIN)
    x, y = x[: 2 * MIN - 1], y[: 2 * MIN - 1]  # label 1 one image short
    block = label_block(x, y, CLASSES, MIN)
    counts, var = block[:CLASSES], block[CLASSES : 2 * CLASSES]
    means = block[2 * CLASSES :].reshape(CLASSES, D)
    assert counts.tolist() == [MIN, 0, 0, 0] and not var[1:].any() and not means[1:].any()
    assert len(block) == block_size(CLASSES, D)
    with pytest.raises(ValueError, match="labels outside"):
        label_block(x, np.full(len(x), CLASSES), CLASSES, MIN)  # a label outside the classes


def hostile_blocks(good: np.ndarray) -> dict[str, np.ndarray]:
    """Each bad kind of block the server must refuse, made from a good one."""
    c = CLASSES
    out = {}
    b = good.copy()
    b[2 * c] = np.nan
    out["NaN"] = b
    b = good.copy()
    b[2 * c : 2 * c + D] = 1e30
    out["outside the images' range"] = b
    b = good.copy()
    b[0] = 2.5
    out["not whole numbers"] = b
    b = good.copy()
    b[0] = -3
    out["not whole numbers >= 0"] = b
    b = good.copy()
    b[0] = MIN - 1
    out["fewer than"] = b
    b = good.copy()
    b[0] = 10_000
    out["the client reported"] = b
    b = np.zeros_like(good)
    out["keeps no label"] = b
    b = good.copy()
    kept = np.flatnonzero(b[:c] > 0)
    lacking = [k for k in range(c) if k not in kept]
    if lacking:
        b[2 * c + lacking[0] * D] = 0.5
        out["does not keep"] = b
    return out


def test_every_bad_block_is_refused_with_its_reason_and_takes_no_part():
    blocks, truth, _, _, _ = federation(4)
    sizes = np.full(len(blocks), 200.0)
    clean, _ = read_blocks(blocks, CLASSES, D, MIN, sizes)
    found = find_concepts(clean, None, 3, np.random.default_rng(0))
    for expected, bad in hostile_blocks(blocks[0]).items():
        stacks, reasons = read_blocks(np.vstack([blocks, bad]), CLASSES, D, MIN, [*sizes, 200])
        assert reasons[:-1] == [None] * len(blocks)
        assert reasons[-1] is not None and expected in reasons[-1], (expected, reasons[-1])
        assert not stacks.counts[-1].any()  # zeroed: in no template, no distance
        again = find_concepts(stacks, None, 3, np.random.default_rng(0))
        np.testing.assert_allclose(again.templates.means, found.templates.means)
        w, why = unmix(stacks, again)
        assert why[-1] is not None and np.allclose(w[-1], 1 / 3)


def ripple(settings_over: dict, n_features: int, truth=None):
    settings = parse_run_config(
        {
            "method": "ripple",
            "router": "mean-unmixing",
            "num-components": 2,
            "class-conditional": True,
            "min-label-count": MIN,
            "min-cluster-size": 3,
            **settings_over,
        }
    )
    router = MeanUnmixingRouter(np.stack([np.full(D, 0.3), np.full(D, 0.6)]))
    state = {"w": np.zeros(3, dtype=np.float32)}
    return RippleMethod(
        settings,
        state,
        router=router,
        image_shape=(1, SIDE, SIDE),
        num_classes=CLASSES,
        true_concepts=truth,
    )


def query(features: np.ndarray, sizes=None) -> QueryResult:
    n = len(features)
    return QueryResult(
        node_ids=list(range(n)),
        partition_ids=list(range(n)),
        num_examples=list(sizes if sizes is not None else [200] * n),
        features=features.astype(np.float32),
        rejected={},
        bytes_up=[0] * n,
        client_seconds=[0.0] * n,
        num_test=[0] * n,
        sources=["benchmark"] * n,
        names=[""] * n,
    )


def summaries(images, blocks):
    lf = np.stack([x.reshape(len(x), -1).mean(axis=0) for x in images])
    return np.hstack([lf, blocks])


def test_routing_never_reads_the_true_concepts():
    """The concept field scrambled: the same weights; only the ARI (a score) changes."""
    blocks, truth, images, _, _ = federation(5)
    feats = summaries(images, blocks)
    onehot = np.eye(3)[truth]
    a = ripple({}, feats.shape[1], truth=onehot)
    a.setup(query(feats))
    scrambled = np.eye(3)[np.random.default_rng(9).permutation(truth)]
    b = ripple({}, feats.shape[1], truth=scrambled)
    b.setup(query(feats))
    np.testing.assert_array_equal(a.raw_weights, b.raw_weights)
    assert a.num_models == b.num_models == 3 * 2
    assert a.concept.record["ari"] == pytest.approx(1.0) and b.concept.record["ari"] < 0.5


def test_a_client_that_copies_another_summary_gets_that_clients_weights_and_no_more():
    blocks, truth, images, _, _ = federation(6)
    feats = summaries(images, blocks)
    m = ripple({}, feats.shape[1])
    copied = np.vstack([feats, feats[3]])
    m.setup(query(copied))
    np.testing.assert_allclose(m.raw_weights[-1], m.raw_weights[3])
    # A hostile block (a huge mean) is placed 1/G over the concepts, label-free part kept.
    bad = feats[3].copy()
    bad[-D:] = 1e30
    m2 = ripple({}, feats.shape[1])
    m2.setup(query(np.vstack([feats, bad])))
    assert m2.out_of_domain and m2.out_of_domain[-1]["partition"] == len(feats)
    g = m2.concept.num_concepts
    np.testing.assert_allclose(m2.raw_weights[-1].reshape(g, -1).sum(axis=1), 1 / g)


def test_the_concept_step_survives_a_save_and_restore():
    blocks, _, images, _, _ = federation(7)
    feats = summaries(images, blocks)
    m = ripple({}, feats.shape[1])
    m.setup(query(feats))
    saved = m.state()
    fresh = ripple({}, feats.shape[1])
    fresh.restore(saved)
    assert fresh.num_models == m.num_models
    np.testing.assert_allclose(fresh.route(query(feats[:3])), m.route(query(feats[:3])))


@pytest.fixture(scope="module")
def concept_run(cache_dir, tmp_path_factory):
    """A class-conditional Ripple run (mean unmixing) on a small permuted federation."""
    from conftest import FakeGrid, tiny_run_config

    from ripple_flwr.app.server.run import run_server

    out = tmp_path_factory.mktemp("concept-run")
    cfg = tiny_run_config(
        cache_dir,
        method="ripple",
        router="mean-unmixing",
        dataset="permuted-mnist-5k",
        **{
            "label-kind": "domain",
            "num-partitions": 16,
            "partition-size": 150,
            "num-components": 4,
            "class-conditional": True,
            "min-label-count": 5,
            "new-clients": 2,
            "num-server-rounds": 1,
            "results-path": str(out / "run.json"),
        },
    )
    import json

    results = json.loads(run_server(FakeGrid(cfg), cfg).read_text())
    return cfg, results, out


def test_a_class_conditional_run_records_its_concepts_bytes_and_newcomers(concept_run):
    cfg, results, _ = concept_run
    rec = results["class_conditional"]
    g = rec["concepts"]
    assert g >= 2 and results["num_models"] == g * 4
    assert rec["summary_bytes"] == 4 * (28 * 28 + 10 * (2 + 28 * 28))
    assert rec["ari"] is not None and rec["ari_clients"] >= 2
    assert np.shape(rec["concept_weights"]) == (16, g)
    zs = results["zero_shot"]
    assert np.shape(zs["concept_weights"]) == (2, g) and "concept_ari" in zs
    # The bytes each client sends once are in the results like every summary's.
    assert results["embedding_bytes_per_client"] == rec["summary_bytes"]


def test_onboard_places_a_labelled_newcomer_as_the_run_did_and_warns_without_labels(
    concept_run, tmp_path, capsys
):
    import json

    from ripple_flwr.cli import onboard
    from ripple_flwr.data.cache import cached_federation
    from ripple_flwr.runs.onboarding import Onboarder

    cfg, results, _ = concept_run
    settings = parse_run_config(cfg)
    fed = cached_federation(settings)
    x, y, xt, _ = fed.client_data(16)  # the first new client
    onboarder = Onboarder.from_path(results["saved_run"])
    # The run placed its new client from the training split's labels and every image.
    got = onboarder.route_with_reasons(
        onboarder.summarise(np.concatenate([x, xt]))[None],
        [onboarder.label_summary(x, y)],
    )
    np.testing.assert_allclose(got[0][0], results["zero_shot"]["weights"][0], atol=1e-6)
    npz = tmp_path / "client.npz"
    np.savez(npz, images=x, labels=y)
    assert onboard.main([results["saved_run"], "--images", str(npz)]) == 0
    assert "fallback" not in json.loads(capsys.readouterr().out)
    bare = tmp_path / "bare.npy"
    np.save(bare, x)
    assert onboard.main([results["saved_run"], "--images", str(bare)]) == 0
    captured = capsys.readouterr()
    assert "no labels" in json.loads(captured.out)["fallback"]["reason"]
    assert "no labels" in captured.err and "--strict" in captured.err
    out = tmp_path / "strict.pt"
    argv = [results["saved_run"], "--images", str(bare), "--out", str(out), "--strict"]
    assert onboard.main(argv) == 2
    assert "no labels" in capsys.readouterr().err and not out.exists()


def test_label_dp_noises_each_kept_mean_at_the_mechanisms_scale_and_keeps_the_counts():
    from ripple_flwr.privacy.label_means import LabelMechanism, clip_images
    from ripple_flwr.privacy.mechanism import gaussian_sigma

    rng = np.random.default_rng(11)
    x, y = client(rng, class_means(rng), 0, [0, 2], n=40)
    clip = 2.0
    clipped = clip_images(x, clip)
    assert np.linalg.norm(clipped.reshape(len(x), -1), axis=1).max() <= clip + 1e-9
    clean = label_block(clipped, y, CLASSES, MIN)
    mech = LabelMechanism(epsilon=4.0, delta=1e-5, clip=clip)
    noisy = mech.release(clean, CLASSES, np.random.default_rng(0))
    np.testing.assert_array_equal(noisy[:CLASSES], clean[:CLASSES])  # counts exact
    mean_sd, var_sd = mech.sigmas(clean[:CLASSES])
    assert mean_sd[0] == pytest.approx(gaussian_sigma(2.0, 5e-6, 2 * clip / 40))
    assert var_sd[2] == pytest.approx(gaussian_sigma(2.0, 5e-6, 3.0 / 40))
    assert mean_sd[1] == var_sd[1] == 0.0  # a label not kept gets no noise, sends nothing
    diff = (noisy - clean)[2 * CLASSES :].reshape(CLASSES, D)
    assert not diff[[1, 3]].any()
    assert np.std(diff[[0, 2]]) == pytest.approx(mean_sd[0], rel=0.2)


def test_noisy_blocks_are_read_within_their_noise_and_still_place_concepts():
    from ripple_flwr.privacy.label_means import LabelMechanism

    blocks, truth, _, _, _ = federation(12, per_concept=10)
    mech = LabelMechanism(epsilon=200.0, delta=1e-5, clip=float(np.sqrt(D)))
    rng = np.random.default_rng(1)
    noisy = np.stack([mech.release(b, CLASSES, rng) for b in blocks])
    plain, why = read_blocks(noisy, CLASSES, D, MIN)
    assert any(r is not None and "outside" in r for r in why)  # noise leaves [0, 1] ...
    stacks, why = read_blocks(noisy, CLASSES, D, MIN, noise_sd=mech.sigmas)
    assert why == [None] * len(blocks)  # ... by what the public mechanism allows
    assert np.all(stacks.noise[stacks.mask] > 0)
    found = find_concepts(stacks, None, 3, np.random.default_rng(0))
    w, _ = unmix(stacks, found)
    assert adjusted_rand_score(truth, w.argmax(axis=1)) == pytest.approx(1.0)
    # A mean far beyond the noise is still refused.
    bad = noisy.copy()
    bad[0, 2 * CLASSES :] = 1e3
    assert read_blocks(bad, CLASSES, D, MIN, noise_sd=mech.sigmas)[1][0] is not None


def test_a_private_class_conditional_run_records_epsilon_per_client():
    blocks, _, images, _, _ = federation(13)
    m = ripple({"label-dp-epsilon": 8.0}, 0)
    m.setup(query(summaries(images, blocks)))
    dp = m.concept.record["label_dp"]
    assert dp["epsilon_per_client"] == 8.0 and dp["delta"] == 1e-5
    assert dp["clip"] == pytest.approx(np.sqrt(D)) and "counts" in dp["protects"]
    with pytest.raises(Exception, match="label-dp-delta"):
        parse_run_config({"method": "ripple", "class-conditional": True, "label-dp-delta": 1e-6})


def test_clients_each_unlike_every_other_cannot_make_the_server_hold_many_concepts():
    """Crafted blocks (random means in range, plausible counts) form at most MAX_CONCEPTS
    concepts, so at most MAX_CONCEPTS x K cluster models."""
    from ripple_flwr.aggregation.concepts import MAX_CONCEPTS, LabelStacks

    rng = np.random.default_rng(21)
    n = 120
    counts = np.where(rng.random((n, CLASSES)) < 0.6, 2.0 * MIN, 0.0)
    counts[counts.sum(axis=1) == 0, 0] = 2.0 * MIN
    stacks = LabelStacks(
        counts,
        np.where(counts > 0, 1e-4, 0.0),  # claims images that barely vary: every mean apart
        rng.random((n, CLASSES, D)) * (counts > 0)[..., None],
    )
    found = find_concepts(stacks, None, 3, np.random.default_rng(0))
    assert 1 <= found.num_concepts <= MAX_CONCEPTS
