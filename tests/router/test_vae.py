"""GMM-VAE loss terms, pruning and routers on small hand-checked cases."""

import math

import numpy as np
import pytest
import torch

from ripple_flwr.router.routers import GMMVAERouter, MeanUnmixingRouter, UniformRouter, routing_l1
from ripple_flwr.router.vae import (
    GMMVAE,
    GMMVAEConfig,
    LossWeights,
    gmm_vae_loss,
    prune_weights,
    supervised_divergence,
)


def test_supervised_divergences_by_hand():
    q = torch.tensor([[0.5, 0.5]])
    y = torch.tensor([[0.25, 0.75]])
    kl_qy = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    kl_yq = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    assert supervised_divergence(q.log(), y, "kl_qy").item() == pytest.approx(kl_qy, rel=1e-4)
    assert supervised_divergence(q.log(), y, "kl_yq").item() == pytest.approx(kl_yq, rel=1e-4)
    # y = 0 in a coordinate stays finite (guarded) and punishes mass there.
    y0 = torch.tensor([[1.0, 0.0]])
    assert torch.isfinite(supervised_divergence(q.log(), y0, "kl_qy")).all()
    assert supervised_divergence(y0.clamp_min(1e-9).log(), y0, "kl_qy").item() < 1e-4


def test_loss_finite_and_trains_down():
    torch.manual_seed(0)
    model = GMMVAE(GMMVAEConfig(input_dim=20, num_components=3, hidden=(32, 16), latent_dim=4))
    x = torch.rand(64, 20)
    y = torch.softmax(torch.randn(64, 3), -1)
    model.set_normalisation(x)
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    losses = []
    for _ in range(60):
        loss, parts = gmm_vae_loss(model, x, y, LossWeights(), gen)
        assert torch.isfinite(loss) and set(parts) == {"rec", "kl_z", "kl_c", "sup"}
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    q = model.posterior(x)
    assert q.shape == (64, 3)
    torch.testing.assert_close(q.sum(-1), torch.ones(64))


def test_prune_weights_by_hand():
    w = np.array([[0.005, 0.495, 0.5], [0.004, 0.003, 0.003]])
    out = prune_weights(w, 0.01)
    np.testing.assert_allclose(out[0], [0.0, 0.495 / 0.995, 0.5 / 0.995])
    np.testing.assert_allclose(out[1], [1.0, 0.0, 0.0])  # all below: argmax kept


def test_mean_unmixing_recovers_exact_mixture():
    rng = np.random.default_rng(0)
    means = rng.random((4, 50))
    truth = np.array([[0.7, 0.3, 0.0, 0.0], [0.1, 0.2, 0.3, 0.4]])
    router = MeanUnmixingRouter(means)
    np.testing.assert_allclose(router.route(truth @ means), truth, atol=1e-8)
    assert router.needs == "mean"


def test_routers_validate_and_stay_in_simplex():
    torch.manual_seed(0)
    model = GMMVAE(GMMVAEConfig(input_dim=10, num_components=3, hidden=(8,), latent_dim=2))
    router = GMMVAERouter(model, prune=0.01)
    w = router.route(np.random.default_rng(0).random((5, 10)))
    np.testing.assert_allclose(w.sum(1), 1.0)
    assert np.all(w >= 0)
    with pytest.raises(ValueError, match=r"expected shape \(B, 10\)"):
        router.route(np.zeros((2, 11)))
    with pytest.raises(ValueError, match="NaN"):
        router.route(np.full((1, 10), np.nan))
    u = UniformRouter(4).route(np.zeros((3, 7)))
    np.testing.assert_allclose(u, 0.25)
    assert routing_l1(u, np.eye(4)[:3]) == pytest.approx(1.5)


def test_a_summary_outside_the_routers_domain_is_routed_uniformly():
    torch.manual_seed(0)
    model = GMMVAE(GMMVAEConfig(input_dim=10, num_components=3, hidden=(8,), latent_dim=2))
    rng = np.random.default_rng(0)
    bank = rng.normal(0.5, 0.1, size=(200, 10))
    model.feature_mean.copy_(torch.as_tensor(bank.mean(0)))
    model.feature_std.copy_(torch.as_tensor(bank.std(0)))
    router = GMMVAERouter(model, prune=0.01)
    direction = rng.normal(size=10)
    crafted = np.stack(
        [
            np.full(10, 3e38),  # finite, enormous
            np.full(10, -3e38),
            0.5 + 1000 * direction / np.linalg.norm(direction),  # a direction, far out
            bank[0],  # an honest one
        ]
    )
    w = router.route(crafted)
    np.testing.assert_allclose(w[:3], 1 / 3)  # no cluster is chosen from outside
    np.testing.assert_allclose(w[3], router.route(bank[:1])[0])
    reasons = router.out_of_domain(crafted)
    assert all("outside the router's domain" in r for r in reasons[:3]) and reasons[3] is None
    assert router.out_of_domain(bank) == [None] * len(bank)  # the bank itself is inside


def test_config_validation():
    with pytest.raises(ValueError, match="K"):
        GMMVAEConfig(input_dim=5, num_components=1)
    with pytest.raises(ValueError, match="supervised"):
        LossWeights(supervised="l2")


def test_training_settings_sized_for_the_device():
    from ripple_flwr.router.training import TrainSettings

    ref = TrainSettings()
    # At the reference batch the schedule is the paper's (Table 5, our 6,000 steps).
    same = TrainSettings(device_batch=64).for_device("cuda")
    assert (same.batch_size, same.steps, same.lr, same.eval_every, same.ema) == (
        64,
        6000,
        5e-4,
        500,
        0.999,
    )
    gpu = ref.for_device("cuda")
    # Same samples seen, evaluations and averaging per sample, lr by sqrt(batch ratio).
    ratio = gpu.batch_size / 64
    assert gpu.batch_size > 64 and gpu.steps * gpu.batch_size == 6000 * 64
    assert gpu.lr == pytest.approx(5e-4 * ratio**0.5)
    assert gpu.eval_every * gpu.batch_size == pytest.approx(500 * 64, rel=0.01)
    assert gpu.ema == pytest.approx(0.999**ratio)
    fixed = TrainSettings(steps=10, batch_size=32, device_batch=32)
    assert fixed.for_device("cuda") == fixed
    with pytest.raises(ValueError, match="device batch"):
        TrainSettings(device_batch=0)
