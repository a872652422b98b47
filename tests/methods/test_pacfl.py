"""PACFL: subspaces, angles, clusters and the zero-shot assignment, on federations whose
subspaces are known by construction."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from ripple_flwr.aggregation.subspaces import (
    basis_of,
    class_subspaces,
    cluster_by_angles,
    nearest_cluster,
    smallest_angles,
)
from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.settings import ConfigError

D, P, CLASSES = 60, 2, 3


def group_bases(rng: np.random.Generator, groups: int) -> np.ndarray:
    """(groups, CLASSES, P, D): orthonormal, non-negative-free directions per group and class."""
    q, _ = np.linalg.qr(rng.normal(size=(D, groups * CLASSES * P)))
    return q.T.reshape(groups, CLASSES, P, D)


def client_images(rng, bases: np.ndarray, classes: list[int], n: int = 30):
    """Images of ``classes`` lying in their group's class subspaces (P directions each)."""
    x, y = [], []
    for c in classes:
        coef = rng.normal(size=(n, P)) * np.array([3.0, 1.0])  # distinct singular values
        x.append(coef @ bases[c])
        y += [c] * n
    return np.concatenate(x).reshape(-1, 1, 6, 10), np.array(y)


def federation(seed: int, groups: int = 3, per_group: int = 5):
    rng = np.random.default_rng(seed)
    bases = group_bases(rng, groups)
    blocks, truth = [], []
    for g in range(groups):
        for _ in range(per_group):
            # Every client of a group holds its class 0 (so its members share a subspace).
            others = rng.choice([1, 2], size=rng.integers(0, 3), replace=False)
            x, y = client_images(rng, bases[g], [0, *sorted(int(c) for c in others)])
            blocks.append(class_subspaces(x, y, CLASSES, P).reshape(-1))
            truth.append(g)
    return rng, bases, blocks, np.array(truth)


def test_a_class_subspace_is_the_span_of_its_images():
    rng = np.random.default_rng(0)
    bases = group_bases(rng, 1)[0]
    x, y = client_images(rng, bases, [0, 2])
    sub = class_subspaces(x, y, CLASSES, P)
    assert sub.shape == (CLASSES, P, D) and not sub[1].any()  # class 1 absent: zeros
    for c in (0, 2):
        # Same span: the projection of the true directions on the found ones keeps their norm.
        proj = bases[c] @ sub[c].T.astype(np.float64)
        np.testing.assert_allclose(np.linalg.norm(proj, axis=1), 1.0, atol=1e-5)
    # Fewer images than vectors: as many vectors as images.
    one = class_subspaces(x[:1], y[:1], CLASSES, P)
    assert np.count_nonzero(np.linalg.norm(one.reshape(-1, D), axis=1)) == 1


def test_the_angles_are_the_smallest_between_any_two_vectors():
    rng = np.random.default_rng(3)
    bases = [rng.normal(size=(k, D)) for k in (3, 1, 4)] + [np.zeros((0, D))]
    bases = [b / np.linalg.norm(b, axis=1, keepdims=True) if len(b) else b for b in bases]
    a = smallest_angles(bases, bases)
    for i, bi in enumerate(bases):
        for j, bj in enumerate(bases):
            if len(bi) and len(bj):
                want = np.degrees(np.arccos(np.clip(bi @ bj.T, -1, 1))).min()
            else:
                want = 90.0  # no vector: orthogonal to everyone
            assert a[i, j] == pytest.approx(want, abs=1e-9)


@pytest.mark.parametrize("linkage", ["average", "maximum", "minimum"])
def test_pacfl_recovers_a_federation_of_known_subspaces(linkage):
    rng, bases, blocks, truth = federation(seed=5)
    unit = [basis_of(b, D) for b in blocks]
    a = smallest_angles(unit, unit)
    same = a[truth[:, None] == truth[None, :]]
    other = a[truth[:, None] != truth[None, :]]
    # A shared class 0 within a group (its leading vector up to sampling); orthogonal groups.
    assert same.max() < 20.0 and other.min() > 89.0
    labels = cluster_by_angles(a, beta=45.0, linkage=linkage)
    assert adjusted_rand_score(truth, labels) == 1.0
    # New clients of each group go to their group's cluster, whatever classes they hold.
    new_truth, new_unit = [], []
    for g in range(3):
        x, y = client_images(rng, bases[g], [0])
        new_unit.append(basis_of(class_subspaces(x, y, CLASSES, P).reshape(-1), D))
        new_truth.append(g)
    got = nearest_cluster(smallest_angles(new_unit, unit), labels)
    want = [labels[np.flatnonzero(truth == g)[0]] for g in new_truth]
    assert got.tolist() == want
    # A threshold below every angle leaves everyone alone; above every angle, one cluster.
    assert cluster_by_angles(a, beta=-1.0, linkage=linkage).max() == len(a) - 1
    assert cluster_by_angles(a, beta=90.0 + 1e-6, linkage=linkage).max() == 0


def test_a_client_cannot_stretch_the_angles_by_scaling_what_it_sends():
    _, _, blocks, _ = federation(seed=2)
    unit = [basis_of(b, D) for b in blocks]
    loud = list(unit)
    loud[0] = basis_of(blocks[0] * 1e6, D)
    np.testing.assert_allclose(smallest_angles(loud, unit), smallest_angles(unit, unit), atol=1e-3)


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("pacfl-beta", -1.0, "pacfl-beta"),
        ("pacfl-beta", 91.0, "pacfl-beta"),
        ("pacfl-p", 0, "pacfl-p"),
        ("pacfl-linkage", "ward", "pacfl-linkage"),
    ],
)
def test_bad_pacfl_options_are_refused_in_one_line(key, value, words):
    with pytest.raises(ConfigError) as err:
        parse_run_config({"method": "pacfl", key: value})
    assert words in str(err.value) and "\n" not in str(err.value)
