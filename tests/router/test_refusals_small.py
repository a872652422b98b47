"""No silent wrong results at the command line (issue 45): each a one-line refusal that names
the problem and the fix. The onboarding ones (a fallback to uniform weights, --strict, --out
under a file) are in test_onboarding.py, the zero-shot record's in test_zero_shot.py."""

from __future__ import annotations

import argparse
import os
import re

import pytest
import torch
from silos import DigitPool, write_silo
from test_pretrain_cli import one_error_line

from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.cli import pretrain as pretrain_vae
from ripple_flwr.io.paths import OutputPathError, check_output_path
from ripple_flwr.router.checkpoint import load_checkpoint
from ripple_flwr.runs.onboarding import load_model
from ripple_flwr.runs.saved_runs import load_run
from ripple_flwr.settings import ConfigError, RunSettings
from ripple_flwr.training.models import build_model
from ripple_flwr.training.pretrained import load_imagenet_weights

TORCH_ADVICE = ("weights_only", "file an issue", "Re-running", "will likely succeed")


# -- an output path under a file: one line naming the option and the path ----------------------
def test_an_output_under_a_file_names_the_option_and_the_path(tmp_path):
    blocker = tmp_path / "somefile.txt"
    blocker.write_text("not a folder")
    for folder in (False, True):
        with pytest.raises(OutputPathError) as err:
            check_output_path(blocker / "sub", "--out", folder=folder)
        assert str(err.value) == (
            f"--out: cannot write to {blocker / 'sub'} ({blocker} is a file, not a folder); "
            "choose another path"
        )
    with pytest.raises(OutputPathError, match=r"^--out .*somefile.txt is a file; name a folder"):
        check_output_path(blocker, "--out", folder=True)
    with pytest.raises(OutputPathError, match=r"^--json .* is a folder; name a file"):
        check_output_path(tmp_path, "--json")
    # Good paths pass and nothing is created on the way.
    deep = tmp_path / "new" / "deeper"
    assert check_output_path(deep, "--out", folder=True) == deep
    assert check_output_path(deep / "r.json", "--json") == deep / "r.json"
    assert check_output_path(blocker, "--json") == blocker  # an existing file is overwritten
    assert not (tmp_path / "new").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_output_in_a_read_only_folder_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(OutputPathError, match=r"^--out: cannot write to .*ro is not writable"):
            check_output_path(ro / "a" / "b", "--out", folder=True)
    finally:
        ro.chmod(0o700)


# -- pretrain_vae.py: one class folder, and a torchvision dataset that is not there -------------
def test_aux_data_of_one_class_folder_says_so(tmp_path, capsys, no_work):
    aux = write_silo(DigitPool(3), tmp_path / "aux", {"0": 10})
    argv = ["--aux-data", str(aux), "--output", str(tmp_path / "v.pt"), "--cache-dir", ""]
    for k in ([], ["-K", "2"]):
        assert pretrain_vae.main([*argv, *k, "--no-progress"]) == 2
        line = one_error_line(capsys)
        assert line == (
            f"pretrain_vae.py: error: --aux-data {aux} has one class folder (0); at least 2 "
            "are needed (the router learns clusters of classes): add a folder of images per "
            "other class"
        )
        assert "-K must be <=" not in line


def test_a_torchvision_dataset_missing_offline_is_one_line(tmp_path, capsys, monkeypatch, no_work):
    import torchvision.datasets as tvd

    class Offline:
        """CIFAR-10 on a machine without its files and without a network."""

        def __init__(self, root, train, download):
            if download:
                raise OSError("[Errno -2] Name or service not known")
            raise RuntimeError(
                "Dataset not found or corrupted. You can use download=True to download it"
            )

    monkeypatch.setattr(tvd, "CIFAR10", Offline)
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["--dataset", "cifar10", "--data-root", str(empty), "--output", str(tmp_path / "v.pt")]
    assert pretrain_vae.main([*argv, "--cache-dir", "", "--no-progress"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("pretrain_vae.py: error: --dataset cifar10: could not load 'cifar10' ")
    assert "ROOT/cifar-10-batches-py/" in line and f"ROOT = {empty}" in line
    assert "set it with --data-root or RIPPLE_DATA_ROOT" in line
    assert "download=True" not in line


# -- a corrupt or foreign .pt: one line, the file, what to do, none of torch's advice -----------
def bad_files(tmp_path) -> dict[str, object]:
    good = tmp_path / "good.pt"
    torch.save({"a": torch.zeros(3)}, good)
    files = {
        "garbage": b"not a torch file",
        "truncated": good.read_bytes()[:200],
        "empty": b"",
    }
    out = {}
    for name, data in files.items():
        (tmp_path / f"{name}.pt").write_bytes(data)
        out[name] = tmp_path / f"{name}.pt"
    pickled = tmp_path / "pickled.pt"  # objects beyond tensors: weights_only refuses them
    torch.save({"a": argparse.Namespace(x=1)}, pickled)
    out["pickled"] = pickled
    return out


LOADERS = {
    "GMM-VAE checkpoint": (load_checkpoint, "pretrain_vae.py --output"),
    "saved run": (load_run, "re-create it by running the federation again"),
    "onboarded model": (load_model, "python onboard.py"),
    "the resnet18 ImageNet weights": (
        lambda p: load_imagenet_weights(
            build_model("resnet18", (3, 32, 32), 10, pretrained=True), p
        ),
        "resnet18-f37072fd.pth",
    ),
}


@pytest.mark.parametrize("what", list(LOADERS))
def test_a_bad_torch_file_is_one_line_without_torchs_advice(what, tmp_path):
    load, fix = LOADERS[what]
    for name, path in bad_files(tmp_path).items():
        with pytest.raises(ValueError) as err:
            load(path)
        text = str(err.value)
        assert "\n" not in text, text
        assert text.startswith(f"cannot read {what} {path}: "), text
        assert "not a valid" in text and fix in text, text
        if name == "pickled":
            assert "(argparse.Namespace)" in text and "could run code from the file" in text
        else:
            assert "corrupted, truncated" in text
        for advice in TORCH_ADVICE:
            assert advice not in text, text
        assert err.value.__cause__ is None  # torch's own message is not chained either


# -- run config: a typo gets a "did you mean", not a hundred keys --------------------------------
def test_an_unknown_key_gets_the_nearest_known_one():
    with pytest.raises(ConfigError) as err:
        parse_run_config({"alpah": 0.5})
    text = str(err.value)
    assert text == (
        "unknown run-config key 'alpah': did you mean 'alpha'? "
        "(every key, with its range: docs/configuration.md)"
    )
    with pytest.raises(ConfigError, match="'num_partitions': did you mean 'num-partitions'"):
        RunSettings.from_run_config({"num_partitions": 3})
    with pytest.raises(ConfigError) as err:
        RunSettings.from_run_config({"zzzzzz": 1, "lrr": 0.1})
    text = str(err.value)
    assert text.startswith("unknown run-config keys 'lrr' (did you mean 'lr'?), 'zzzzzz'; ")
    assert len(text) < 200 and "proximal-mu" not in text  # no list of every key


# -- Dirichlet concentrations: a huge one is refused at parse time --------------------------------
@pytest.mark.parametrize("key", ["alpha", "alpha-new"])
def test_a_huge_alpha_is_refused_with_its_range(key):
    for huge in (1e308, 1e7):
        with pytest.raises(ConfigError) as err:
            parse_run_config({key: huge})
        assert str(err.value) == (
            f"{key} must be a finite number in (0, 1000000], got {float(huge)}"
        )
    assert parse_run_config({key: 1e6}).to_dict()[key] == 1e6  # IID in effect: accepted
    assert re.search(
        r"1e6 = IID", next(o.doc for o in RunSettings.fields_as_options() if o.key == key)
    )
