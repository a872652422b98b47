"""Pre-train Ripple's GMM-VAE router on synthetic clients (phase 1), standalone.

Writes the checkpoint the federation routes with, and a JSON report of
timings and routing errors (GMM-VAE vs the uniform and mean-unmixing
references, on held-out synthetic clients and on real clients).

    python pretrain_vae.py --dataset mnist-5k --output outputs/gmm_vae.pt
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import sys
from pathlib import Path

from ripple_flwr.data import available_datasets
from ripple_flwr.pretrain import PretrainSettings, TrainSettings, pretrain
from ripple_flwr.synthetic import ALPHA_DISTRIBUTIONS, BankSettings
from ripple_flwr.vae import SUPERVISED_DIVERGENCES, LossWeights


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    d, b, t, w = PretrainSettings(), BankSettings(), TrainSettings(), LossWeights()
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    g = p.add_argument_group("data")
    g.add_argument(
        "--dataset",
        default=d.dataset,
        choices=available_datasets(),
        help="dataset D_aux and the real test clients come from",
    )
    g.add_argument("--data-root", default=None, help="local root of the dataset files")
    g.add_argument(
        "--label-kind",
        default=d.label_kind,
        choices=["class", "domain"],
        help="what the clusters follow: class label, or domain (rotated-*)",
    )
    g.add_argument(
        "--aux-size",
        type=int,
        default=d.aux_size,
        help="size of the server's labelled auxiliary set D_aux",
    )
    g.add_argument(
        "--data-seed",
        type=int,
        default=d.data_seed,
        help="seed of the D_aux split (must equal the federation's data seed)",
    )
    g = p.add_argument_group("embedding")
    g.add_argument(
        "-K",
        "--num-components",
        type=int,
        default=d.num_components,
        help="number of GMM components / clusters K",
    )
    g.add_argument("-J", type=int, default=d.J, help="scattering scales")
    g.add_argument("-L", type=int, default=d.L, help="scattering orientations")
    g.add_argument(
        "-M",
        "--svd-rank",
        type=int,
        default=d.svd_rank,
        help="principal components in the prototype (ignored with --rho)",
    )
    g.add_argument(
        "--rho",
        "--explained-variance",
        dest="explained_variance",
        type=float,
        default=None,
        help="choose M per client by explained variance (0.90-0.99)",
    )
    g = p.add_argument_group("synthetic clients")
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
    g = p.add_argument_group("training")
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
    g = p.add_argument_group("run")
    g.add_argument(
        "--real-clients",
        type=int,
        default=d.real_clients,
        help="real clients per alpha for the routing report",
    )
    g.add_argument("--seed", type=int, default=d.seed, help="seed of training and the report")
    g.add_argument("--bank-seed", type=int, default=b.seed, help="seed of the synthetic bank")
    g.add_argument("--device", default=d.device, help="auto, cpu or cuda")
    g.add_argument("--output", default="outputs/gmm_vae.pt", help="checkpoint path")
    g.add_argument(
        "--report", default=None, help="JSON report path (default: checkpoint path with .json)"
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p.parse_args(argv)


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
        explained_variance=a.explained_variance,
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


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    try:
        settings = settings_from_args(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    _, report = pretrain(settings, args.output, progress=not args.no_progress)
    report["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    path = Path(args.report or Path(args.output).with_suffix(".json"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    summary = {k: v for k, v in report.items() if k not in ("history", "settings")}
    print(json.dumps(summary, indent=2))
    print(f"checkpoint: {args.output}\nreport: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
