"""Client partitions: exact counts, Dirichlet mixtures, D_aux, splits and the federation."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from ripple_flwr.data import (
    Federation,
    ImageDataset,
    build_federation,
    dirichlet_partition,
    fold_labels,
    largest_remainder_counts,
    mixture_of,
    sample_dirichlet_clients,
    server_aux_split,
    train_test_split_indices,
    true_mixtures,
)


def balanced_labels(per_class: int, num_classes: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(num_classes), per_class))


def toy_dataset(n: int = 3000, num_classes: int = 10, with_domains: bool = False) -> ImageDataset:
    """Tiny 1x4x4 images: the federation logic without the cost of real pixels."""
    rng = np.random.default_rng(1)
    labels = balanced_labels(n // num_classes, num_classes)
    return ImageDataset(
        name="toy",
        images=rng.random((len(labels), 1, 4, 4), dtype=np.float32),
        labels=labels,
        num_classes=num_classes,
        domains=np.arange(len(labels)) % 4 if with_domains else None,
        num_domains=4 if with_domains else 0,
    )


# --------------------------------------------------------------------------- counts, folding


def test_largest_remainder_counts_by_hand() -> None:
    np.testing.assert_array_equal(largest_remainder_counts(np.array([0.5, 0.3, 0.2]), 7), [4, 2, 1])
    # Ties go to the lowest index; unnormalised proportions are fine.
    np.testing.assert_array_equal(largest_remainder_counts(np.array([1.0, 1.0, 1.0]), 4), [2, 1, 1])
    np.testing.assert_array_equal(largest_remainder_counts(np.array([0.0, 2.0, 2.0]), 5), [0, 3, 2])
    np.testing.assert_array_equal(largest_remainder_counts(np.array([0.25, 0.75]), 0), [0, 0])
    batch = np.random.default_rng(0).dirichlet(np.full(10, 0.3), size=500)
    counts = largest_remainder_counts(batch, 200)
    assert counts.shape == (500, 10) and (counts.sum(axis=1) == 200).all()
    assert np.abs(counts / 200 - batch).max() <= 1 / 200 + 1e-12
    with pytest.raises(ValueError):
        largest_remainder_counts(np.array([0.5, -0.1]), 3)


def test_fold_labels_and_mixture_of() -> None:
    folded = fold_labels(np.arange(12), 10)
    assert folded[11] == 1 and folded[10] == 0 and folded[9] == 9
    np.testing.assert_allclose(mixture_of(np.array([0, 10, 1, 11]), 10)[:2], [0.5, 0.5])
    with pytest.raises(ValueError):
        fold_labels(np.arange(3), 0)


# --------------------------------------------------------------------------- dirichlet_partition


def test_dirichlet_partition_disjoint_fixed_size_deterministic() -> None:
    labels = balanced_labels(300, 10)
    parts = dirichlet_partition(labels, 10, 150, alpha=0.3, seed=4)
    assert len(parts) == 10
    for p in parts:
        assert p.dtype == np.int64 and len(p) == 150 and len(np.unique(p)) == 150
    everything = np.concatenate(parts)
    assert len(np.unique(everything)) == 1500 and everything.max() < len(labels)
    again = dirichlet_partition(labels, 10, 150, alpha=0.3, seed=4)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    other = dirichlet_partition(labels, 10, 150, alpha=0.3, seed=5)
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other, strict=True))


def test_dirichlet_partition_follows_alpha_and_odd_labels() -> None:
    labels = balanced_labels(400, 10)
    uniform = np.full(10, 0.1)

    def mean_l1(alpha: float) -> float:
        parts = dirichlet_partition(labels, 15, 200, alpha=alpha, seed=0)
        return float(np.abs(true_mixtures(parts, labels, 10) - uniform).sum(axis=1).mean())

    # Large alpha: near uniform (the multinomial noise of 200 draws is ~0.17 L1);
    # small alpha: clients of one or two classes (L1 near its maximum 1.8).
    assert mean_l1(1000.0) < 0.3
    assert mean_l1(0.05) > 1.2
    # Label values need not be 0..C-1 (the partitioner itself assumes they are).
    odd = np.array([3, 7, 11])[balanced_labels(100, 3)]
    parts = dirichlet_partition(odd, 4, 50, alpha=1.0, seed=0)
    taken = np.concatenate(parts)
    assert len(np.unique(taken)) == 200 and set(np.unique(odd[taken])) <= {3, 7, 11}


def _flwr_datasets_partition(
    labels: np.ndarray, num_partitions: int, size: int, alpha: float, seed: int
) -> list[np.ndarray]:
    """What dirichlet_partition returned when it called flwr-datasets' partitioner itself."""
    import warnings

    import datasets
    from flwr_datasets.partitioner import InnerDirichletPartitioner

    _, dense = np.unique(labels, return_inverse=True)
    order = np.random.default_rng(seed).permutation(len(labels))
    partitioner = InnerDirichletPartitioner(
        partition_sizes=[size] * num_partitions,
        partition_by="label",
        alpha=float(alpha),
        shuffle=True,
        seed=seed,
    )
    partitioner.dataset = datasets.Dataset.from_dict({"label": dense[order], "idx": order})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [
            np.sort(np.asarray(partitioner.load_partition(pid)["idx"], dtype=np.int64))
            for pid in range(num_partitions)
        ]


@pytest.mark.parametrize(
    ("per_class", "num_partitions", "size", "alpha", "seed"),
    [
        (300, 10, 150, 0.3, 4),  # half the rows taken
        (40, 70, 5, 0.1, 0),  # many small clients, classes run out (renormalised priors)
        (20, 40, 5, 1.0, 3),  # every row taken
        (50, 9, 30, 100.0, 7),  # near-uniform mixtures
    ],
)
def test_dirichlet_partition_equals_flwr_datasets(
    per_class: int, num_partitions: int, size: int, alpha: float, seed: int
) -> None:
    """The linear-time draws give flwr-datasets 0.6.1's partitions, row for row."""
    labels = np.array([2, 5, 6, 8, 9, 11, 12, 20, 21, 30])[balanced_labels(per_class, 10, seed)]
    ours = dirichlet_partition(labels, num_partitions, size, alpha=alpha, seed=seed)
    theirs = _flwr_datasets_partition(labels, num_partitions, size, alpha, seed)
    assert all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))


def test_dirichlet_partition_errors() -> None:
    labels = balanced_labels(10, 10)
    with pytest.raises(ValueError, match="need 110 rows, but only 100 are available"):
        dirichlet_partition(labels, 11, 10, alpha=1.0, seed=0)
    with pytest.raises(ValueError, match="alpha must be > 0"):
        dirichlet_partition(labels, 2, 10, alpha=0.0, seed=0)
    with pytest.raises(ValueError, match="partition_size must be >= 2"):
        dirichlet_partition(labels, 2, 1, alpha=1.0, seed=0)
    with pytest.raises(ValueError, match="num_partitions must be >= 1"):
        dirichlet_partition(labels, 0, 10, alpha=1.0, seed=0)


# --------------------------------------------------------------------------- sampled clients


def test_sample_dirichlet_clients_reproduces_exact_counts() -> None:
    labels = balanced_labels(500, 10)
    rng = np.random.default_rng(42)
    twin = copy.deepcopy(rng)
    clients = sample_dirichlet_clients(labels, 3, 200, alpha=0.5, rng=rng)
    # Each client's first draw is its Dirichlet vector; no label is short here, so the
    # counts are exactly the largest-remainder counts of that draw.
    p = twin.dirichlet(np.full(10, 0.5))
    np.testing.assert_array_equal(
        np.bincount(labels[clients[0]], minlength=10), largest_remainder_counts(p, 200)
    )
    for c in clients:
        assert len(c) == 200 and len(np.unique(c)) == 200 and c.dtype == np.int64


def test_sample_dirichlet_clients_mean_near_uniform_and_folding() -> None:
    labels = balanced_labels(100, 10)
    clients = sample_dirichlet_clients(labels, 2000, 50, alpha=1.0, rng=np.random.default_rng(0))
    mean = true_mixtures(clients, labels, 10).mean(axis=0)
    assert np.abs(mean - 0.1).max() < 0.01
    # Folded: the Dirichlet is over K=4 components, each spread over its classes.
    twelve = balanced_labels(50, 12)
    rng = np.random.default_rng(3)
    twin = copy.deepcopy(rng)
    folded = sample_dirichlet_clients(twelve, 1, 60, alpha=2.0, rng=rng, num_components=4)
    p = twin.dirichlet(np.full(4, 2.0))
    np.testing.assert_array_equal(
        np.bincount(fold_labels(twelve[folded[0]], 4), minlength=4),
        largest_remainder_counts(p, 60),
    )


def test_sample_dirichlet_clients_caps_short_labels() -> None:
    labels = np.concatenate([np.zeros(3, np.int64), np.ones(40, np.int64), np.full(40, 2)])
    clients = sample_dirichlet_clients(labels, 300, 30, alpha=0.05, rng=np.random.default_rng(1))
    for c in clients:
        assert len(c) == 30 and len(np.unique(c)) == 30
        assert np.count_nonzero(labels[c] == 0) <= 3
    with pytest.raises(ValueError, match="client_size"):
        sample_dirichlet_clients(labels, 1, 84, alpha=1.0, rng=np.random.default_rng(0))


# --------------------------------------------------------------------------- aux, splits


def test_server_aux_split_balanced_disjoint() -> None:
    labels = balanced_labels(500, 10)
    aux, pool = server_aux_split(labels, 1005, seed=0)
    assert len(aux) == 1005 and len(pool) == 3995
    assert len(np.intersect1d(aux, pool)) == 0
    np.testing.assert_array_equal(np.union1d(aux, pool), np.arange(5000))
    counts = np.bincount(labels[aux], minlength=10)
    assert counts.min() == 100 and counts.max() == 101
    again, _ = server_aux_split(labels, 1005, seed=0)
    np.testing.assert_array_equal(aux, again)
    # A label with too few rows gives all it has; the others make up for it.
    short = np.concatenate([np.zeros(2, np.int64), np.repeat(np.arange(1, 5), 30)])
    aux, _ = server_aux_split(short, 50, seed=1)
    np.testing.assert_array_equal(np.bincount(short[aux]), [2, 12, 12, 12, 12])
    with pytest.raises(ValueError, match=r"aux_size must be in \[5, 122\)"):
        server_aux_split(short, 4, seed=0)
    with pytest.raises(ValueError, match="aux_size"):
        server_aux_split(short, 122, seed=0)


def test_train_test_split_indices() -> None:
    rows = np.arange(1000, 1200)
    train, test = train_test_split_indices(rows, 0.2, seed=3)
    assert len(train) == 160 and len(test) == 40
    np.testing.assert_array_equal(np.union1d(train, test), rows)
    again = train_test_split_indices(rows, 0.2, seed=3)
    np.testing.assert_array_equal(train, again[0])
    assert train_test_split_indices(np.array([5, 9]), 0.2, seed=0)[1].size == 1
    assert train_test_split_indices(np.array([5, 9]), 0.9, seed=0)[0].size == 1
    with pytest.raises(ValueError, match=">= 2 rows"):
        train_test_split_indices(np.array([5]), 0.2, seed=0)
    with pytest.raises(ValueError, match="test_fraction"):
        train_test_split_indices(rows, 1.0, seed=0)


def test_true_mixtures() -> None:
    labels = np.array([0, 1, 1, 2, 11, 3])
    mix = true_mixtures([np.array([0, 1, 2]), np.array([3, 4, 5])], labels, 10)
    assert mix.shape == (2, 10)
    np.testing.assert_allclose(mix.sum(axis=1), 1.0)
    np.testing.assert_allclose(mix[0, :2], [1 / 3, 2 / 3])
    np.testing.assert_allclose(mix[1, [1, 2, 3]], [1 / 3, 1 / 3, 1 / 3])  # 11 -> 1
    assert true_mixtures([], labels, 4).shape == (0, 4)


# --------------------------------------------------------------------------- federation


def build(dataset: ImageDataset, **overrides: object) -> Federation:
    args: dict = dict(
        num_partitions=8,
        partition_size=100,
        alpha=0.3,
        aux_size=500,
        num_components=4,
        seed=7,
        new_partitions=3,
        alpha_new=1.0,
    )
    args.update(overrides)
    return build_federation(dataset, **args)


def test_build_federation_disjoint_and_consistent() -> None:
    dataset = toy_dataset()
    fed = build(dataset)
    assert fed.num_train_partitions == 8 and fed.num_partitions == 11
    assert fed.num_new_partitions == 3 and fed.num_components == 4
    pieces = [fed.aux_indices] + fed.train_indices + fed.test_indices
    everything = np.concatenate(pieces)
    assert len(everything) == len(np.unique(everything)) == 500 + 11 * 100
    for pid in range(fed.num_partitions):
        assert len(fed.train_indices[pid]) == 80 and len(fed.test_indices[pid]) == 20
        x_tr, y_tr, x_te, y_te = fed.client_data(pid)
        assert x_tr.shape == (80, 1, 4, 4) and x_te.shape == (20, 1, 4, 4)
        np.testing.assert_array_equal(y_tr, dataset.labels[fed.train_indices[pid]])
        np.testing.assert_array_equal(y_te, dataset.labels[fed.test_indices[pid]])
        assert fed.client_images(pid).shape == (100, 1, 4, 4)
        np.testing.assert_allclose(
            fed.mixtures[pid], mixture_of(dataset.labels[fed.client_indices(pid)], 4)
        )
    assert fed.mixtures.shape == (11, 4)
    np.testing.assert_allclose(fed.mixtures.sum(axis=1), 1.0)
    aux_x, aux_y = fed.aux_data()
    assert aux_x.shape == (500, 1, 4, 4) and aux_y.max() < 4
    np.testing.assert_array_equal(aux_y, dataset.labels[fed.aux_indices] % 4)
    assert fed.settings["alpha"] == 0.3 and fed.settings["new_partitions"] == 3
    assert fed.settings["dataset"] == "toy" and fed.settings["label_kind"] == "class"
    with pytest.raises(IndexError):
        fed.client_data(11)


def test_label_mixtures_keep_every_class_and_fold_to_the_mixtures() -> None:
    dataset = toy_dataset()  # 10 classes, folded to K = 4 components
    fed = build(dataset)
    labels = fed.label_mixtures()
    assert labels.shape == (11, 10)
    for pid in range(fed.num_partitions):
        np.testing.assert_allclose(
            labels[pid], mixture_of(dataset.labels[fed.client_indices(pid)], 10)
        )
    folded = np.stack([labels[:, c::4].sum(axis=1) for c in range(4)], axis=1)
    np.testing.assert_allclose(folded, fed.mixtures)
    domains = build(toy_dataset(with_domains=True), label_kind="domain", new_partitions=0)
    assert domains.label_mixtures().shape == (8, 4)
    np.testing.assert_allclose(domains.label_mixtures(), domains.mixtures)


def test_build_federation_deterministic() -> None:
    dataset = toy_dataset()
    a, b = build(dataset), build(dataset)
    np.testing.assert_array_equal(a.aux_indices, b.aux_indices)
    for x, y in zip(
        a.train_indices + a.test_indices, b.train_indices + b.test_indices, strict=True
    ):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a.mixtures, b.mixtures)
    c = build(dataset, seed=8)
    assert not np.array_equal(a.train_indices[0], c.train_indices[0])


def test_build_federation_domain_clusters() -> None:
    dataset = toy_dataset(with_domains=True)
    fed = build(dataset, label_kind="domain", num_components=4, new_partitions=0)
    assert fed.num_partitions == 8
    for pid in range(8):
        np.testing.assert_allclose(
            fed.mixtures[pid], mixture_of(dataset.domains[fed.client_indices(pid)], 4)
        )
        # The model still trains on class labels.
        np.testing.assert_array_equal(
            fed.client_data(pid)[1], dataset.labels[fed.train_indices[pid]]
        )
    np.testing.assert_array_equal(
        np.bincount(dataset.domains[fed.aux_indices], minlength=4), [125] * 4
    )


def test_build_federation_joint_clusters_skew_class_and_domain_together() -> None:
    base = toy_dataset(with_domains=True)
    domains = np.random.default_rng(3).permutation(len(base.labels)) % 4  # every pair occurs
    dataset = ImageDataset("toy", base.images, base.labels, 10, domains=domains, num_domains=4)
    joint, count = dataset.cluster_labels("joint")
    assert count == 40
    np.testing.assert_array_equal(joint // 10, domains)
    np.testing.assert_array_equal(joint % 10, dataset.labels)  # folding by C gives the class
    fed = build(dataset, label_kind="joint", num_components=40, alpha=0.05, new_partitions=0)
    for pid in range(fed.num_partitions):
        rows = fed.client_indices(pid)
        np.testing.assert_allclose(fed.mixtures[pid], mixture_of(joint[rows], 40))

    # At a small alpha a client is skewed in both: few classes and few rotations each.
    def dominant(labels: np.ndarray, k: int) -> float:
        return float(
            np.mean(
                [
                    mixture_of(labels[fed.client_indices(p)], k).max()
                    for p in range(fed.num_partitions)
                ]
            )
        )

    assert dominant(dataset.labels, 10) > 0.5 and dominant(domains, 4) > 0.5


def test_build_federation_errors() -> None:
    dataset = toy_dataset()
    with pytest.raises(ValueError, match=r"has 3000 rows.*need 3100"):
        build(dataset, num_partitions=23)
    with pytest.raises(ValueError, match="aux_size must be in"):
        build(dataset, aux_size=5)
    with pytest.raises(ValueError, match="alpha must be > 0"):
        build(dataset, alpha=-1.0)
    with pytest.raises(ValueError, match="partition_size"):
        build(dataset, partition_size=1)
    with pytest.raises(ValueError, match="test_fraction"):
        build(dataset, test_fraction=0.0)
    with pytest.raises(ValueError, match="no domain label"):
        build(dataset, label_kind="domain")
    with pytest.raises(ValueError, match="no domain label"):
        build(dataset, label_kind="joint")
    with pytest.raises(ValueError, match="unknown label kind"):
        build(dataset, label_kind="style")


# --------------------------------------------------------------------------- quantity skew
def test_spread_sizes_vary_by_the_spread_keep_the_total_and_repeat() -> None:
    from ripple_flwr.data.partition import spread_sizes

    assert spread_sizes(7, 50, 1.0, seed=3) == [50] * 7
    sizes = spread_sizes(200, 100, 10.0, seed=3)
    assert sum(sizes) == 200 * 100 and min(sizes) >= 2
    ratio = max(sizes) / min(sizes)
    assert 6 < ratio <= 10.5, ratio  # log-uniform over one decade: close to 10x at n = 200
    assert sizes == spread_sizes(200, 100, 10.0, seed=3)
    assert sizes != spread_sizes(200, 100, 10.0, seed=4)
    with pytest.raises(ValueError, match=">= 1"):
        spread_sizes(3, 10, 0.5, seed=0)


def test_a_federation_with_quantity_skew_holds_the_same_rows_in_clients_of_spread_sizes() -> None:
    dataset = toy_dataset()
    equal = build_federation(
        dataset, num_partitions=20, partition_size=100, alpha=0.3, aux_size=500,
        num_components=4, seed=5,
    )  # fmt: skip
    skewed = build_federation(
        dataset, num_partitions=20, partition_size=100, alpha=0.3, aux_size=500,
        num_components=4, seed=5, size_spread=10.0, new_partitions=2,
    )  # fmt: skip
    sizes = [len(skewed.client_indices(p)) for p in range(20)]
    assert sum(sizes) == 20 * 100 and max(sizes) / min(sizes) > 4
    assert [len(skewed.client_indices(p)) for p in (20, 21)] == [100, 100]  # new clients
    everything = np.concatenate([skewed.client_indices(p) for p in range(22)])
    assert len(everything) == len(np.unique(everything))
    assert skewed.settings["size_spread"] == 10.0 and "size_spread" not in equal.settings
    # spread = 1 is the equal-size federation, row for row.
    same = build_federation(
        dataset, num_partitions=20, partition_size=100, alpha=0.3, aux_size=500,
        num_components=4, seed=5, size_spread=1.0,
    )  # fmt: skip
    for pid in range(20):
        np.testing.assert_array_equal(same.client_indices(pid), equal.client_indices(pid))


def test_new_clients_of_their_own_size_leave_the_training_clients_row_for_row() -> None:
    dataset = toy_dataset()
    plain = build(dataset)
    big = build(dataset, new_partition_size=300)
    for pid in range(8):  # the training clients, D_aux and their splits do not move
        np.testing.assert_array_equal(big.train_indices[pid], plain.train_indices[pid])
        np.testing.assert_array_equal(big.test_indices[pid], plain.test_indices[pid])
    np.testing.assert_array_equal(big.aux_indices, plain.aux_indices)
    assert [len(big.client_indices(p)) for p in (8, 9, 10)] == [300, 300, 300]
    assert [len(big.test_indices[p]) for p in (8, 9, 10)] == [60, 60, 60]
    everything = np.concatenate([big.aux_indices, *(big.client_indices(p) for p in range(11))])
    assert len(everything) == len(np.unique(everything))
    assert big.settings["new_partition_size"] == 300 and "new_partition_size" not in plain.settings
    with pytest.raises(ValueError, match="3 of 900"):
        build(dataset, new_partition_size=900)


def test_the_data_seed_redraws_the_whole_federation() -> None:
    dataset = toy_dataset()
    a, b = build(dataset, seed=1), build(dataset, seed=2)
    assert not np.array_equal(a.aux_indices, b.aux_indices)
    assert not np.array_equal(a.client_indices(0), b.client_indices(0))
    assert not np.array_equal(a.client_indices(8), b.client_indices(8))  # the new clients too


def test_fedrc_concepts_relabel_each_client_whole_and_survive_the_cache(tmp_path):
    """client-concepts=fedrc: one concept per client (new ones too), train and test labels
    mapped alike, D_aux untouched, the same federation from the disk cache."""
    from ripple_flwr.app.run_config import parse_run_config
    from ripple_flwr.data.cache import PROCESS_DATA, cached_federation
    from ripple_flwr.data.federation import FEDRC_SHARES, fedrc_maps
    from ripple_flwr.settings import ConfigError

    cfg = {
        "dataset": "mnist-5k",
        "num-partitions": 40,
        "partition-size": 60,
        "alpha": 0.5,
        "aux-size": 100,
        "new-clients": 10,
        "client-concepts": "fedrc",
        "cache-dir": str(tmp_path),
    }
    fed = cached_federation(parse_run_config(cfg))
    plain = cached_federation(parse_run_config({**cfg, "client-concepts": "none"}))
    assert fed.concepts.shape == (50,) and set(fed.concepts) <= {0, 1, 2}
    assert len(set(fed.concepts)) == len(FEDRC_SHARES)
    maps = fedrc_maps(10)
    for pid in range(50):
        x, y, xt, yt = fed.client_data(pid)
        px, py, pxt, pyt = plain.client_data(pid)
        np.testing.assert_array_equal(x, px)  # the same images, ...
        to = maps[fed.concepts[pid]]
        np.testing.assert_array_equal(y, to[py])  # ... labelled by the client's concept
        np.testing.assert_array_equal(yt, to[pyt])
    np.testing.assert_array_equal(fed.aux_data()[1], plain.aux_data()[1])
    np.testing.assert_array_equal(fed.concept_mixtures(), np.eye(3)[fed.concepts])
    assert plain.concept_mixtures() is None
    PROCESS_DATA.clear()  # from the disk cache this time
    again = cached_federation(parse_run_config(cfg))
    np.testing.assert_array_equal(again.concepts, fed.concepts)
    with pytest.raises(ConfigError, match="client-concepts"):
        parse_run_config({**cfg, "dataset": "permuted-mnist-5k"})
