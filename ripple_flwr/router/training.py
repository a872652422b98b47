"""Training the GMM-VAE router on a synthetic bank: the schedule and the loop.

:class:`TrainSettings` is the optimisation (paper Table 5, resized per device);
:func:`train_gmm_vae` keeps the state of lowest held-out routing error.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from ripple_flwr.router.routers import routing_l1
from ripple_flwr.router.synthetic import SyntheticBank
from ripple_flwr.router.vae import GMMVAE, GMMVAEConfig, LossWeights, gmm_vae_loss, prune_weights

log = logging.getLogger(__name__)

# Batch a device trains with unless ``device_batch`` says otherwise. A GPU step is
# launch-bound (6.6 ms at batch 64 and 7.1 ms at 256 on an H200), so larger batches
# are nearly free there; on a CPU a sample costs ~1.8x less at 256 than at 64 (the
# optimiser and the weight average run once per step). Held-out / real Dir(0.1) /
# real Dir(1.0) routing L1 at the same samples seen (H200, mnist-5k): batch 64
# 0.139 / 0.163 / 0.219, 128 0.138 / 0.156 / 0.218, 256 0.140 / 0.161 / 0.220,
# 512 0.143 / 0.166 / 0.222, 1024 0.152 / 0.173 / 0.225; half the samples at 256:
# 0.149 / 0.174 / 0.225 (so the samples seen are kept).
_DEVICE_BATCH = {"cpu": 256, "cuda": 256}


@dataclass(frozen=True)
class TrainSettings:
    """Optimisation of the GMM-VAE (paper Table 5: AdamW 5e-4, wd 1e-4, batch 64).

    ``steps``, ``lr``, ``eval_every`` and ``ema`` describe the schedule at
    ``batch_size``. The batch actually used is ``device_batch`` (None: the
    device's, see ``_DEVICE_BATCH``); when it differs, :meth:`for_device`
    keeps the samples seen (steps scaled down), evaluates and averages
    weights per sample, and scales the learning rate by sqrt(batch ratio).
    """

    steps: int = 6_000
    batch_size: int = 64
    lr: float = 5e-4
    weight_decay: float = 1e-4
    eval_every: int = 500
    patience: int = 6
    prune: float = 0.01
    lr_schedule: str = "cosine"
    ema: float = 0.999
    loss: LossWeights = field(default_factory=LossWeights)
    device_batch: int | None = None

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.eval_every < 1:
            raise ValueError("steps, batch size and eval-every must be >= 1")
        if self.device_batch is not None and self.device_batch < 1:
            raise ValueError(f"device batch must be >= 1, got {self.device_batch}")
        if not 0 <= self.prune < 1:
            raise ValueError(f"prune threshold must be in [0, 1), got {self.prune}")
        if self.lr_schedule not in ("constant", "cosine"):
            raise ValueError(
                f"lr schedule must be 'constant' or 'cosine', got {self.lr_schedule!r}"
            )
        if not 0 <= self.ema < 1:
            raise ValueError(f"ema decay must be in [0, 1), got {self.ema}")

    def for_device(self, device: str | torch.device) -> TrainSettings:
        """The same schedule at the batch ``device`` trains with (see the class doc)."""
        batch = self.device_batch or _DEVICE_BATCH.get(torch.device(device).type, self.batch_size)
        if batch == self.batch_size:
            return replace(self, device_batch=batch)
        ratio = batch / self.batch_size
        return replace(
            self,
            batch_size=batch,
            device_batch=batch,
            steps=max(1, round(self.steps / ratio)),
            lr=self.lr * ratio**0.5,
            eval_every=max(1, round(self.eval_every / ratio)),
            ema=self.ema**ratio,
        )


def _optimiser(
    model: GMMVAE, settings: TrainSettings
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler | None]:
    """AdamW (fused: ~3x cheaper on CPU, where it was half of each step) and its schedule."""
    opt = torch.optim.AdamW(
        model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay, fused=True
    )
    sched = None
    if settings.lr_schedule == "cosine":
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=settings.steps)
    return opt, sched


def heldout_l1(model: GMMVAE, x_val: torch.Tensor, targets: np.ndarray, prune: float) -> float:
    """The mean L1 routing error of ``model``'s pruned posterior on held-out clients."""
    model.eval()
    w = prune_weights(model.posterior(x_val).double().cpu().numpy(), prune)
    return routing_l1(w, targets)


def train_gmm_vae(
    bank: SyntheticBank,
    val_bank: SyntheticBank,
    config: GMMVAEConfig,
    settings: TrainSettings,
    *,
    seed: int = 0,
    device: str = "cpu",
    progress: bool = False,
) -> tuple[GMMVAE, list[dict]]:
    """Train on the bank, keep the state with the lowest held-out routing L1.

    The evaluated (and returned) weights are an exponential moving average
    of the trained ones (``ema``), and the learning rate follows a cosine
    decay: both remove most of the step-to-step noise of the held-out error.
    Stops early after ``patience`` evaluations without improvement. Every
    random choice (initialisation, batches, sampled components, noise) comes
    from ``seed``. Settings left at None are sized for ``device``
    (:meth:`TrainSettings.for_device`). Between evaluations nothing is read
    back from the device, so a GPU is never stalled by the loop.
    """
    settings = settings.for_device(device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GMMVAE(config)
    model.set_normalisation(bank.embeddings)
    model.to(device)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    x = torch.from_numpy(bank.embeddings).to(device)
    y = torch.from_numpy(bank.targets).to(device)
    x_val = torch.from_numpy(val_bank.embeddings).to(device)
    opt, sched = _optimiser(model, settings)
    averaged = copy.deepcopy(model) if settings.ema > 0 else model
    trained, kept = list(model.parameters()), list(averaged.parameters())
    history: list[dict] = []
    best = (float("inf"), copy.deepcopy(averaged.state_dict()), 0)
    stale = 0
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=settings.steps, desc="GMM-VAE", unit="step")
    running: dict[str, torch.Tensor] = {}
    for step in range(1, settings.steps + 1):
        model.train()
        idx = torch.randint(len(x), (settings.batch_size,), generator=gen, device=device)
        loss, parts = gmm_vae_loss(model, x[idx], y[idx], settings.loss, generator=gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        if averaged is not model:
            # Warm-up of the decay (as TensorFlow's EMA with num_updates): early
            # steps are not averaged with the random initialisation.
            decay = min(settings.ema, (1 + step) / (10 + step))
            with torch.no_grad():
                torch._foreach_lerp_(kept, trained, 1.0 - decay)
        for k, v in parts.items():
            running[k] = running[k] + v if k in running else v
        if bar is not None:
            bar.update(1)
        if step % settings.eval_every == 0 or step == settings.steps:
            l1 = heldout_l1(averaged, x_val, val_bank.targets, settings.prune)
            n = step - (history[-1]["step"] if history else 0)
            means = {k: float(v) / n for k, v in running.items()}
            history.append({"step": step, "val_l1": l1, **means})
            running = {}
            if bar is not None:
                bar.set_postfix(val_l1=f"{l1:.3f}")
            if l1 < best[0] - 1e-4:
                best, stale = (l1, copy.deepcopy(averaged.state_dict()), step), 0
            else:
                stale += 1
                if stale >= settings.patience:
                    log.info("early stop at step %d (best %.4f at %d)", step, best[0], best[2])
                    break
    if bar is not None:
        bar.close()
    model.load_state_dict(best[1])
    model.eval()
    return model, history
