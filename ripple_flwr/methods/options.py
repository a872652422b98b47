"""The options of the methods whose server reads them: run-config keys, declared once.

The registry entry of a method (:mod:`ripple_flwr.methods.registry`) lists them; its
strategy reads their values (``OPTION.of(settings)``). Both sides can import them without
importing a strategy or Flower. The options the clients' training rules read live beside
those rules (:mod:`ripple_flwr.training.personal`, :mod:`ripple_flwr.training.stateful`).
"""

from __future__ import annotations

from ripple_flwr.settings import Option

# -- FedAdam, FedYogi, FedAdagrad (Flower's FedOpt family) ---------------------------------
FEDOPT_ETA = Option(
    "fedopt-eta",
    float,
    0.01,
    "FedAdam/FedYogi/FedAdagrad: server learning rate",
    low=0,
    low_open=True,
)

FEDOPT_BETA1 = Option(
    "fedopt-beta1",
    float,
    0.9,
    "FedAdam/FedYogi: first-moment decay (paper)",
    low=0,
    high=1,
    high_open=True,
)

FEDOPT_BETA2 = Option(
    "fedopt-beta2",
    float,
    0.99,
    "FedAdam/FedYogi: second-moment decay (paper)",
    low=0,
    high=1,
    high_open=True,
)

FEDOPT_TAU = Option(
    "fedopt-tau",
    float,
    1e-3,
    "FedAdam/FedYogi/FedAdagrad: adaptivity (paper)",
    low=0,
    low_open=True,
)

# -- FedProx -------------------------------------------------------------------------------
PROXIMAL_MU = Option(
    "proximal-mu", float, 0.01, "FedProx: clients add mu/2 ||w - w_global||^2", low=0
)

# -- FedAvgM -------------------------------------------------------------------------------
FEDAVGM_MOMENTUM = Option(
    "fedavgm-momentum", float, 0.9, "FedAvgM: server momentum beta", low=0, high=1, high_open=True
)

# -- FedTrimmedAvg -------------------------------------------------------------------------
TRIMMED_BETA = Option(
    "trimmed-beta",
    float,
    0.2,
    "FedTrimmedAvg: share cut at each end",
    low=0,
    high=0.5,
    high_open=True,
)

# -- Krum ----------------------------------------------------------------------------------
KRUM_MALICIOUS = Option(
    "krum-malicious", int, 1, "Krum: malicious clients assumed per round", low=0, high=100_000
)

# -- pFedMe (the server's mixing; its client options are in ripple_flwr.training.personal) ---
PFEDME_BETA = Option(
    "pfedme-beta",
    float,
    1.0,
    "pFedMe: server mixing beta (1 = mean of local models)",
    low=0,
    high=2,
    low_open=True,
)

# -- IFCA ----------------------------------------------------------------------------------
IFCA_INIT_BALANCE = Option(
    "ifca-init-balance",
    float,
    0.0,
    "IFCA: re-draw the K initial models until each is chosen by >= this / K of the clients "
    "(the original: 0.4 at K=4; 0 = off, the default: measured no better)",
    low=0,
    high=1,
)

IFCA_INIT_DRAWS = Option(
    "ifca-init-draws",
    int,
    20,
    "IFCA: at most this many draws of the K initial models (then the most balanced is kept)",
    low=1,
    high=10_000,
)

# -- FeSEM ---------------------------------------------------------------------------------
FESEM_UPDATE_EVERY = Option(
    "fesem-update-every",
    int,
    10,
    "FeSEM: rounds between K-means reassignments of the clients (the authors' configs: 10)",
    low=1,
    high=1_000_000,
)

FESEM_POINTS = Option(
    "fesem-points",
    str,
    "model",
    "FeSEM: a client's K-means point: model (its last returned model's layer, the authors') "
    "or update (that model minus the centre it was sent)",
    choices=("model", "update"),
)

FESEM_KMEANS_ITERS = Option(
    "fesem-kmeans-iters",
    int,
    1,  # the authors' KmeanModel: one Lloyd iteration at every later reassignment
    "FeSEM: Lloyd iterations of each reassignment's K-means (the authors': 1; 0 = until it "
    "converges)",
    low=0,
    high=10_000,
)

# -- Ripple ----------------------------------------------------------------------------------
RIPPLE_STRAT_ORDER = Option(
    "strat-order",
    str,
    "rotation",
    "Ripple-Strat with more clusters than clients a round: rotation (each round starts one "
    "sample further along the clusters' mass order, so every cluster gets a client within "
    "ceil(K/S) rounds) or mass (the heaviest clusters every round, the earlier rule); the "
    "same sample when K <= clients-per-round",
    choices=("rotation", "mass"),
)

FESEM_SAMPLING = Option(
    "fesem-sampling",
    str,
    "global",
    "FeSEM: global (clients-per-round from the whole federation, every method's cost) or "
    "per-cluster (up to clients-per-round inside every cluster of 2+ members, the authors'; "
    "up to K times the cost)",
    choices=("global", "per-cluster"),
)

FESEM_LAYER = Option(
    "fesem-layer",
    str,
    "last",
    "FeSEM: what clients are clustered by: last (the last weight matrix, as the authors), "
    "all, or a model state-dict key",
)

# -- CFL -----------------------------------------------------------------------------------
CFL_WARMUP_FRACTION = Option(
    "cfl-warmup-fraction",
    float,
    0.2,
    "CFL: no split before round ceil(this x num-server-rounds) (paper: 200 of 1000 rounds)",
    low=0,
    high=1,
)

CFL_EPS1 = Option(
    "cfl-eps1",
    float,
    0.35,
    "CFL: split when the mean update norm is below this ... (reference code: 0.4)",
    low=0,
    low_open=True,
)

CFL_EPS2 = Option(
    "cfl-eps2",
    float,
    0.9,
    "CFL: ... and the largest client update norm above this (reference code: 1.6, never "
    "reached on the paper's protocol)",
    low=0,
    low_open=True,
)

CFL_MAX_SIMILARITY = Option(
    "cfl-max-similarity",
    float,
    1.0,
    "CFL: refuse a split whose largest cross-side cosine similarity is >= this (paper: 0.5; "
    "the reference code: no such test, 1.0)",
    low=-1,
    high=1,
)

CFL_MAX_CLUSTERS = Option(
    "cfl-max-clusters", int, 10, "CFL: at most this many clusters (paper: 10)", low=1, high=100
)

CFL_WEIGHTING = Option(
    "cfl-weighting",
    str,
    "examples",
    "CFL: how members' updates are weighted in the split test's mean and in each cluster's "
    "new model: examples (as every method here) or uniform (the reference code)",
    choices=("examples", "uniform"),
)

# -- FLUX ----------------------------------------------------------------------------------
FLUX_START_ROUND = Option(
    "flux-start-round",
    int,
    3,
    "FLUX: the clustering test runs from this round on (official: server_round >= 3)",
    low=1,
    high=1_000_000,
)

FLUX_ACCURACY_DELTA = Option(
    "flux-accuracy-delta",
    float,
    0.06,
    "FLUX: cluster once an accuracy increase between evaluations is below this (official th_round)",
    low=-1,
    high=1,
)

FLUX_LATEST_FRACTION = Option(
    "flux-latest-fraction",
    float,
    0.8,
    "FLUX: ... or at the latest after this fraction of the rounds (official: 0.8)",
    low=0,
    high=1,
)

FLUX_EPS_SCALING = Option(
    "flux-eps-scaling",
    float,
    1.0,
    "FLUX: DBSCAN eps = the knee of the nearest-neighbour distances x this (official: 1.0)",
    low=0,
    low_open=True,
    high=1e6,
)

FLUX_LATENT_DIM = Option(
    "flux-latent-dim",
    int,
    0,
    "FLUX: dimensions latent features are projected to (0: the number of classes, official)",
    low=0,
    high=200,
)
