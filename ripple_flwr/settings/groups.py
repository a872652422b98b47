"""The run's settings in groups: data, embedding, training, evaluation, robustness, outputs,
pre-training.

Each group is a frozen dataclass whose fields are run-config keys (dashes become
underscores), declared by :func:`~ripple_flwr.settings.options.option` with their one-line
doc and range, and whose values derived from them are its methods.
:class:`~ripple_flwr.settings.run.RunSettings` holds one of each.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, get_args

from ripple_flwr.settings.environment import machine_cache_root
from ripple_flwr.settings.options import ConfigError, field_option, option

Sampling = Literal["stratified", "uniform"]
Router = Literal["gmm-vae", "mean-unmixing"]
LabelKind = Literal["class", "domain", "joint"]
Refine = Literal["none", "hdb"]
ClientData = Literal["benchmark", "local"]
ClientConcepts = Literal["none", "fedrc"]  # data/federation.py: CLIENT_CONCEPTS
ScoreWeighting = Literal["clients", "examples"]
Tracker = Literal["none", "mlflow", "tensorboard", "wandb"]
SAMPLINGS: tuple[str, ...] = get_args(Sampling)
ROUTERS: tuple[str, ...] = get_args(Router)
LABEL_KINDS: tuple[str, ...] = get_args(LabelKind)
REFINES: tuple[str, ...] = get_args(Refine)
CLIENT_DATAS: tuple[str, ...] = get_args(ClientData)
TRACKERS: tuple[str, ...] = get_args(Tracker)
ROTATED_PREFIX = "rotated-"
PERMUTED_PREFIX = "permuted-"  # concept shift: four label permutations (data/permuted.py)
DERIVED_PREFIXES = (ROTATED_PREFIX, PERMUTED_PREFIX)
# The largest Dirichlet concentration (alpha, alpha-new): Dir(1e6) mixtures are uniform to
# about 0.1 %, IID in effect; far larger ones (1e308) overflow numpy's sampler.
MAX_ALPHA = 1e6
# Below this many test images per new client the results warn that a zero-shot score is
# noisy (a client's accuracy moves in steps of 1/n).
MIN_ZERO_SHOT_TEST_IMAGES = 20


def base_dataset_name(name: str) -> str:
    """A dataset's name without its ``rotated-`` or ``permuted-`` prefix, lower case: the
    registered one."""
    key = name.strip().lower()
    for prefix in DERIVED_PREFIXES:
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def class_list(text: str) -> tuple[str, ...]:
    """A comma-separated class list ("a, b, c") as a tuple; "" -> ()."""
    return tuple(c.strip() for c in text.split(",") if c.strip())


class _Group:
    """A settings group: every field checked against its declared range when it is built."""

    def __post_init__(self) -> None:
        check_fields(self)
        self._check()

    def _check(self) -> None:
        """The group's own rules across its fields (none by default)."""


def check_fields(group: Any) -> None:
    """Raise :class:`ConfigError` for the first field of ``group`` outside its range."""
    for f in fields(group):
        field_option(type(group), f).check(getattr(group, f.name))


@dataclass(frozen=True)
class DataSettings(_Group):
    """Which data, how it is split into clients, and how images are read."""

    dataset: str = option("mnist-5k", "a registered dataset (ripple_flwr.data)")
    data_root: str = option("", 'where dataset files live ("" = the loader\'s default)')
    client_data: ClientData = option(
        "benchmark",
        "benchmark (each SuperNode takes partition-id of dataset) | local (each SuperNode "
        "reads its own files, node config data=<path>; docs/own-data.md)",
    )
    aux_data: str = option(
        "",
        'the server\'s own labelled D_aux (ImageFolder, .npz or HF dataset; "" = carved from '
        "dataset)",
    )
    class_names: str = option(
        "", 'the run\'s classes, comma-separated ("" = the class folders of aux-data / dataset)'
    )
    image_size: int = option(
        0,
        "side every image is resized to (0 = the data's own size; must then be uniform)",
        low=0,
        high=4096,
    )
    channels: int = option(0, "image channels: 1 or 3 (0 = the data's own)", low=0, high=3)
    image_column: str = option("image", "image column of a Hugging Face dataset")
    label_column: str = option("label", "label column of a Hugging Face dataset")
    label_kind: LabelKind = option(
        "class",
        "clusters follow the class, the domain (rotated-*, permuted-* datasets), or both (joint: "
        "domain x class labels)",
    )
    num_partitions: int = option(
        0,
        "training clients (0 = the nodes that connect, less new-clients: in simulation the "
        "number of SuperNodes)",
        low=0,
        high=1_000_000,
    )
    new_clients: int = option(
        0, "held-out clients onboarded zero-shot after training", low=0, high=1_000_000
    )
    alpha_new: float = option(
        1.0,
        "Dirichlet concentration of the new clients (alpha_test; 1e6 = IID in effect)",
        low=0,
        high=MAX_ALPHA,
        low_open=True,
    )
    partition_size: int = option(200, "images per client (train + test)", low=2, high=10_000_000)
    new_partition_size: int = option(
        0,
        "images per new client (train + test; 0 = partition-size): more test images make the "
        "zero-shot figure's sampling error smaller",
        low=0,
        high=10_000_000,
    )
    partition_size_spread: float = option(
        1.0,
        "quantity skew: training clients' sizes vary about this many times around "
        "partition-size, log-uniformly, the same rows in all (1 = equal sizes)",
        low=1,
        high=1000,
    )
    alpha: float = option(
        0.1,
        "Dirichlet concentration of the client mixtures (1e6 = IID in effect)",
        low=0,
        high=MAX_ALPHA,
        low_open=True,
    )
    aux_size: int = option(
        1000, "the server's labelled auxiliary set D_aux", low=1, high=10_000_000
    )
    data_seed: int = option(
        0, "seed of D_aux, the partitions and the splits", low=0, high=2**32 - 1
    )
    client_concepts: ClientConcepts = option(
        "none",
        "concept shift per client: none, or fedrc (FedRC's Fashion-MNIST: each client, new ones "
        "too, keeps the labels (60%), or sees y -> C-1-y (20%) or y -> (y+1) mod C (20%))",
    )
    test_fraction: float = option(
        0.2,
        "share of each client's images held out for its evaluation",
        low=0,
        high=1,
        low_open=True,
        high_open=True,
    )

    def _check(self) -> None:
        if self.client_concepts != "none" and (
            self.client_data == "local" or self.dataset.startswith(PERMUTED_PREFIX)
        ):
            raise ConfigError(
                f"client-concepts={self.client_concepts} relabels a benchmark's clients; it "
                "needs client-data=benchmark and a dataset without concepts of its own (not "
                f"{PERMUTED_PREFIX}*): set client-concepts=none"
            )
        if self.channels == 2:
            raise ConfigError("channels must be 1 (grey), 3 (RGB) or 0 (the data's own), got 2")
        if self.new_partition_size == 1:
            raise ConfigError(
                "new-partition-size=1 leaves a new client no test image (each needs one to "
                "train its summary on and one to score): use 0 (= partition-size) or >= 2; "
                f"at least {MIN_ZERO_SHOT_TEST_IMAGES} test images per client give a steadier "
                "zero-shot figure"
            )

    @property
    def base_dataset(self) -> str:
        """The registered dataset under a ``rotated-`` or ``permuted-`` wrapper (lower-case)."""
        return base_dataset_name(self.dataset)

    @property
    def total_partitions(self) -> int:
        """Training clients plus held-out new clients: the number of SuperNodes."""
        return self.num_partitions + self.new_clients

    @property
    def partitions_from_nodes(self) -> bool:
        """``num-partitions = 0``: the run takes the nodes that connect."""
        return self.num_partitions == 0

    @property
    def data_root_or_none(self) -> str | None:
        return self.data_root or None

    @property
    def class_list(self) -> tuple[str, ...]:
        """``class-names`` ("a, b, c") as a tuple; "" -> ()."""
        return class_list(self.class_names)


@dataclass(frozen=True)
class EmbeddingSettings(_Group):
    """How a client summarises its data and is routed to clusters."""

    router: Router = option(
        "gmm-vae", "gmm-vae (WST embedding) | mean-unmixing (client mean image)"
    )
    num_components: int = option(10, "K, the number of clusters", low=2, high=100)
    J: int = option(3, "scattering scales", low=1, high=8)
    L: int = option(8, "scattering orientations", low=1, high=32)
    svd_rank: int = option(20, "principal components in the prototype", low=0, high=1000)
    explained_variance: float = option(
        0.0, "> 0: pick the rank by explained variance instead (0 = svd-rank)", low=0, high=1
    )
    embed_size: int = option(
        0,
        "side images are resized to before the WST (0 = the dataset's: 64 for office-home and "
        "gldv2-23k, else the image size)",
        low=0,
        high=1024,
    )
    refine: Refine = option("none", "none (K clusters) | hdb (Ripple-HDB: K_hat by HDBSCAN)")
    min_cluster_size: int = option(
        3, "HDBSCAN's smallest cluster, in clients", low=2, high=1_000_000
    )
    embedding_dp_epsilon: float = option(
        0.0,
        "> 0: clients release their embedding (epsilon, delta)-DP (0 = off; inf = no noise)",
        low=0,
        finite=False,
    )
    embedding_dp_delta: float = option(1e-5, "delta of that one release, in (0, 1)")
    embedding_dp_clip: float = option(
        0.0, "L2 clip of the projected embedding (0 = the server's public choice)", low=0
    )

    @property
    def explained_variance_or_none(self) -> float | None:
        return self.explained_variance if self.explained_variance > 0 else None


@dataclass(frozen=True)
class TrainingSettings(_Group):
    """The federated rounds and the clients' local training."""

    sampling: Sampling = option("stratified", "Ripple's client sampling: stratified | uniform")
    model: str = option("cnn", "a registered model: cnn | resnet9 | resnet18")
    pretrained: bool = option(
        False, "start resnet18 from torchvision's ImageNet weights (head replaced)"
    )
    pretrained_weights: str = option(
        "", 'file of those weights ("" = $TORCH_HOME/hub/checkpoints/resnet18-f37072fd.pth)'
    )
    num_server_rounds: int = option(40, "federated rounds", low=1, high=1_000_000)
    clients_per_round: int = option(10, "clients trained each round", low=1, high=1_000_000)
    local_epochs: int = option(1, "local epochs per round", low=1, high=1000)
    lr: float = option(0.01, "client SGD learning rate", low=0, low_open=True)
    momentum: float = option(0.9, "client SGD momentum", low=0, high=1, high_open=True)
    batch_size: int = option(32, "client batch size", low=1, high=65_536)
    server_lr: float = option(
        1.0, "eta_s: the server's step (Ripple's eq. 9, SCAFFOLD, FedAvgM)", low=0, low_open=True
    )
    seed: int = option(
        0, "model initialisation, client sampling, local shuffles", low=0, high=2**32 - 1
    )
    client_threads: int = option(
        1, "torch threads per client process (0 = torch's default)", low=0, high=1024
    )


@dataclass(frozen=True)
class EvaluationSettings(_Group):
    """How often and on whom the run is scored, and how the headline averages."""

    eval_every: int = option(
        5, "personalised evaluation every this many rounds (and last)", low=1, high=1_000_000
    )
    eval_fraction: float = option(
        1.0,
        "share of the clients each evaluation scores: a seeded sample, new each evaluation "
        "(1 = all)",
        low=0,
        high=1,
        low_open=True,
    )
    best_by_loss: bool = option(
        True, "also score every cluster model on new clients (a reference only)"
    )
    headline_weighting: ScoreWeighting = option(
        "clients",
        "final-accuracy averages clients (each weight 1) | examples (each client weighted by "
        "its test split, capped at 4x the median)",
    )


@dataclass(frozen=True)
class RobustnessSettings(_Group):
    """What the server refuses and how long it waits."""

    update_norm_factor: float = option(
        10.0, "drop a reply whose update norm > this x the round's median (0 = off)", low=0
    )
    max_update_norm: float = option(
        0.0, "drop a reply whose update norm is above this (0 = off)", low=0
    )
    max_failures: int = option(
        3, "rounds a client may fail in a row before it is not sampled", low=1, high=1_000_000
    )
    node_wait_timeout: float = option(
        60.0, "seconds to wait for the nodes", low=0, low_open=True, finite=False
    )
    round_timeout: float = option(
        600.0, "seconds to wait for the replies of one round", low=0, low_open=True, finite=False
    )

    def _check(self) -> None:
        if 0 < self.update_norm_factor <= 1:
            raise ConfigError(
                f"update-norm-factor={self.update_norm_factor} would drop honest updates above "
                "the round's median; use a value > 1 (default 10), or 0 to turn it off"
            )


@dataclass(frozen=True)
class OutputSettings(_Group):
    """Where results, checkpoints, trackers and caches go."""

    results_path: str = option(
        "", 'results JSON inside $RIPPLE_OUTPUT_DIR (default ./outputs); "" = a fresh name'
    )
    overwrite_results: bool = option(
        False, "replace an existing results file (and its .png / .run.pt)"
    )
    tracker: Tracker = option(
        "none",
        "send the finished run to an experiment tracker: none | mlflow | tensorboard | wandb "
        '(offline; pip install "ripple-flwr[track]"; docs/tracking.md)',
    )
    tracker_dir: str = option(
        "", 'the tracker\'s folder inside $RIPPLE_OUTPUT_DIR ("" = <output folder>/tracking)'
    )
    checkpoint_every: int = option(
        0,
        "save the server state (<results>.resume.npz) every N rounds (0 = off)",
        low=0,
        high=1_000_000,
    )
    resume: str = option(
        "auto",
        "auto (continue from <results>.resume.npz when checkpoint-every > 0 and it exists) | "
        "fresh | a <results>.resume.npz to continue from",
    )
    cache_dir: str = option("", '"" = $RIPPLE_CACHE_DIR or ~/.cache/ripple-flwr')

    def cache_root(self) -> Path:
        """``cache-dir``, else :func:`machine_cache_root`."""
        if self.cache_dir:
            return Path(self.cache_dir).expanduser()
        return machine_cache_root()


@dataclass(frozen=True)
class PretrainingSettings(_Group):
    """The GMM-VAE router: a checkpoint, or pre-training it here."""

    checkpoint: str = option("", 'GMM-VAE checkpoint; "" = pre-train one (cached on disk)')
    pretrain_bank_size: int = option(
        2000, "synthetic clients when pre-training here", low=1, high=1_000_000
    )
    pretrain_steps: int = option(
        1500, "GMM-VAE optimiser steps when pre-training here", low=1, high=10_000_000
    )
    pretrain_client_size: int = option(
        0, "images per synthetic client (0 = partition-size; else >= 2)", low=0, high=10_000_000
    )

    def _check(self) -> None:
        if self.pretrain_client_size == 1:
            raise ConfigError("pretrain-client-size must be 0 (= partition-size) or >= 2")

    def client_size(self, partition_size: int) -> int:
        """Images per synthetic client: ``pretrain-client-size``, else the clients' size."""
        return self.pretrain_client_size or partition_size

    @property
    def heldout_clients(self) -> int:
        """Synthetic clients held out to score the router: a tenth of the bank, 50..1000."""
        return max(50, min(1000, self.pretrain_bank_size // 10))

    @property
    def eval_every(self) -> int:
        """Steps between the router's held-out scores: a fifth of the steps, at most 500."""
        return max(1, min(500, self.pretrain_steps // 5))


GROUPS: dict[str, type] = {
    "data": DataSettings,
    "embedding": EmbeddingSettings,
    "training": TrainingSettings,
    "evaluation": EvaluationSettings,
    "robustness": RobustnessSettings,
    "outputs": OutputSettings,
    "pretraining": PretrainingSettings,
}
"""The groups by their attribute name on :class:`~ripple_flwr.settings.run.RunSettings`."""
