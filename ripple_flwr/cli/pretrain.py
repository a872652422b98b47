"""Pre-train Ripple's GMM-VAE router on synthetic clients (phase 1), standalone.

Writes the checkpoint the federation routes with, and a JSON report of
timings and routing errors (GMM-VAE vs the uniform and mean-unmixing
references, on held-out synthetic clients and on real clients).

    python pretrain_vae.py --dataset mnist-5k --output outputs/gmm_vae.pt

For a run on the nodes' own data (``client-data = "local"``), pre-train on the
server's own labelled files with the run's ``aux-data``, ``class-names``,
``image-size``, ``channels`` and ``embed-size``:

    python pretrain_vae.py --aux-data /srv/aux --class-names cat,dog --output outputs/aux.pt

With the in-run pre-training's budget (``--bank-size`` = pretrain-bank-size, ``--steps`` =
pretrain-steps, ``--n-syn`` = pretrain-client-size or partition-size, ``--heldout-clients``,
``--eval-every``, ``--real-clients 20``, ``--seed``) the file is the one the run would write.

Every option is checked before any work (bank, training): a bad one ends
in one line, ``pretrain_vae.py: error: ...``, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ripple_flwr.cli.common import OneLineParser, UsageError, check_device
from ripple_flwr.cli.pretrain_bounds import check_numbers
from ripple_flwr.data import available_datasets, fold_labels, load_dataset, server_aux_split
from ripple_flwr.data.registry import base_name, embed_size_of
from ripple_flwr.router.pretrain import (
    PretrainSettings,
    aux_rows,
    aux_source,
    pretrain,
)
from ripple_flwr.router.synthetic import ALPHA_DISTRIBUTIONS, BankSettings
from ripple_flwr.router.training import TrainSettings
from ripple_flwr.router.vae import SUPERVISED_DIVERGENCES, LossWeights
from ripple_flwr.settings import RunSettings
from ripple_flwr.settings.groups import class_list
from ripple_flwr.wst.shapes import validate_scattering

# A D_aux component with fewer images cannot give a synthetic client two distinct rows.
MIN_AUX_PER_COMPONENT = 2


# The options this job shares with a federated run: flags, types, defaults, choices and help
# come from the run's declarations (ripple_flwr.settings), so the two cannot drift apart.
SHARED_SETTINGS = ("dataset", "data-root", "label-kind", "aux-size", "data-seed")
SHARED_SETTINGS += ("num-components", "J", "L", "svd-rank")
SHARED_SETTINGS += ("aux-data", "class-names", "image-size", "channels", "embed-size")
SHARED_SETTINGS += ("image-column", "label-column")
_DECLARED = {o.key: o for o in RunSettings.fields_as_options()}


def _setting(group, key: str, *short: str, help_extra: str = "", **over) -> None:
    """Add the run setting ``key`` to ``group`` as ``--key`` (and its short flags)."""
    opt = _DECLARED[key]
    flags = [*short, f"-{key}" if len(key) == 1 else f"--{key}"]
    kwargs = {"type": opt.type, "default": opt.default, "help": opt.doc + help_extra}
    if opt.choices:
        kwargs["choices"] = list(opt.choices)
    group.add_argument(*flags, **{**kwargs, **over})


def _data_options(g: argparse._ArgumentGroup) -> None:
    """The data options."""
    _setting(g, "dataset", choices=available_datasets())
    _setting(g, "data-root", default=None)
    _setting(g, "label-kind")
    _setting(g, "aux-size")
    _setting(g, "data-seed")
    _setting(g, "aux-data")
    _setting(g, "class-names")
    _setting(g, "image-size")
    _setting(g, "channels")
    _setting(g, "image-column")
    _setting(g, "label-column")


def _embedding_options(g: argparse._ArgumentGroup) -> None:
    """The embedding options."""
    _setting(g, "embed-size")
    _setting(g, "num-components", "-K")
    _setting(g, "J")
    _setting(g, "L")
    _setting(g, "svd-rank", "-M", help_extra=" (ignored with --rho)")
    g.add_argument(
        "--rho",
        "--explained-variance",
        dest="explained_variance",
        type=float,
        default=None,
        help="choose M per client by explained variance (0.90-0.99; 0 = off, use -M)",
    )


def _synthetic_clients_options(g: argparse._ArgumentGroup, d: Any, b: Any) -> None:
    """The synthetic clients options."""
    g.add_argument("--n-syn", type=int, default=b.client_size, help="images per synthetic client")
    g.add_argument(
        "--bank-size",
        type=int,
        default=b.num_clients,
        help="synthetic clients in the training bank",
    )
    g.add_argument(
        "--heldout-clients",
        type=int,
        default=d.heldout_clients,
        help="held-out synthetic clients for early stopping and the report",
    )
    g.add_argument("--alpha-low", type=float, default=b.alpha_low, help="smallest Dirichlet alpha")
    g.add_argument("--alpha-high", type=float, default=b.alpha_high, help="largest Dirichlet alpha")
    g.add_argument(
        "--alpha-dist",
        default=b.alpha_dist,
        choices=list(ALPHA_DISTRIBUTIONS),
        help="how alpha is drawn (the paper: uniform in [0.1, 5])",
    )
    g.add_argument(
        "--cache-dir",
        default=None,
        help="bank cache folder (default $RIPPLE_CACHE_DIR or ~/.cache/ripple-flwr/"
        "banks; '' disables)",
    )


def _training_options(g: argparse._ArgumentGroup, d: Any, t: Any, w: Any) -> None:
    """The training options."""
    g.add_argument("--steps", type=int, default=t.steps, help="optimiser steps (max)")
    g.add_argument("--batch-size", type=int, default=t.batch_size, help="batch size")
    g.add_argument("--lr", type=float, default=t.lr, help="AdamW learning rate")
    g.add_argument("--weight-decay", type=float, default=t.weight_decay, help="AdamW weight decay")
    g.add_argument(
        "--eval-every", type=int, default=t.eval_every, help="steps between held-out evaluations"
    )
    g.add_argument(
        "--patience",
        type=int,
        default=t.patience,
        help="evaluations without improvement before stopping",
    )
    g.add_argument(
        "--lr-schedule",
        default=t.lr_schedule,
        choices=["constant", "cosine"],
        help="learning-rate schedule over --steps",
    )
    g.add_argument(
        "--ema",
        type=float,
        default=t.ema,
        help="decay of the weight average that is evaluated and saved (0 = off)",
    )
    g.add_argument("--lambda-sup", type=float, default=w.lambda_sup, help="supervised weight")
    g.add_argument("--lambda-kl", type=float, default=w.lambda_kl, help="KL weight")
    g.add_argument("--lambda-rec", type=float, default=w.lambda_rec, help="reconstruction weight")
    g.add_argument(
        "--supervised",
        default=w.supervised,
        choices=SUPERVISED_DIVERGENCES,
        help="supervised term: KL(q||y) (paper) or KL(y||q)",
    )
    g.add_argument(
        "--prune",
        type=float,
        default=t.prune,
        help="zero cluster weights below this and renormalise",
    )
    g.add_argument("--latent-dim", type=int, default=d.latent_dim, help="d_z")


def _run_options(g: argparse._ArgumentGroup, d: Any, b: Any) -> None:
    """The run options."""
    g.add_argument(
        "--real-clients",
        type=int,
        default=d.real_clients,
        help="real clients per alpha for the routing report",
    )
    g.add_argument("--seed", type=int, default=d.seed, help="seed of training and the report")
    g.add_argument("--bank-seed", type=int, default=b.seed, help="seed of the synthetic bank")
    g.add_argument("--device", default=d.device, help="auto, cpu, cuda or cuda:N")
    g.add_argument("--output", default="outputs/gmm_vae.pt", help="checkpoint path")
    g.add_argument(
        "--report", default=None, help="JSON report path (default: checkpoint path with .json)"
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    """Every option, its default and help; ranges are in :mod:`.pretrain_bounds`."""
    d, b, t, w = PretrainSettings(), BankSettings(), TrainSettings(), LossWeights()
    p = OneLineParser(
        prog="pretrain_vae.py",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    _data_options(p.add_argument_group("data"))
    _embedding_options(p.add_argument_group("embedding"))
    _synthetic_clients_options(p.add_argument_group("synthetic clients"), d, b)
    _training_options(p.add_argument_group("training"), d, t, w)
    _run_options(p.add_argument_group("run"), d, b)
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options as given (argparse's checks only: types and choices)."""
    return build_parser().parse_args(argv)


def settings_from_args(a: argparse.Namespace) -> PretrainSettings:
    return PretrainSettings(
        dataset=a.dataset,
        data_root=a.data_root,
        label_kind=a.label_kind,
        aux_size=a.aux_size,
        data_seed=a.data_seed,
        num_components=a.num_components,
        J=a.J,
        L=a.L,
        svd_rank=a.svd_rank,
        explained_variance=a.explained_variance or None,  # 0 = off, as in a run
        aux_data=a.aux_data,
        class_names=class_list(a.class_names),
        image_size=a.image_size,
        channels=a.channels,
        embed_size=cli_embed_size(a),
        image_column=a.image_column,
        label_column=a.label_column,
        bank=BankSettings(
            num_clients=a.bank_size,
            client_size=a.n_syn,
            alpha_low=a.alpha_low,
            alpha_high=a.alpha_high,
            alpha_dist=a.alpha_dist,
            seed=a.bank_seed,
        ),
        heldout_clients=a.heldout_clients,
        train=TrainSettings(
            steps=a.steps,
            batch_size=a.batch_size,
            lr=a.lr,
            weight_decay=a.weight_decay,
            eval_every=a.eval_every,
            patience=a.patience,
            prune=a.prune,
            lr_schedule=a.lr_schedule,
            ema=a.ema,
            loss=LossWeights(a.lambda_sup, a.lambda_kl, a.lambda_rec, a.supervised),
        ),
        latent_dim=a.latent_dim,
        seed=a.seed,
        device=a.device,
        real_clients=a.real_clients,
        real_client_size=a.n_syn,
        cache_dir=a.cache_dir,
    )


def cli_embed_size(a: argparse.Namespace) -> int:
    """``--embed-size``, else what a run would take: the dataset's (64 for the photo sets)
    when D_aux is carved from it, the images' own size for the server's own files."""
    if a.embed_size or a.aux_data:
        return a.embed_size
    return embed_size_of(base_name(a.dataset)) or 0


def _check_options(a: argparse.Namespace) -> None:
    """The range of every numeric option (:mod:`.pretrain_bounds`) and the device; nothing
    is read or built."""
    problem = check_numbers(a, build_parser())
    if problem:
        raise UsageError(problem)
    check_device(a.device)
    if a.channels == 2:
        raise UsageError("--channels must be 1 (grey), 3 (RGB) or 0 (the data's own), got 2")


def _check_writable(path: Path, option: str, *, folder: bool = False) -> None:
    """Create the folder (``path``'s parent unless ``folder``) and write a scratch file there."""
    from ripple_flwr.io.paths import OutputPathError, check_output_path

    where = path if folder else path.parent
    if not folder and path.is_dir():
        raise UsageError(f"{option} {path} is a folder; give a file path (e.g. {path}/gmm_vae.pt)")
    try:
        check_output_path(path, option, folder=folder)
    except OutputPathError as err:
        raise UsageError(str(err)) from None
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=where, prefix=".ripple-write-test-"):
            pass
    except OSError as err:
        reason = err.strerror or str(err)
        raise UsageError(
            f"{option}: cannot write to {where} ({reason}); choose a folder you can write to"
        ) from err


def _one_class(aux_data: str, classes: tuple[str, ...]) -> None:
    """Refuse server files of a single class: the clusters need at least two."""
    name = classes[0] if classes else "?"
    if (Path(aux_data).expanduser() / name).is_dir():
        raise UsageError(
            f"--aux-data {aux_data} has one class folder ({name}); at least 2 are needed "
            "(the router learns clusters of classes): add a folder of images per other class"
        )
    raise UsageError(
        f"--aux-data {aux_data} holds images of one class ({name}); at least 2 are needed "
        "(the router learns clusters of classes): add labelled images of other classes"
    )


def _check_data(a: argparse.Namespace) -> None:
    """Options that depend on the dataset: J vs the image, D_aux vs the labels and the pool."""
    source = f"--aux-data {a.aux_data}" if a.aux_data else f"--dataset {a.dataset}"
    if a.data_root and not a.aux_data:  # before a loader blames the network or makes it
        root = Path(a.data_root).expanduser()
        if root.exists() and not root.is_dir():
            raise UsageError(
                f"--data-root {a.data_root} is a file; give the folder that holds the "
                f"dataset's files (or leave --data-root out for {a.dataset}'s default)"
            )
        if not root.exists():
            raise UsageError(
                f"--data-root {a.data_root} does not exist; give the folder that holds the "
                f"dataset's files (or leave --data-root out for {a.dataset}'s default)"
            )
    try:
        if a.aux_data:  # the server's own files, read as the run reads them
            dataset = aux_source(settings_from_args(a))
        else:
            dataset = load_dataset(a.dataset, a.data_root, image_size=a.image_size)
    except (OSError, ValueError, RuntimeError) as err:  # RuntimeError: torchvision's files
        message = " ".join(str(err).split()).replace("the `root` argument", "--data-root")
        message = message.replace(" You can use download=True to download it", "")
        raise UsageError(f"{source}: {message}") from err
    try:
        cluster, _ = dataset.cluster_labels(a.label_kind)
    except ValueError as err:
        raise UsageError(f"--label-kind {a.label_kind}: {err}") from err
    if a.aux_data and len(np.unique(cluster)) < 2:
        _one_class(a.aux_data, dataset.classes)
    shape = tuple(dataset.image_shape)
    side = cli_embed_size(a)
    try:
        validate_scattering(shape if not side else (shape[0], side, side), a.J, a.L)
    except ValueError as err:
        raise UsageError(f"-J/-L: {err}") from err
    if a.aux_data:
        ps = settings_from_args(a)
        aux, pool = aux_rows(ps, dataset, cluster)
        if len(aux) < a.num_components * MIN_AUX_PER_COMPONENT:
            raise UsageError(f"{source} holds {len(aux)} images; too few for -K {a.num_components}")
        a = argparse.Namespace(**{**vars(a), "dataset": a.aux_data})  # the messages below
    else:
        try:
            aux, pool = server_aux_split(cluster, a.aux_size, a.data_seed)
        except ValueError as err:
            raise UsageError(f"--aux-size: {err} for {a.dataset} ({a.label_kind} labels)") from err
    k = a.num_components
    per_component = np.bincount(fold_labels(cluster[aux], k), minlength=k)
    if per_component.min() < MIN_AUX_PER_COMPONENT:
        labels = len(np.unique(cluster))
        fix = (
            f"-K must be <= {labels}, the number of {a.label_kind} labels of {a.dataset}"
            if k > labels
            else f"raise --aux-size (now {a.aux_size})"
        )
        raise UsageError(
            f"--aux-size {a.aux_size} with -K {k} leaves component {int(per_component.argmin())} "
            f"with {int(per_component.min())} image(s) in D_aux (need >= "
            f"{MIN_AUX_PER_COMPONENT} each); {fix}"
        )
    if len(pool) < a.n_syn and not a.aux_data:
        raise UsageError(
            f"--n-syn {a.n_syn} is larger than the {len(pool)} images left outside D_aux for "
            "the real clients of the report; lower --n-syn or --aux-size"
        )


def validate(a: argparse.Namespace) -> PretrainSettings:
    """Every option, the output paths and the data they need, before any work.

    Raises :class:`UsageError` naming the option and the fix.
    """
    _check_options(a)
    output = Path(a.output).expanduser()
    report = Path(a.report).expanduser() if a.report else output.with_suffix(".json")
    if report.resolve() == output.resolve():
        raise UsageError(f"--report {report} is the checkpoint path; give another file")
    _check_writable(output, "--output")
    _check_writable(report, "--report")
    if a.cache_dir:
        _check_writable(Path(a.cache_dir).expanduser(), "--cache-dir", folder=True)
    try:
        settings = settings_from_args(a)
    except ValueError as err:
        raise UsageError(str(err)) from err
    _check_data(a)
    return settings


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        args = parse_args(argv)
    except SystemExit as stop:  # --help (0) or an argparse error (2), already printed
        return int(stop.code or 0)
    try:
        settings = validate(args)
    except UsageError as err:
        print(f"pretrain_vae.py: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    _, report = pretrain(settings, args.output, progress=not args.no_progress)
    report["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    path = Path(args.report or Path(args.output).with_suffix(".json"))
    path.write_text(json.dumps(report, indent=2))
    summary = {k: v for k, v in report.items() if k not in ("history", "settings")}
    print(json.dumps(summary, indent=2))
    print(f"checkpoint: {args.output}\nreport: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
