"""FedGWC: its arithmetic against a literal transcription of the authors' loops, a split
that recovers a known structure, and its clients' loss reports."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.methods.fedgwc.client import fixed_length
from ripple_flwr.methods.fedgwc.interactions import (
    affinity,
    best_split,
    gaussian_rewards,
    update_interactions,
)
from ripple_flwr.settings import ConfigError


def authors_rewards(losses, counts):
    """``ServerFedGWC._get_gaussian_rewards``, loop for loop (numpy for torch)."""
    total = sum(counts)
    mu = sum(loss * n / total for loss, n in zip(losses, counts, strict=True))
    sigma2 = sum(n * (loss - mu) ** 2 / total for loss, n in zip(losses, counts, strict=True))
    sigma2 = sigma2 + 1e-16
    return [float(np.exp(-0.5 * (loss - mu) ** 2 / sigma2).mean()) for loss in losses]


def authors_affinity(w, gamma):
    """``ServerFedGWC._compute_P``: columns of W, min-max scaled, entries i and j left out."""
    w = w.T.copy()
    w = (w - w.min()) / max(w.max() - w.min(), 1e-8)
    n = len(w)
    p = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            keep = [k for k in range(n) if k not in (i, j)]
            p[i, j] = p[j, i] = np.exp(-gamma * ((w[i, keep] - w[j, keep]) ** 2).sum())
    return p


def test_rewards_and_affinity_equal_the_authors_loops():
    rng = np.random.default_rng(0)
    losses = rng.random((6, 5)) * 2
    counts = rng.integers(20, 200, size=6)
    np.testing.assert_allclose(
        gaussian_rewards(losses, counts), authors_rewards(list(losses), list(counts)), rtol=1e-12
    )
    assert np.allclose(gaussian_rewards(np.ones((3, 4)), np.ones(3)), 1.0)  # all alike: 1
    w = rng.random((7, 7))
    np.testing.assert_allclose(affinity(w, 0.1), authors_affinity(w, 0.1), rtol=1e-10, atol=1e-12)


def test_the_interaction_block_moves_towards_the_normalised_rewards():
    w = np.full((5, 5), 1 / 25)
    at = np.array([1, 3])
    change = update_interactions(w, at, np.array([0.2, 0.6]), rate=0.4)
    np.testing.assert_allclose(w[1, [1, 3]], 0.6 / 25 + 0.4 * 0.25)
    np.testing.assert_allclose(w[3, [1, 3]], 0.6 / 25 + 0.4 * 0.75)
    assert w[0, 0] == w[1, 0] == 1 / 25  # pairs not sampled together keep their value
    assert change == pytest.approx(np.mean((w[np.ix_(at, at)] - 1 / 25) ** 2))


def test_a_split_recovers_two_groups_of_interaction_vectors():
    rng = np.random.default_rng(1)
    truth = np.repeat([0, 1], 12)
    # Each group's clients scored alike with the group's members and apart from the others.
    w = np.where(truth[:, None] == truth[None, :], 0.08, 0.01) + rng.normal(0, 1e-3, (24, 24))
    labels, tried = best_split(affinity(w, gamma=0.1), per_round=8, seed=0, max_score=1.0)
    assert labels is not None and adjusted_rand_score(truth, labels) == 1.0
    assert set(tried["scores"]) == {"2", "3"}  # 2 .. min(24 // 8, 4)
    # Noise alone does not split (no candidate scores below the limit) or splits nothing useful.
    flat = 0.05 + rng.normal(0, 1e-3, (24, 24))
    none, _ = best_split(affinity(flat, gamma=0.1), per_round=8, seed=0, max_score=0.2)
    assert none is None


def test_a_client_reports_a_fixed_number_of_step_losses():
    np.testing.assert_array_equal(fixed_length(np.array([3.0, 2.0, 1.0]), 2), [3.0, 2.0])
    np.testing.assert_array_equal(fixed_length(np.array([3.0, 2.0]), 4), [3.0, 2.0, 2.0, 2.0])
    with pytest.raises(ValueError, match="no step"):
        fixed_length(np.zeros(0), 3)


@pytest.mark.parametrize(
    "key, value", [("fedgwc-steps", 0), ("fedgwc-gamma", 0.0), ("fedgwc-eps", -1.0)]
)
def test_bad_fedgwc_options_are_refused_in_one_line(key, value):
    with pytest.raises(ConfigError) as err:
        parse_run_config({"method": "fedgwc", key: value})
    assert key in str(err.value) and "\n" not in str(err.value)


def test_the_round_the_docs_give_for_the_first_split_is_what_the_arithmetic_gives():
    """docs/baselines.md quotes docs/results/fedgwc_watch.json: the port's own functions,
    run alone, reproduce it (one loss model and seed, bit for bit), and it is far beyond
    both the bound that ignores W's change and the map's 100 rounds."""
    import importlib.util
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location(
        "fedgwc_watch", root / "benchmarks/fedgwc_watch.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    kept = json.loads((root / "docs/results/fedgwc_watch.json").read_text())
    n, m = kept["protocol"]["num-partitions"], kept["protocol"]["clients-per-round"]
    got = bench.first_fires("iid", 42, n, m, kept["eps"], kept["steps"], 10_000)
    assert got == kept["loss_models"]["iid"]["seeds"]["42"]
    assert kept["bound_without_change"] == 110 and kept["watch"] == 10
    assert min(kept["first_below_eps"]) > 1000  # the map runs 100 rounds, Table 1 300
