"""Pre-training end to end on a tiny budget, checkpoints round trip and refuse mismatches."""

import json

import numpy as np
import pytest
import torch

import pretrain_vae
from ripple_flwr.pretrain import (
    PretrainSettings,
    TrainSettings,
    check_settings,
    load_checkpoint,
    pretrain,
)
from ripple_flwr.synthetic import BankSettings


def tiny_settings(tmp_path, **over) -> PretrainSettings:
    base = dict(
        dataset="mnist-5k",
        aux_size=300,
        bank=BankSettings(num_clients=600, client_size=40),
        heldout_clients=100,
        train=TrainSettings(steps=300, eval_every=100, patience=10),
        vae_hidden=(128, 64),
        latent_dim=8,
        real_clients=20,
        real_client_size=40,
        cache_dir=str(tmp_path / "cache"),
        device="cpu",
    )
    base.update(over)
    return PretrainSettings(**base)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pretrain")
    ckpt, report = pretrain(tiny_settings(tmp), tmp / "vae.pt", progress=False)
    return tmp, ckpt, report


def test_tiny_pretraining_beats_uniform(trained):
    _, _, report = trained
    assert report["routing_l1_heldout"] < 0.8 * report["routing_l1_heldout_uniform"]
    for a in ("0.1", "1.0"):
        assert report[f"routing_l1_real_a{a}"] < report[f"routing_l1_real_a{a}_uniform"]
        assert f"routing_l1_real_a{a}_mean_unmixing" in report
    for key in ("pretrain_seconds", "bank_seconds", "train_seconds"):
        assert report[key] > 0
    json.dumps(report)


def test_checkpoint_round_trip(trained):
    tmp, ckpt, _ = trained
    loaded = load_checkpoint(tmp / "vae.pt", expected=ckpt.settings)
    x = torch.rand(5, ckpt.model.config.input_dim)
    torch.testing.assert_close(loaded.model.posterior(x), ckpt.model.posterior(x))
    np.testing.assert_array_equal(loaded.component_means, ckpt.component_means)
    assert loaded.settings == ckpt.settings


def test_mismatched_checkpoint_refused(trained):
    tmp, ckpt, _ = trained
    expected = {**ckpt.settings, "J": 2, "num_components": 4}
    with pytest.raises(ValueError, match=r"(?s)J: checkpoint has 3, run has 2.*num_components"):
        load_checkpoint(tmp / "vae.pt", expected=expected)
    check_settings(ckpt.settings, {**ckpt.settings, "dataset": "other"})  # not a matching key


def test_not_a_checkpoint_refused(tmp_path):
    bad = tmp_path / "bad.pt"
    torch.save({"weights": torch.zeros(1)}, bad)
    with pytest.raises(ValueError, match="not a ripple-flwr GMM-VAE checkpoint"):
        load_checkpoint(bad)
    with pytest.raises(FileNotFoundError, match="pretrain_vae.py"):
        load_checkpoint(tmp_path / "missing.pt")


def test_same_seed_same_checkpoint(trained, tmp_path):
    tmp, ckpt, _ = trained
    again, _ = pretrain(tiny_settings(tmp), tmp_path / "vae2.pt", progress=False)
    for k, v in ckpt.model.state_dict().items():
        torch.testing.assert_close(again.model.state_dict()[k], v, rtol=0, atol=0)


def test_cli_help_documents_every_option(capsys):
    with pytest.raises(SystemExit):
        pretrain_vae.parse_args(["--help"])
    out = capsys.readouterr().out
    for opt in (
        "--dataset",
        "--aux-size",
        "-K",
        "-J",
        "-L",
        "--svd-rank",
        "--rho",
        "--n-syn",
        "--bank-size",
        "--steps",
        "--batch-size",
        "--seed",
        "--device",
        "--output",
    ):
        assert opt in out


def test_cli_rejects_bad_settings(capsys):
    assert pretrain_vae.main(["-K", "1", "--no-progress"]) == 2
    assert "K (num-components) must be >= 2" in capsys.readouterr().err
