"""FedGWC's arithmetic, as the authors' server computes it (``davedleo/FedGWC``,
``agents/servers.py``, ``ServerFedGWC``; read at ``24d0716``).

- :func:`gaussian_rewards` (``_get_gaussian_rewards``): at each local step s, the mean
  and variance of the step's loss over the clients of one cluster sampled this round
  (weighted by their example counts); a client's reward is the mean over steps of
  ``exp(-(l_s - mu_s)^2 / (2 sigma_s^2))`` (1e-16 added to the variance).
- :func:`update_interactions` (``_update_W``): for every pair (i, j) of sampled members,
  ``W[i, j] <- (1 - a) W[i, j] + a r_i / sum r`` with ``a = m / K_c`` (the members sampled
  over the cluster's size); returns the mean squared change of the block, which the caller
  folds into a moving mean with the same ``a`` (:func:`moving_mse`, starting at 1); the
  cluster has converged once that mean stays below ``eps`` for :func:`watch_rounds` rounds
  in a row (``benchmarks/fedgwc_watch.py`` runs this arithmetic alone to find the round).
- :func:`affinity` (``_compute_P``): client i's vector is column i of W (min-max scaled over
  the whole matrix); ``P[i, j] = exp(-gamma ||x_i - x_j||^2)`` with entries i and j left out
  of both vectors; zero diagonal.
- :func:`best_split` (``_find_best_clusters``): for n = 2 .. min(K_c // m, 4) clusters,
  scikit-learn's spectral clustering of P (``cluster_qr``) scored by the Davies-Bouldin
  index on P's spectral embedding; the best n is kept if its score is below the limit.
"""

from __future__ import annotations

import warnings

import numpy as np

VARIANCE_FLOOR = 1e-16  # the authors' addition to every step's variance
MAX_SPLIT = 4  # the authors' hard-coded largest split of one cluster


def gaussian_rewards(losses: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Each client's reward from its steps' losses ``(clients, S)``, in (0, 1]."""
    losses = np.asarray(losses, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    mu = w @ losses
    var = w @ (losses - mu) ** 2 + VARIANCE_FLOOR
    return np.exp(-0.5 * (losses - mu) ** 2 / var).mean(axis=1)


def update_interactions(
    matrix: np.ndarray, members: np.ndarray, rewards: np.ndarray, rate: float
) -> float:
    """Move the sampled block of ``matrix`` (in place) towards the normalised rewards.

    ``members`` are the sampled clients' positions in the cluster; returns the block's mean
    squared change.
    """
    r = np.asarray(rewards, dtype=np.float64)
    block = np.ix_(members, members)
    old = matrix[block].copy()
    matrix[block] = (1.0 - rate) * old + rate * (r / r.sum())[:, None]
    return float(np.mean((matrix[block] - old) ** 2))


def moving_mse(mse: float, change: float, rate: float) -> float:
    """The moving mean of W's squared change, one round on: ``(1 - a) mse + a change``."""
    return (1.0 - rate) * mse + rate * change


def watch_rounds(num_clients: int, per_round: int) -> int:
    """Rounds in a row the moving mean must stay below ``eps``: ``round(N / m)``, at least 1,
    the rounds a client waits on average to be sampled once (the authors' ``round(K_c / m)``
    under their per-cluster sample)."""
    return max(1, round(num_clients / per_round))


def affinity(matrix: np.ndarray, gamma: float) -> np.ndarray:
    """P between the cluster's clients from their interaction vectors (columns of W)."""
    x = np.asarray(matrix, dtype=np.float64).T
    span = max(float(x.max() - x.min()), 1e-8)
    x = (x - x.min()) / span
    sq = (x**2).sum(axis=1)
    full = sq[:, None] + sq[None, :] - 2.0 * x @ x.T  # ||x_i - x_j||^2 over every entry
    diag = np.diag(x)
    # Leave entries i and j out of both vectors: subtract their two squared differences.
    cross = x[:, :].T  # cross[j, i] = x[i, j]
    drop = (diag[:, None] - cross) ** 2 + (x - diag[None, :]) ** 2
    dist = np.maximum(full - drop, 0.0)
    p = np.exp(-gamma * dist)
    np.fill_diagonal(p, 0.0)
    return p


def best_split(
    p: np.ndarray, per_round: int, seed: int, max_score: float
) -> tuple[np.ndarray | None, dict]:
    """The best split of one cluster by spectral clustering of ``p``, or ``None``.

    Returns the labels (``None``: keep it whole) and what was tried: the Davies-Bouldin
    score of each candidate number of clusters.
    """
    from sklearn.cluster import SpectralClustering
    from sklearn.manifold import SpectralEmbedding
    from sklearn.metrics import davies_bouldin_score

    n_clients = len(p)
    tried: dict[str, float] = {}
    best, best_score = None, max_score
    for n in range(2, min(n_clients // per_round + 1, MAX_SPLIT + 1)):
        with warnings.catch_warnings():  # a disconnected affinity graph warns and goes on
            warnings.simplefilter("ignore", UserWarning)
            emb = SpectralEmbedding(
                n_components=n, affinity="precomputed", random_state=seed
            ).fit_transform(p)
            labels = SpectralClustering(
                n_clusters=n,
                n_components=n,
                affinity="precomputed",
                assign_labels="cluster_qr",
                random_state=seed,
            ).fit_predict(p)
        if len(np.unique(labels)) < 2:
            continue
        score = float(davies_bouldin_score(emb, labels))
        tried[str(n)] = score
        if score < best_score:
            best, best_score = labels.astype(np.int64), score
    return best, {"scores": tried, "best": best_score if best is not None else None}
