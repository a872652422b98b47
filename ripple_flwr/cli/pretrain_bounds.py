"""The range of every numeric option of ``pretrain_vae.py``, checked before any work.

One table, :data:`BOUNDS` (argparse ``dest`` -> :class:`Bound`), read by one checker,
:func:`check_numbers`. A flag that is also a run-config setting reuses that setting's
declared range (:mod:`ripple_flwr.settings`), so the CLI and a federated run cannot
disagree; every other bound states its reason, which the error and the generated table in
``docs/pretraining.md`` repeat. :data:`RELATIONS` are the bounds that depend on another flag.
Floats must be finite (no inf, no nan).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from ripple_flwr.router.pretrain import PretrainSettings
from ripple_flwr.router.synthetic import BankSettings
from ripple_flwr.router.training import TrainSettings
from ripple_flwr.router.vae import LossWeights
from ripple_flwr.settings import ConfigError, Option, RunSettings

_RUN = {o.key: o for o in RunSettings.fields_as_options()}
_P, _B, _T, _W = PretrainSettings(), BankSettings(), TrainSettings(), LossWeights()
# The batch a CPU or GPU trains with; --batch-size only sets the schedule it is scaled from
# (TrainSettings.for_device keeps the samples seen, --steps x --batch-size).
DEVICE_BATCH = max(_T.for_device(d).batch_size for d in ("cpu", "cuda"))
# The report's real clients hold all their images at once (per alpha): 100x the default
# 100 clients x 200 images, 6.3 GB of 28x28 float32 images.
MAX_REAL_IMAGES = 100 * _P.real_clients * _P.real_client_size


@dataclass(frozen=True)
class Bound:
    """A flag's type, default and range (an :class:`Option`), and why the range is so."""

    option: Option
    why: str

    def text(self) -> str:
        """The range in words: ``a finite number in (0, 1]``, ``in [1, 32]``."""
        finite = "a finite number " if self.option.type is float and self.option.finite else ""
        return finite + self.option.range_text()


def _run(setting: str, default: object = None, why: str = "", **over: object) -> Bound:
    """The run setting's own range (``default``/``over``: where the flag differs)."""
    opt = _RUN[setting]
    if default is not None or over:
        opt = replace(opt, default=opt.default if default is None else default, **over)
    return Bound(opt, why or f"as run-config {setting}")


def _own(dest: str, typ: type, default: object, why: str, **bounds: object) -> Bound:
    return Bound(Option(dest.replace("_", "-"), typ, default, why, **bounds), why)


_LAMBDA = "a weight only rescales its loss term; 1e4 is 2,000x the paper's largest (5)"
_ALPHA = "Dir(1000) mixtures are within a few percent of uniform: larger changes nothing"
_STEPS = "it counts steps (or evaluations, at most one a step): as run-config pretrain-steps"
_SEED = "a numpy / torch seed, as run-config seed"

BOUNDS: dict[str, Bound] = {
    "aux_size": _run("aux-size"),
    "data_seed": _run("data-seed"),
    "num_components": _run("num-components"),
    "J": _run("J"),
    "L": _run("L"),
    "svd_rank": _run("svd-rank"),
    "explained_variance": _run("explained-variance"),  # None (not given) is not checked
    "n_syn": _run("pretrain-client-size", _B.client_size, low=2),
    "bank_size": _run("pretrain-bank-size", _B.num_clients),
    "heldout_clients": _own(
        "heldout_clients",
        int,
        _P.heldout_clients,
        "each also keeps its mean image: 1e5 of them are 314 MB at 28x28, 4.9 GB at 64x64x3",
        low=1,
        high=100_000,
    ),
    "alpha_low": _own("alpha_low", float, _B.alpha_low, _ALPHA, low=0, low_open=True, high=1000),
    "alpha_high": _own("alpha_high", float, _B.alpha_high, _ALPHA, low=0, low_open=True, high=1000),
    "steps": _run("pretrain-steps", _T.steps),
    "batch_size": _own(
        "batch_size",
        int,
        _T.batch_size,
        "one step's activations: 65,536 x 1,024 floats = 256 MiB per layer",
        low=1,
        high=65_536,
    ),
    "lr": _own(
        "lr",
        float,
        _T.lr,
        "AdamW moves each weight by about lr per step; 1 is 2,000x the paper's 5e-4",
        low=0,
        low_open=True,
        high=1,
    ),
    "weight_decay": _own(
        "weight_decay",
        float,
        _T.weight_decay,
        "AdamW scales each weight by 1 - lr x weight-decay per step: with lr <= 1 a shrink",
        low=0,
        high=1,
    ),
    "eval_every": _run("pretrain-steps", _T.eval_every, _STEPS, key="eval-every"),
    "patience": _run("pretrain-steps", _T.patience, _STEPS, key="patience"),
    "ema": _own(
        "ema",
        float,
        _T.ema,
        "a decay: 0 = off; at 1 the average would never move",
        low=0,
        high=1,
        high_open=True,
    ),
    "lambda_sup": _own("lambda_sup", float, _W.lambda_sup, _LAMBDA, low=0, high=1e4),
    "lambda_kl": _own("lambda_kl", float, _W.lambda_kl, _LAMBDA, low=0, high=1e4),
    "lambda_rec": _own("lambda_rec", float, _W.lambda_rec, _LAMBDA, low=0, high=1e4),
    "prune": _own(
        "prune",
        float,
        _T.prune,
        "a weight threshold: 1 would prune every cluster",
        low=0,
        high=1,
        high_open=True,
    ),
    "latent_dim": _own(
        "latent_dim",
        int,
        _P.latent_dim,
        f"no wider than the VAE's widest layer ({max(_P.vae_hidden)}): wider is no bottleneck",
        low=1,
        high=max(_P.vae_hidden),
    ),
    "real_clients": _own(
        "real_clients",
        int,
        _P.real_clients,
        "each is embedded for the report; 100x the default",
        low=1,
        high=100 * _P.real_clients,
    ),
    "seed": _run("seed"),
    "image_size": _run("image-size"),
    "channels": _run("channels"),
    "embed_size": _run("embed-size"),
    "bank_seed": _own("bank_seed", int, _B.seed, _SEED, low=0, high=2**32 - 1),
}


@dataclass(frozen=True)
class Relation:
    """A bound of ``dest`` that depends on other flags: ``rule`` (a format string of the
    arguments ``a``) holds when ``ok(a)``; ``fix`` says what to change."""

    dest: str
    rule: str
    ok: Callable[[argparse.Namespace], bool]
    why: str
    fix: str


_MAX_STEPS = int(_RUN["pretrain-steps"].high)

RELATIONS: tuple[Relation, ...] = (
    Relation(
        "alpha_high",
        ">= --alpha-low ({a.alpha_low})",
        lambda a: a.alpha_high >= a.alpha_low,
        "alpha is drawn from [--alpha-low, --alpha-high]",
        "raise --alpha-high or lower --alpha-low",
    ),
    Relation(
        "batch_size",
        "<= --bank-size ({a.bank_size})",
        lambda a: a.batch_size <= a.bank_size,
        "each step draws its batch from the bank: more would only repeat clients",
        "lower --batch-size or raise --bank-size",
    ),
    Relation(
        "steps",
        f"<= {_MAX_STEPS:,} x {DEVICE_BATCH} / --batch-size ({{a.batch_size}})",
        lambda a: a.steps * a.batch_size <= _MAX_STEPS * DEVICE_BATCH,
        f"the job keeps the samples seen at its batch of {DEVICE_BATCH}, so it trains --steps "
        f"x --batch-size / {DEVICE_BATCH} steps, at most run-config pretrain-steps allows",
        "lower --steps or --batch-size",
    ),
    Relation(
        "real_clients",
        f"<= {MAX_REAL_IMAGES:,} / --n-syn ({{a.n_syn}})",
        lambda a: a.real_clients * a.n_syn <= MAX_REAL_IMAGES,
        f"the report holds every real client's images at once: {MAX_REAL_IMAGES:,} images "
        "are 6.3 GB of 28x28 floats",
        "lower --real-clients or --n-syn",
    ),
)


def flag_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each option's ``dest`` -> its flags as the user types them (``-K/--num-components``)."""
    return {a.dest: "/".join(a.option_strings) for a in parser._actions if a.option_strings}


def _show(value: object) -> str:
    if value is None:
        return "unset"
    return f"{value:g}" if isinstance(value, float) else str(value)


def check_numbers(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str | None:
    """The first numeric option out of its range (``BOUNDS``, then ``RELATIONS``) as one
    sentence naming the flag, its value, the range, why and the fix; None if all are in range.

    An option left at None (``--rho`` not given) is not checked.
    """
    flags = flag_names(parser)
    for dest, bound in BOUNDS.items():
        value = getattr(args, dest)
        if value is None:
            continue
        try:
            bound.option.check(value)
        except ConfigError:
            default = parser.get_default(dest)
            return (
                f"{flags[dest]} must be {bound.text()}, got {_show(value)} ({bound.why}); "
                f"the default is {_show(default)}"
            )
    for rel in RELATIONS:
        if not rel.ok(args):
            value = getattr(args, rel.dest)
            return (
                f"{flags[rel.dest]} must be {rel.rule.format(a=args)}, got {_show(value)} "
                f"({rel.why}); {rel.fix}"
            )
    return None


def bounds_table(parser: argparse.ArgumentParser) -> str:
    """Markdown: every numeric flag, its default, its range and why (docs/pretraining.md)."""
    flags = flag_names(parser)
    rows = ["| flag | default | allowed | why this bound |", "|---|---|---|---|"]
    for dest, bound in BOUNDS.items():
        allowed, why = [bound.text()], [bound.why]
        for rel in RELATIONS:
            if rel.dest == dest:
                allowed.append(re.sub(r" \(\{a\.\w+\}\)", "", rel.rule))
                why.append(rel.why)
        default = _show(parser.get_default(dest))
        rows.append(f"| `{flags[dest]}` | `{default}` | {'; '.join(allowed)} | {'; '.join(why)} |")
    return "\n".join(rows)
