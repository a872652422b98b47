"""Pre-training end to end on a tiny budget, checkpoints round trip and refuse mismatches."""

import json

import numpy as np
import pytest
import torch
from conftest import tiny_pretrain_settings

from ripple_flwr.cli import pretrain as pretrain_vae
from ripple_flwr.router.checkpoint import check_settings, load_checkpoint
from ripple_flwr.router.pretrain import pretrain


@pytest.fixture(scope="module")
def trained(tiny_pretrained):
    return tiny_pretrained


def test_tiny_pretraining_beats_uniform(trained):
    _, _, report = trained
    assert report["routing_l1_heldout"] < 0.8 * report["routing_l1_heldout_uniform"]
    for a in ("0.1", "1.0"):
        assert report[f"routing_l1_real_a{a}"] < report[f"routing_l1_real_a{a}_uniform"]
        assert f"routing_l1_real_a{a}_mean_unmixing" in report
    # The job's wall time covers its two phases.
    assert report["pretrain_seconds"] >= report["bank_seconds"] + report["train_seconds"]
    json.dumps(report)


def test_checkpoint_round_trip(trained):
    tmp, ckpt, _ = trained
    loaded = load_checkpoint(tmp / "tiny-vae.pt", expected=ckpt.settings)
    x = torch.rand(5, ckpt.model.config.input_dim)
    torch.testing.assert_close(loaded.model.posterior(x), ckpt.model.posterior(x))
    np.testing.assert_array_equal(loaded.component_means, ckpt.component_means)
    assert loaded.settings == ckpt.settings


def test_mismatched_checkpoint_refused(trained):
    tmp, ckpt, _ = trained
    expected = {**ckpt.settings, "J": 2, "num_components": 6}
    with pytest.raises(ValueError, match=r"(?s)J: checkpoint has 3, run has 2.*num_components"):
        load_checkpoint(tmp / "tiny-vae.pt", expected=expected)
    check_settings(ckpt.settings, {**ckpt.settings, "dataset": "other"})  # not a matching key


def test_not_a_checkpoint_refused(tmp_path):
    bad = tmp_path / "bad.pt"
    torch.save({"weights": torch.zeros(1)}, bad)
    with pytest.raises(ValueError, match="not a ripple-flwr GMM-VAE checkpoint"):
        load_checkpoint(bad)
    with pytest.raises(FileNotFoundError, match="pretrain_vae.py"):
        load_checkpoint(tmp_path / "missing.pt")


def test_same_seed_same_checkpoint(trained, tmp_path):
    # Bit-for-bit on one device and one torch thread count (a float reduction split over
    # another number of threads rounds differently), whatever earlier tests set it to.
    tmp, _, _ = trained
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        runs = [
            pretrain(tiny_pretrain_settings(tmp), tmp_path / f"vae{i}.pt", progress=False)[0]
            for i in range(2)
        ]
    finally:
        torch.set_num_threads(threads)
    for k, v in runs[0].model.state_dict().items():
        torch.testing.assert_close(runs[1].model.state_dict()[k], v, rtol=0, atol=0)


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
    assert "-K/--num-components must be in [2, 100], got 1" in capsys.readouterr().err
