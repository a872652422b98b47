"""Saved runs and GMM-VAE checkpoints check the SHA-256 of their own content on load."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from ripple_flwr.cli import onboard
from ripple_flwr.io.integrity import HASH_KEY, IntegrityError, content_sha256, seal, verify
from ripple_flwr.router.checkpoint import load_checkpoint, save_checkpoint
from ripple_flwr.router.vae import GMMVAE, GMMVAEConfig
from ripple_flwr.runs.saved_runs import SavedRun, load_run, save_run
from ripple_flwr.training.models import build_model, get_state

SHAPE = (1, 28, 28)


def flip(path, offset: int, n: int = 200) -> None:
    """XOR ``n`` bytes of the file from ``offset`` (what a bad disk or transfer does)."""
    data = bytearray(path.read_bytes())
    assert 0 <= offset and offset + n <= len(data)
    for i in range(offset, offset + n):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def offset_of(path, tensor: torch.Tensor) -> int:
    """Where the tensor's raw bytes start in a torch.save archive (stored uncompressed)."""
    needle = tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()[:64]
    offset = path.read_bytes().find(needle)
    assert offset >= 0, "tensor bytes not found in the file"
    return offset


@pytest.fixture
def run_file(tmp_path):
    """A saved FedAvg-style run (one global CNN, router none)."""
    torch.manual_seed(0)
    state = get_state(build_model("cnn", SHAPE, 10))
    run = SavedRun(
        cluster_states={k: v[None] for k, v in state.items()},
        model="cnn",
        image_shape=SHAPE,
        num_classes=10,
        router="none",
        settings={"method": "fedavg", "seed": 0},
    )
    return save_run(tmp_path / "run.run.pt", run)


@pytest.fixture
def checkpoint_file(tmp_path):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GMMVAE(GMMVAEConfig(input_dim=1953, num_components=4, hidden=(64, 32)))
    path = tmp_path / "vae.pt"
    settings = {"checkpoint_version": 1, "image_shape": list(SHAPE), "J": 3, "L": 8}
    save_checkpoint(path, model, np.zeros((4, 784), np.float32), settings)
    return path


def largest_tensor(payload_tensors: dict) -> torch.Tensor:
    return max(payload_tensors.values(), key=lambda t: t.numel())


# -- the hash itself -----------------------------------------------------------------------
def test_content_hash_is_canonical_and_sensitive():
    a = {"w": torch.arange(6.0).reshape(2, 3), "cfg": {"x": 1, "y": [1.5, None, "s"]}}
    b = {"cfg": {"y": [1.5, None, "s"], "x": 1}, "w": torch.arange(6.0).reshape(2, 3)}
    assert content_sha256(a) == content_sha256(b)  # key order does not matter
    changed = [
        {**a, "w": torch.arange(6.0).reshape(3, 2)},  # same bytes, other shape
        {**a, "w": torch.arange(6, dtype=torch.float64).reshape(2, 3)},  # other dtype
        {**a, "cfg": {"x": True, "y": [1.5, None, "s"]}},  # 1 vs True
        {**a, "cfg": {"x": 1, "y": [1.5, "s"]}},
        {**a, "cfg": {"x": 1.0, "y": [1.5, None, "s"]}},  # 1 vs 1.0
    ]
    assert len({content_sha256(p) for p in [a, *changed]}) == len(changed) + 1
    sealed = seal(a)
    assert verify(sealed, "x", "fix") and content_sha256(sealed) == sealed[HASH_KEY]
    assert verify(a, "x", "fix") is False  # no hash stored
    sealed["w"] = sealed["w"].clone()
    sealed["w"][0, 0] = 0.5
    with pytest.raises(IntegrityError, match="x is corrupted or was modified.*; fix"):
        verify(sealed, "x", "fix")
    with pytest.raises(TypeError, match="cannot hash a object"):
        content_sha256({"o": object()})


# -- saved runs ----------------------------------------------------------------------------
def test_saved_run_with_200_flipped_weight_bytes_is_refused(run_file):
    payload = torch.load(run_file, weights_only=True)
    assert isinstance(payload[HASH_KEY], str) and len(payload[HASH_KEY]) == 64
    big = largest_tensor(payload["cluster_states"])
    flip(run_file, offset_of(run_file, big) + 1000)
    # torch alone notices nothing: it loads, with different weights.
    damaged = largest_tensor(torch.load(run_file, weights_only=True)["cluster_states"])
    assert not torch.equal(damaged, big)
    with pytest.raises(IntegrityError, match=r"saved run .*run\.run\.pt is corrupted or was"):
        load_run(run_file)


@pytest.mark.parametrize("where", ["middle", "truncated"])
def test_saved_run_damaged_elsewhere_is_refused(run_file, where):
    size = run_file.stat().st_size
    if where == "middle":
        flip(run_file, size // 2)
    else:
        run_file.write_bytes(run_file.read_bytes()[: size // 2])
    with pytest.raises(ValueError, match="corrupted"):
        load_run(run_file)


def test_saved_run_edit_without_rehash_is_refused(run_file):
    payload = torch.load(run_file, weights_only=True)
    payload["settings"]["seed"] = 1
    torch.save(payload, run_file)
    with pytest.raises(IntegrityError, match="corrupted or was modified"):
        load_run(run_file)
    del payload[HASH_KEY]
    torch.save(payload, run_file)
    with pytest.raises(IntegrityError, match="content hash is missing"):
        load_run(run_file)


def test_version_1_run_is_refused_unless_allowed_then_upgraded(run_file):
    payload = torch.load(run_file, weights_only=True)
    del payload[HASH_KEY]
    payload["version"] = 1
    torch.save(payload, run_file)
    with pytest.raises(ValueError, match="format version 1, written before .* allow_unverified"):
        load_run(run_file)
    run = load_run(run_file, allow_unverified=True)
    save_run(run_file, run)  # the upgrade the message suggests
    again = load_run(run_file)
    assert again.settings == run.settings
    assert torch.load(run_file, weights_only=True)["version"] == 2


def test_onboard_cli_refuses_a_damaged_run_in_one_line(run_file, tmp_path, capsys):
    images = tmp_path / "client.npy"
    np.save(images, np.random.default_rng(0).random((20, *SHAPE), dtype=np.float32))
    payload = torch.load(run_file, weights_only=True)
    flip(run_file, offset_of(run_file, largest_tensor(payload["cluster_states"])) + 1000)
    out = tmp_path / "client.model.pt"
    assert onboard.main([str(run_file), "--images", str(images), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == "" and not out.exists()
    assert len(err) == 1 and err[0].startswith("error: saved run "), err
    assert re.search(r"corrupted or was modified.*re-create it", err[0]), err[0]


# -- GMM-VAE checkpoints ---------------------------------------------------------------------
def test_checkpoint_round_trip_and_200_flipped_bytes_refused(checkpoint_file):
    ckpt = load_checkpoint(checkpoint_file)
    assert ckpt.settings["J"] == 3
    payload = torch.load(checkpoint_file, weights_only=True)
    flip(checkpoint_file, offset_of(checkpoint_file, largest_tensor(payload["state_dict"])) + 500)
    with pytest.raises(IntegrityError, match=r"(?s)GMM-VAE checkpoint .*vae\.pt is corrupted.*"):
        load_checkpoint(checkpoint_file)
    with pytest.raises(IntegrityError, match="pretrain_vae.py --output"):
        load_checkpoint(checkpoint_file, allow_unverified=True)  # a wrong hash is never allowed


def test_checkpoint_without_hash_is_refused_unless_allowed(checkpoint_file):
    payload = torch.load(checkpoint_file, weights_only=True)
    del payload[HASH_KEY]
    torch.save(payload, checkpoint_file)
    with pytest.raises(ValueError, match="carries no content hash.*pretrain_vae.py --output"):
        load_checkpoint(checkpoint_file)
    assert load_checkpoint(checkpoint_file, allow_unverified=True).settings["L"] == 8


def test_truncated_checkpoint_is_refused(checkpoint_file):
    data = checkpoint_file.read_bytes()
    checkpoint_file.write_bytes(data[: len(data) // 3])
    with pytest.raises(ValueError, match="cannot read GMM-VAE checkpoint .* corrupted, truncated"):
        load_checkpoint(checkpoint_file)


# -- loaded values checked for sense (issue 21, finding 8) -----------------------------------
# A re-sealed file passes the hash (it is no signature), so every loader checks what it
# reads: the keys its writer writes, the kind of every value, finite float tensors.
def one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text, text
    return text


def first_key(tensors: dict) -> str:
    return next(k for k, v in tensors.items() if v.is_floating_point())


def test_onboard_refuses_a_resealed_run_with_nan_weights(run_file, tmp_path, capsys):
    payload = torch.load(run_file, weights_only=True)
    key = first_key(payload["cluster_states"])
    payload["cluster_states"][key].view(-1)[0] = float("nan")
    torch.save(seal(payload), run_file)
    with pytest.raises(ValueError) as err:
        load_run(run_file)
    assert f"cluster_states[{key!r}] holds NaN or Inf; restore the original" in one_line(err.value)
    images = tmp_path / "client.npy"
    np.save(images, np.random.default_rng(0).random((20, *SHAPE), dtype=np.float32))
    out = tmp_path / "client.model.pt"
    assert onboard.main([str(run_file), "--images", str(images), "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "holds NaN or Inf" in lines[0] and not out.exists()


def _tensor_to_str(p):
    p["cluster_states"][first_key(p["cluster_states"])] = "not a tensor"


def _extra_tensor_key(p):
    p["cluster_states"]["extra"] = 5


@pytest.mark.parametrize(
    ("tamper", "reseal", "message"),
    [
        (lambda p: p.__setitem__("extra", b"\x00"), False, r"holds 'extra', which this format"),
        (lambda p: p.__setitem__("extra", {1, 2}), False, r"holds 'extra', which this format"),
        (lambda p: p["settings"].__setitem__("x", b"\x00"), False, r"not written by ripple-flwr"),
        (_tensor_to_str, True, r"cluster_states\['.*'\] is a str, expected a tensor"),
        (_extra_tensor_key, True, r"cluster_states\['extra'\] is an int, expected a tensor"),
        (lambda p: p.__setitem__("image_shape", "1x28x28"), True, r"image_shape is a str"),
        (lambda p: p.__setitem__("num_classes", 10.0), True, r"num_classes is a float"),
        (lambda p: p.pop("router"), True, r"it lacks 'router'"),
    ],
)
def test_saved_run_with_values_no_writer_produces_is_refused_in_one_line(
    run_file, tamper, reseal, message
):
    payload = torch.load(run_file, weights_only=True)
    tamper(payload)
    torch.save(seal(payload) if reseal else payload, run_file)
    with pytest.raises(ValueError) as err:
        load_run(run_file)
    text = one_line(err.value)
    assert re.search(message, text) and str(run_file) in text and "re-create it" in text, text


def _state_nan(p):
    p["state_dict"][first_key(p["state_dict"])].view(-1)[0] = float("inf")


def _state_shape(p):
    key = first_key(p["state_dict"])
    p["state_dict"][key] = torch.zeros(3, 3)


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (_state_nan, r"state_dict\['.*'\] holds NaN or Inf"),
        (lambda p: p["component_means"].view(-1).__setitem__(0, float("nan")), "holds NaN"),
        (lambda p: p.__setitem__("component_means", "means"), "component_means is a str"),
        (lambda p: p.__setitem__("extra", 1), "holds 'extra', which this format"),
        (_state_shape, r"state_dict\['.*'\] is torch.float32 \(3, 3\), the config needs"),
        # Absurd sizes are refused from the shapes alone, before anything is allocated.
        (lambda p: p["vae_config"].__setitem__("hidden", [10**7, 10**7]), "the config needs"),
        (lambda p: p["vae_config"].__setitem__("hidden", "wide"), "not a GMM-VAE configuration"),
        (lambda p: p["state_dict"].__setitem__("x", torch.zeros(1)), "holds 'x', no GMM-VAE key"),
    ],
)
def test_resealed_checkpoint_with_bad_values_is_refused_in_one_line(
    checkpoint_file, tamper, message
):
    payload = torch.load(checkpoint_file, weights_only=True)
    tamper(payload)
    torch.save(seal(payload), checkpoint_file)
    with pytest.raises(ValueError) as err:
        load_checkpoint(checkpoint_file)
    text = one_line(err.value)
    assert re.search(message, text) and "pretrain_vae.py --output" in text, text
