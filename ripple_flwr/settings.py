"""Typed run settings read from Flower's run config, validated before any expensive work.

Every knob of ``[tool.flwr.app.config]`` in pyproject.toml maps to one field
of :class:`RunSettings` (dashes become underscores). The ServerApp and every
ClientApp parse the same run config, so all nodes agree on the dataset, the
partitioning and the seeds without exchanging data.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

log = logging.getLogger("flwr.ripple")

Sampling = Literal["stratified", "uniform"]
Router = Literal["gmm-vae", "mean-unmixing"]
LabelKind = Literal["class", "domain"]
Refine = Literal["none", "hdb"]
SAMPLINGS: tuple[str, ...] = get_args(Sampling)
ROUTERS: tuple[str, ...] = get_args(Router)
LABEL_KINDS: tuple[str, ...] = get_args(LabelKind)
REFINES: tuple[str, ...] = get_args(Refine)

# Image shapes of the registry's datasets, to reject a too-large J before loading data.
_KNOWN_SHAPES = {
    "mnist-5k": (1, 28, 28),
    "mnist": (1, 28, 28),
    "fashion-mnist": (1, 28, 28),
    "cifar10": (3, 32, 32),
    "cifar100": (3, 32, 32),
}


class ConfigError(ValueError):
    """A run config that cannot work; raised before any data is loaded or model trained."""


@dataclass(frozen=True)
class RunSettings:
    """One Ripple run, as typed values (defaults: the paper's where they fit a CPU).

    Parameters
    ----------
    method : a registered method (:data:`ripple_flwr.app.registry.METHODS`).
    sampling : ``stratified`` (Ripple-Strat) | ``uniform`` (Ripple-Unif).
    router : ``gmm-vae`` (WST embedding) | ``mean-unmixing`` (client mean image).
    num_partitions : training clients.
    new_clients : held-out clients (partition ids after the training ones) that never
        train and are onboarded zero-shot after training; the SuperNodes number
        ``num_partitions + new_clients``.
    alpha_new : Dirichlet concentration of the new clients (alpha_test), drawn from
        data no training client holds.
    refine : ``none`` (K clusters) | ``hdb`` (Ripple-HDB: K_hat meta-clusters by HDBSCAN).
    min_cluster_size : HDBSCAN's smallest cluster, in clients (Ripple-HDB).
    best_by_loss : also score every cluster model on each new client and keep the
        lowest-loss one (the paper's oracle advantage for baselines; reference only).
    num_components : K, the number of clusters (>= 2).
    explained_variance : 0 means "use svd_rank".
    checkpoint : GMM-VAE checkpoint path; empty = pre-train (cached) with the run's settings.
    results_path : JSON results file inside the server's output folder (``$RIPPLE_OUTPUT_DIR``,
        default ``./outputs``); empty = ``<output folder>/ripple-<method>-<seed>-<time>.json``.
    overwrite_results : replace an existing results file (and its .png / .run.pt).
    checkpoint_every : save the server's whole state (``<results>.resume.npz``) every this
        many rounds and after the last (0: never).
    resume : a server state file to continue from (the run's other settings must match).
    eval_every : evaluate personalised models every this many rounds (and after the last).
    client_threads : torch threads per client process (0 = torch's default).
    proximal_mu : FedProx's mu (clients add mu/2 ||w - w_global||^2).
    update_norm_factor : a training reply whose update norm exceeds this many times the
        round's (low) median is dropped and named (0: off).
    max_update_norm : an absolute bound on a reply's update norm (0: off).
    trimmed_beta : FedTrimmedAvg's share cut at each end, in [0, 0.5).
    krum_malicious : Krum's assumed number of malicious clients per round.
    max_failures : training rounds a client may fail in a row before it is left out of
        sampling (it is sampled again once it answers an evaluation).
    fedopt_eta, fedopt_beta1, fedopt_beta2, fedopt_tau : the server optimiser of
        FedAdam / FedYogi / FedAdagrad (the paper: beta1 0.9, beta2 0.99, tau 1e-3).
    feddyn_alpha : FedDyn's alpha (the paper: 0.01).
    perfedavg_alpha, perfedavg_beta : Per-FedAvg's inner step (the paper: 0.01) and
        meta step (1e-3, as in common reference code).
    pfedme_lambda, pfedme_inner_steps, pfedme_personal_lr, pfedme_beta : pFedMe's
        lambda and K (the paper: 15, 5), the inner solver's step and the server's
        mixing beta (pFedMe's paper: 0.09 on MNIST, 1.0).
    cfl_warmup, cfl_eps1, cfl_eps2, cfl_max_clusters : CFL splits a cluster from round
        ``cfl_warmup`` on when its mean update norm < eps1 and its largest > eps2, up
        to ``cfl_max_clusters`` clusters (the paper's cap: 10).
    embedding_dp_epsilon, embedding_dp_delta, embedding_dp_clip : each client releases its
        embedding (epsilon, delta)-DP (Gaussian mechanism, one release; 0 = off); clip 0
        lets the server choose the bound from its public reference clients.
    """

    method: str = "ripple"
    sampling: Sampling = "stratified"
    router: Router = "gmm-vae"
    dataset: str = "mnist-5k"
    data_root: str = ""
    label_kind: LabelKind = "class"
    num_partitions: int = 20
    new_clients: int = 0
    alpha_new: float = 1.0
    partition_size: int = 200
    alpha: float = 0.1
    aux_size: int = 1000
    data_seed: int = 0
    test_fraction: float = 0.2
    num_components: int = 10
    J: int = 3
    L: int = 8
    svd_rank: int = 20
    explained_variance: float = 0.0
    model: str = "cnn"
    num_server_rounds: int = 40
    clients_per_round: int = 10
    local_epochs: int = 1
    lr: float = 0.01
    momentum: float = 0.9
    batch_size: int = 32
    server_lr: float = 1.0
    proximal_mu: float = 0.01
    fedopt_eta: float = 0.01
    fedopt_beta1: float = 0.9
    fedopt_beta2: float = 0.99
    fedopt_tau: float = 1e-3
    feddyn_alpha: float = 0.01
    perfedavg_alpha: float = 0.01
    perfedavg_beta: float = 1e-3
    pfedme_lambda: float = 15.0
    pfedme_inner_steps: int = 5
    pfedme_personal_lr: float = 0.09
    pfedme_beta: float = 1.0
    cfl_warmup: int = 60
    cfl_eps1: float = 0.35
    cfl_eps2: float = 0.9
    cfl_max_clusters: int = 10
    embedding_dp_epsilon: float = 0.0
    embedding_dp_delta: float = 1e-5
    embedding_dp_clip: float = 0.0
    update_norm_factor: float = 10.0
    trimmed_beta: float = 0.2
    krum_malicious: int = 1
    max_update_norm: float = 0.0
    max_failures: int = 3
    refine: Refine = "none"
    min_cluster_size: int = 3
    best_by_loss: bool = True
    eval_every: int = 5
    seed: int = 0
    checkpoint: str = ""
    pretrain_bank_size: int = 2000
    pretrain_steps: int = 1500
    pretrain_client_size: int = 0
    results_path: str = ""
    overwrite_results: bool = False
    checkpoint_every: int = 0
    resume: str = ""
    node_wait_timeout: float = 60.0
    round_timeout: float = 600.0
    client_threads: int = 1
    cache_dir: str = ""

    def __post_init__(self) -> None:
        self.validate()

    # -- parsing -----------------------------------------------------------------------
    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> RunSettings:
        """Parse Flower's run config (dashed keys, TOML scalars) into typed settings.

        Unknown keys are refused (a typo would otherwise silently keep a default);
        ints are accepted where floats are expected, never the reverse.
        """
        types = {f.name: _scalar_type(f.name) for f in fields(cls)}
        values: dict[str, Any] = {}
        unknown = []
        for key, raw in run_config.items():
            name = str(key).replace("-", "_")
            if name not in types:
                unknown.append(str(key))
                continue
            values[name] = _coerce(str(key), raw, types[name])
        if unknown:
            raise ConfigError(
                f"unknown run-config key(s) {', '.join(sorted(unknown))}; known: "
                + ", ".join(f.name.replace("_", "-") for f in fields(cls))
            )
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Dashed keys, as in pyproject.toml: what the results file records."""
        return {k.replace("_", "-"): v for k, v in asdict(self).items()}

    # -- validation --------------------------------------------------------------------
    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the key and the allowed values."""
        from ripple_flwr.app.registry import METHODS
        from ripple_flwr.data import available_datasets
        from ripple_flwr.training.models import available_models

        def choice(key: str, value: str, allowed) -> None:
            if value not in allowed:
                raise ConfigError(f"{key}={value!r} is not one of {', '.join(allowed)}")

        choice("method", self.method, tuple(METHODS))
        choice("sampling", self.sampling, SAMPLINGS)
        choice("router", self.router, ROUTERS)
        choice("label-kind", self.label_kind, LABEL_KINDS)
        choice("refine", self.refine, REFINES)
        if self.refine == "hdb" and not METHODS[self.method].routing_weights:
            with_w = [m for m, spec in METHODS.items() if spec.routing_weights]
            raise ConfigError(
                f"refine='hdb' clusters Ripple's routing weights; method={self.method!r} has "
                f"none. Use method={' or '.join(repr(m) for m in with_w)}, or refine='none'."
            )
        choice("dataset", self.dataset.strip().lower(), available_datasets())
        choice("model", self.model, available_models())
        if self.num_components < 2:
            raise ConfigError(f"num-components (K) must be >= 2, got {self.num_components}")
        for key, value, low in (
            ("num-partitions", self.num_partitions, 1),
            ("new-clients", self.new_clients, 0),
            ("min-cluster-size", self.min_cluster_size, 2),
            ("partition-size", self.partition_size, 2),
            ("aux-size", self.aux_size, 1),
            ("data-seed", self.data_seed, 0),
            ("J", self.J, 1),
            ("L", self.L, 1),
            ("svd-rank", self.svd_rank, 0),
            ("num-server-rounds", self.num_server_rounds, 1),
            ("clients-per-round", self.clients_per_round, 1),
            ("local-epochs", self.local_epochs, 1),
            ("batch-size", self.batch_size, 1),
            ("eval-every", self.eval_every, 1),
            ("seed", self.seed, 0),
            ("pretrain-bank-size", self.pretrain_bank_size, 1),
            ("pretrain-steps", self.pretrain_steps, 1),
            ("pretrain-client-size", self.pretrain_client_size, 0),
            ("client-threads", self.client_threads, 0),
            ("max-failures", self.max_failures, 1),
            ("checkpoint-every", self.checkpoint_every, 0),
            ("krum-malicious", self.krum_malicious, 0),
        ):
            if value < low:
                raise ConfigError(f"{key} must be >= {low}, got {value}")
        if self.pretrain_client_size == 1:
            raise ConfigError("pretrain-client-size must be 0 (= partition-size) or >= 2")
        if self.clients_per_round > self.num_partitions:
            raise ConfigError(
                f"clients-per-round={self.clients_per_round} exceeds num-partitions="
                f"{self.num_partitions}"
            )
        if not self.alpha > 0:
            raise ConfigError(f"alpha (Dirichlet concentration) must be > 0, got {self.alpha}")
        if not self.alpha_new > 0:
            raise ConfigError(
                f"alpha-new (new clients' Dirichlet) must be > 0, got {self.alpha_new}"
            )
        if not 0.0 < self.test_fraction < 1.0:
            raise ConfigError(f"test-fraction must be in (0, 1), got {self.test_fraction}")
        if not 0.0 <= self.explained_variance <= 1.0:
            raise ConfigError(
                f"explained-variance must be in [0, 1] (0 = use svd-rank), got "
                f"{self.explained_variance}"
            )
        if not self.lr > 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        if not 0.0 <= self.momentum < 1.0:
            raise ConfigError(f"momentum must be in [0, 1), got {self.momentum}")
        if not self.server_lr > 0:
            raise ConfigError(f"server-lr must be > 0, got {self.server_lr}")
        if not self.proximal_mu >= 0:
            raise ConfigError(f"proximal-mu must be >= 0, got {self.proximal_mu}")
        if not self.fedopt_eta > 0:
            raise ConfigError(
                f"fedopt-eta (server learning rate) must be > 0, got {self.fedopt_eta}"
            )
        for key, value in (
            ("fedopt-beta1", self.fedopt_beta1),
            ("fedopt-beta2", self.fedopt_beta2),
        ):
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"{key} must be in [0, 1), got {value}")
        for key, value in (
            ("update-norm-factor", self.update_norm_factor),
            ("max-update-norm", self.max_update_norm),
        ):
            if not (value >= 0 and value < float("inf")):
                raise ConfigError(f"{key} must be >= 0 (0 turns it off), got {value}")
        if not 0.0 <= self.trimmed_beta < 0.5:
            raise ConfigError(
                f"trimmed-beta (share cut at each end) must be in [0, 0.5), got {self.trimmed_beta}"
            )
        if self.method == "krum" and self.clients_per_round < 2 * self.krum_malicious + 3:
            raise ConfigError(
                f"Krum needs clients-per-round >= 2 x krum-malicious + 3 = "
                f"{2 * self.krum_malicious + 3}, got {self.clients_per_round}; lower "
                "krum-malicious or raise clients-per-round"
            )
        if 0 < self.update_norm_factor <= 1:
            raise ConfigError(
                f"update-norm-factor={self.update_norm_factor} would drop honest updates above "
                "the round's median; use a value > 1 (default 10), or 0 to turn it off"
            )
        if not self.fedopt_tau > 0:
            raise ConfigError(f"fedopt-tau (adaptivity) must be > 0, got {self.fedopt_tau}")
        for key, value in (
            ("feddyn-alpha", self.feddyn_alpha),
            ("perfedavg-alpha", self.perfedavg_alpha),
            ("perfedavg-beta", self.perfedavg_beta),
            ("pfedme-lambda", self.pfedme_lambda),
            ("pfedme-personal-lr", self.pfedme_personal_lr),
        ):
            if not (value > 0 and math.isfinite(value)):
                raise ConfigError(f"{key} must be a finite number > 0, got {value}")
        if self.pfedme_inner_steps < 1:
            raise ConfigError(f"pfedme-inner-steps must be >= 1, got {self.pfedme_inner_steps}")
        if not 0.0 < self.pfedme_beta <= 2.0:
            raise ConfigError(
                f"pfedme-beta (server mixing) must be in (0, 2] (1 = plain mean), got "
                f"{self.pfedme_beta}"
            )
        if self.embedding_dp_epsilon:
            from ripple_flwr.privacy.mechanism import check_dp_params

            try:
                check_dp_params(
                    self.embedding_dp_epsilon,
                    self.embedding_dp_delta,
                    self.embedding_dp_clip or 1.0,
                )
            except ValueError as err:
                raise ConfigError(str(err)) from err
            if not METHODS[self.method].needs_router or self.router != "gmm-vae":
                raise ConfigError(
                    f"embedding-dp-epsilon={self.embedding_dp_epsilon} protects the WST embedding, "
                    f"which only methods with the gmm-vae router send; method={self.method!r} "
                    f"router={self.router!r} sends none. Set embedding-dp-epsilon=0 or use "
                    "method='ripple' with router='gmm-vae'."
                )
        if self.cfl_warmup < 1:
            raise ConfigError(f"cfl-warmup must be >= 1 round, got {self.cfl_warmup}")
        if not (0 < self.cfl_eps1 < math.inf and 0 < self.cfl_eps2 < math.inf):
            raise ConfigError(
                f"cfl-eps1 and cfl-eps2 must be finite numbers > 0, got {self.cfl_eps1} and "
                f"{self.cfl_eps2}"
            )
        if self.cfl_max_clusters < 1:
            raise ConfigError(f"cfl-max-clusters must be >= 1, got {self.cfl_max_clusters}")
        for key, value in (
            ("node-wait-timeout", self.node_wait_timeout),
            ("round-timeout", self.round_timeout),
        ):
            if not value > 0:
                raise ConfigError(f"{key} must be > 0 seconds, got {value}")
        needed = self.aux_size + self.total_partitions * self.partition_size
        shape = _KNOWN_SHAPES.get(self.base_dataset)
        if self.base_dataset == "mnist-5k" and needed > 5000:
            raise ConfigError(
                f"mnist-5k has 5000 images: aux-size={self.aux_size} + (num-partitions="
                f"{self.num_partitions} + new-clients={self.new_clients}) x partition-size="
                f"{self.partition_size} = {needed}"
            )
        if shape is not None:
            self.check_image_shape(shape)

    def check_image_shape(self, image_shape: tuple[int, ...]) -> None:
        """Reject a scattering scale J too large for the images (kymatio needs 2**J < side)."""
        from ripple_flwr.wst.embedder import validate_scattering

        try:
            validate_scattering(tuple(int(s) for s in image_shape), self.J, self.L)
        except ValueError as err:
            raise ConfigError(str(err)) from err

    # -- derived -----------------------------------------------------------------------
    @property
    def base_dataset(self) -> str:
        key = self.dataset.strip().lower()
        return key[len("rotated-") :] if key.startswith("rotated-") else key

    @property
    def total_partitions(self) -> int:
        """Training clients plus held-out new clients: the number of SuperNodes."""
        return self.num_partitions + self.new_clients

    @property
    def summary_kind(self) -> str:
        """What a client sends in the one-shot round: ``embedding``, ``mean`` or ``none``."""
        from ripple_flwr.app.registry import METHODS

        if not METHODS[self.method].needs_router:
            return "none"
        return "mean" if self.router == "mean-unmixing" else "embedding"

    @property
    def explained_variance_or_none(self) -> float | None:
        return self.explained_variance if self.explained_variance > 0 else None

    @property
    def data_root_or_none(self) -> str | None:
        return self.data_root or None

    def federation_kwargs(self) -> dict[str, Any]:
        """Arguments of :func:`ripple_flwr.data.build_federation` (besides the dataset)."""
        kwargs: dict[str, Any] = {
            "num_partitions": self.num_partitions,
            "partition_size": self.partition_size,
            "alpha": float(self.alpha),
            "aux_size": self.aux_size,
            "num_components": self.num_components,
            "label_kind": self.label_kind,
            "test_fraction": float(self.test_fraction),
            "seed": self.data_seed,
        }
        if self.new_clients:  # absent when 0, so runs without new clients share a cache
            kwargs["new_partitions"] = self.new_clients
            kwargs["alpha_new"] = float(self.alpha_new)
        return kwargs

    def pretrain_settings(self):
        """The :class:`~ripple_flwr.router.pretrain.PretrainSettings` the run pre-trains with."""
        from ripple_flwr.router.pretrain import PretrainSettings, TrainSettings
        from ripple_flwr.router.synthetic import BankSettings

        client_size = self.pretrain_client_size or self.partition_size
        return PretrainSettings(
            dataset=self.dataset,
            data_root=self.data_root_or_none,
            label_kind=self.label_kind,
            aux_size=self.aux_size,
            data_seed=self.data_seed,
            num_components=self.num_components,
            J=self.J,
            L=self.L,
            svd_rank=self.svd_rank,
            explained_variance=self.explained_variance_or_none,
            bank=BankSettings(num_clients=self.pretrain_bank_size, client_size=client_size),
            heldout_clients=max(50, min(1000, self.pretrain_bank_size // 10)),
            train=TrainSettings(
                steps=self.pretrain_steps,
                eval_every=max(1, min(500, self.pretrain_steps // 5)),
            ),
            seed=self.seed,
            real_clients=20,
            real_client_size=client_size,
            cache_dir=str(self.cache_root() / "banks"),
        )

    def cache_root(self) -> Path:
        """``cache-dir``, else ``$RIPPLE_CACHE_DIR``, else ``~/.cache/ripple-flwr``."""
        if self.cache_dir:
            return Path(self.cache_dir).expanduser()
        return Path(os.environ.get("RIPPLE_CACHE_DIR", Path.home() / ".cache" / "ripple-flwr"))

    def key(self) -> str:
        """A short hash of all settings (in-process cache key)."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def _scalar_type(name: str) -> type:
    """The scalar type of a field (a Literal of strings is a str; its values are checked later)."""
    hint = get_type_hints(RunSettings)[name]
    if get_origin(hint) is Literal:
        return type(get_args(hint)[0])
    return hint


def _coerce(key: str, raw: Any, typ: type) -> Any:
    if typ is float and isinstance(raw, int | float) and not isinstance(raw, bool):
        return float(raw)
    if typ is int and isinstance(raw, float) and raw.is_integer():
        return int(raw)
    if typ is not bool and isinstance(raw, bool) or not isinstance(raw, typ):
        raise ConfigError(f"{key} must be {typ.__name__}, got {raw!r} ({type(raw).__name__})")
    return raw


def settings_from_context(run_config: Mapping[str, Any]) -> RunSettings:
    """Parse a run config once per process (the same config gives the same object)."""
    key = json.dumps(dict(run_config), sort_keys=True, default=str)
    cached = _PARSED.get(key)
    if cached is None:
        cached = RunSettings.from_run_config(run_config)
        _PARSED.clear()
        _PARSED[key] = cached
    return cached


_PARSED: dict[str, RunSettings] = {}
