"""PACFL: subspaces, angles, clusters and the zero-shot assignment, on federations whose
subspaces are known by construction."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from ripple_flwr.aggregation.subspaces import (
    basis_of,
    budget_subspaces,
    class_subspaces,
    cluster_by_angles,
    dirichlet_budget,
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


# The authors' rule (main_pacfl.py, noniid-labeldir; round_to in hierarchical_clustering.py),
# worked by hand. A class is dominant if its share >= 1/(classes held) + 0.05; a dominant class
# weighs its raw count, any other its share; the weights are scaled to sum to 20, floored, and
# the floors' shortfall goes, one each, to the classes whose +1 adds the least
# |k - x|^2 / sqrt(max(x, 1)).
BUDGET_CASES = [
    # 10 classes each 20: shares 0.1 < 0.15, none dominant; 0.1 / 1 * 20 = 2 each, exact.
    ([20] * 10, [2] * 10),
    # 4 classes, shares .28 .26 .24 .22 < 0.30: x = 5.6 5.2 4.8 4.4, floors 5 5 4 4 (18);
    # +1 costs (.16-.36)/2.366 = -.085, (.64-.04)/2.280 = .263, (.04-.64)/2.191 = -.274,
    # (.36-.16)/2.098 = .095: the two cheapest are classes 2 and 0.
    ([28, 26, 24, 22], [6, 5, 5, 4]),
    # 4 classes of 400, shares .5 .325 .125 .05, threshold .30: classes 0 and 1 weigh 200 and
    # 130, the others .125 and .05 (sum 330.175); x = 12.115 7.875 .0076 .0030, floors 12 7 0 0;
    # +1 costs .221, -.267, .985, .994: class 1 gets it.
    ([200, 130, 50, 20], [12, 8, 0, 0]),
    # 9 classes held of 10 (200 images), threshold 1/9 + .05 = .161: classes 0 (.475) and 1
    # (.2) weigh 95 and 40, the seven others their shares (sum 135.325); x = 14.040 5.912 and
    # seven below .02; floors 14 5 (19); +1 costs .245 for class 0, -.339 for class 1 and
    # ~.96 or more for the minor ones: class 1. The seven minor classes send nothing.
    ([95, 40, 25, 15, 10, 8, 4, 2, 1, 0], [14, 6, 0, 0, 0, 0, 0, 0, 0, 0]),
    # One class held: share 1 >= 1.05 fails, so it weighs its share: all 20.
    ([0, 0, 7, 0], [0, 0, 20, 0]),
]


@pytest.mark.parametrize(("counts", "want"), BUDGET_CASES)
def test_the_dirichlet_budget_gives_the_authors_vector_counts(counts, want):
    got = dirichlet_budget(np.array(counts), 20)
    assert got.tolist() == want and got.sum() == 20


def test_the_dirichlet_budget_sends_only_its_vectors_classes_in_order():
    rng = np.random.default_rng(4)
    bases = group_bases(rng, 1)[0]
    x, y = client_images(rng, bases, [0, 1, 2])  # 30 images each
    x, y = x[: 30 + 30 + 2], y[: 30 + 30 + 2]  # class 2 keeps 2 images
    per_class = dirichlet_budget(np.bincount(y, minlength=CLASSES), 20)
    rows = budget_subspaces(x, y, CLASSES, 20)
    # A class with fewer images than its count sends as many vectors as it has images.
    sent = [min(int(k), int((y == c).sum())) for c, k in enumerate(per_class)]
    assert rows.shape == (sum(sent), D) and rows.dtype == np.float32 and sum(sent) <= 20
    # Class by class, the leading vectors of class_subspaces (the same SVD, the same signs).
    full = class_subspaces(x, y, CLASSES, max(sent))
    want = np.concatenate([full[c, :k] for c, k in enumerate(sent)])
    np.testing.assert_array_equal(rows, want)


def _reply(phi):
    from flwr.app import Array, ArrayRecord, RecordDict

    phi = phi if isinstance(phi, Array) else Array(phi)
    return RecordDict({"summary": ArrayRecord({"phi": phi})})


def test_a_reply_with_more_vectors_than_the_budget_or_broken_values_is_refused():
    from flwr.app import Array

    from ripple_flwr.app.server.roster.query import validate_summary
    from ripple_flwr.methods.api import SummaryRows

    rows = SummaryRows(width=D, most=20)
    honest = np.ones(7 * D, dtype=np.float32)
    got = validate_summary(_reply(honest), "method", rows)
    # Padded with zero rows to one length; what was sent is kept as sent.
    assert got.shape == (20 * D,) and (got[: 7 * D] == 1).all() and not got[7 * D :].any()
    assert validate_summary(_reply(np.zeros(0, dtype=np.float32)), "method", rows).shape == (
        20 * D,
    )
    bad = {
        "more than the 20 allowed": np.ones(21 * D, dtype=np.float32),
        "not a whole number": np.ones(7 * D + 1, dtype=np.float32),
        "NaN or Inf": np.where(np.arange(3 * D) == 5, np.nan, 1.0).astype(np.float32),
        "float32's range": np.full(D, 1e300),  # finite in float64, inf once read as float32
        "one flat vector": np.ones((2, D), dtype=np.float32),
        "expected floats": np.ones(D, dtype=np.int64),
    }
    for words, phi in bad.items():
        with pytest.raises(ValueError, match=words):
            validate_summary(_reply(phi), "method", rows)
    # A header that promises more than the budget is refused before the bytes are decoded.
    small = Array(np.zeros(D, dtype=np.float32))
    lying = Array(dtype=small.dtype, shape=(D * 2**34,), stype=small.stype, data=small.data)
    with pytest.raises(ValueError, match="more than the 20 allowed"):
        validate_summary(_reply(lying), "method", rows)
    liar = Array(dtype=small.dtype, shape=(2 * D,), stype=small.stype, data=small.data * 40)
    with pytest.raises(ValueError, match="declared"):
        validate_summary(_reply(liar), "method", rows)


def test_a_pacfl_run_refuses_the_client_that_sends_too_many_vectors(cache_dir, tmp_path):
    import json

    from conftest import FakeGrid, tiny_run_config
    from flwr.app import Array, ArrayRecord

    from ripple_flwr.app.server.run import run_server
    from ripple_flwr.testing.faults import _on, _replace

    def too_many(msg, reply):  # one vector more than the budget, each a real-looking one
        phi = reply.content.array_records["summary"]["phi"].numpy()
        d = 28 * 28
        extra = np.concatenate([phi, phi[:d] if len(phi) else np.ones(d, np.float32)])
        rows = np.resize(extra, (3 + 1) * d).astype(np.float32)
        return _replace(reply, msg, summary=ArrayRecord({"phi": Array(rows)}))

    cfg = tiny_run_config(
        cache_dir,
        method="pacfl",
        **{
            "pacfl-budget": "dirichlet",
            "pacfl-vectors": 3,
            "new-clients": 2,  # new clients send their vectors too, checked the same way
            "num-server-rounds": 1,
            "clients-per-round": 3,
            "results-path": str(tmp_path / "r.json"),
            "overwrite-results": True,
        },
    )
    out = json.loads(run_server(FakeGrid(cfg, faults={1: _on("query", too_many)}), cfg).read_text())
    assert 1 not in out["clients"]["partition_ids"]
    (reason,) = out["clients"]["left_out"].values()
    assert "4 vectors, more than the 3 allowed" in reason
    assert out["pacfl"]["budget"] == "dirichlet" and out["pacfl"]["vectors_sent"]["max"] <= 3
    assert len(out["zero_shot"]["pacfl"]["labels"]) == 2  # both placed by the smallest angle


@pytest.mark.parametrize(
    ("over", "words"),
    [
        ({"pacfl-vectors": 10}, "pacfl-vectors"),  # the per-class rule never reads it
        ({"pacfl-budget": "dirichlet", "pacfl-p": 5}, "pacfl-p"),  # nor the Dirichlet one this
        ({"pacfl-budget": "dirichlet", "pacfl-vectors": 0}, "pacfl-vectors"),
        ({"pacfl-budget": "authors"}, "pacfl-budget"),
    ],
)
def test_a_budget_key_the_run_would_not_read_or_out_of_range_is_refused(over, words):
    with pytest.raises(ConfigError) as err:
        parse_run_config({"method": "pacfl", **over})
    assert words in str(err.value) and "\n" not in str(err.value)
