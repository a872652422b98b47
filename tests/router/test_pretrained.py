"""ResNet-18 from ImageNet weights: the skeleton, loading the file, the offline error.

No test touches the network: the download function is replaced by one that fails,
and the "ImageNet" files are seeded random state dicts of the right shapes.
"""

from __future__ import annotations

import hashlib
import io
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision

from ripple_flwr.training import pretrained
from ripple_flwr.training.models import build_model, get_state, set_state
from ripple_flwr.training.pretrained import (
    RESNET18_FILE,
    PretrainedWeightsError,
    load_imagenet_weights,
    pretrained_weights_path,
)


@pytest.fixture
def hub(tmp_path, monkeypatch) -> Path:
    """``TORCH_HOME`` (and the hub directory) under ``tmp_path``; downloads fail at once."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)  # set_dir would win over TORCH_HOME

    def offline(path: Path) -> None:
        raise OSError("network is unreachable (test)")

    monkeypatch.setattr(pretrained, "_download", offline)
    return tmp_path / "hub" / "checkpoints"


def _imagenet_like(seed: int = 0) -> dict[str, torch.Tensor]:
    """torchvision's ResNet-18 state dict with a seeded init, as the real file holds it."""
    torch.manual_seed(seed)
    state = torchvision.models.resnet18(weights=None).state_dict()
    # torchvision's file predates BatchNorm's counters.
    return {k: v for k, v in state.items() if not k.endswith("num_batches_tracked")}


def _write(path: Path, state: dict[str, torch.Tensor]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)
    return path


def _forward(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(x)


@pytest.mark.parametrize(
    ("shape", "imagenet_stem"),
    [((3, 224, 224), True), ((3, 64, 64), True), ((3, 32, 32), False), ((1, 64, 64), True)],
)
def test_skeleton_shapes_and_normalisation_outside_the_state(shape, imagenet_stem):
    torch.manual_seed(0)
    model = build_model("resnet18", shape, 65, pretrained=True)
    assert model.pretrained and model.input_shape == shape and model.num_classes == 65
    assert model.imagenet_stem == imagenet_stem
    assert model.conv1.in_channels == shape[0]
    assert model.conv1.kernel_size == ((7, 7) if imagenet_stem else (3, 3))
    assert isinstance(model.fc, torch.nn.Linear) and model.fc.in_features == 512
    assert _forward(model, torch.rand(2, *shape)).shape == (2, 65)
    state = model.state_dict()
    assert not any("input_mean" in k or "input_std" in k for k in state)
    names = dict(model.named_buffers())
    assert "input_mean" in names and "input_std" in names
    # Keys are torchvision's: the head is fc, no dropout layer.
    assert set(state) == set(torchvision.models.resnet18(num_classes=65).state_dict())
    assert "fc.weight" in get_state(model)
    mean = model.input_mean.flatten().tolist()
    want = [0.485, 0.456, 0.406] if shape[0] == 3 else [np.mean([0.485, 0.456, 0.406])]
    np.testing.assert_allclose(mean, want, rtol=1e-6)


def test_pretrained_only_for_resnet18_and_plain_models_unchanged():
    for name in ("cnn", "resnet9"):
        with pytest.raises(ValueError, match="pretrained weights exist for resnet18 only"):
            build_model(name, (3, 32, 32), 10, pretrained=True)
    with pytest.raises(ValueError, match=r"grey \(1\) or RGB \(3\) images, got 2"):
        build_model("resnet18", (2, 64, 64), 10, pretrained=True)
    torch.manual_seed(1)
    plain = build_model("resnet18", (3, 32, 32), 10)
    torch.manual_seed(1)
    again = build_model("resnet18", (3, 32, 32), 10, pretrained=False)
    assert plain.pretrained is False and not hasattr(plain, "input_mean")
    for (k, a), (_, b) in zip(get_state(plain).items(), get_state(again).items(), strict=True):
        np.testing.assert_array_equal(a, b, err_msg=k)


def test_building_never_reads_the_disk_or_network(hub, monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("build_model touched the weights")

    monkeypatch.setattr(torch, "load", forbidden)
    monkeypatch.setattr(pretrained, "_download", forbidden)
    build_model("resnet18", (3, 224, 224), 10, pretrained=True)
    assert not hub.exists()


def test_loads_the_file_from_the_hub_cache(hub):
    assert pretrained_weights_path() == hub / RESNET18_FILE
    state = _imagenet_like(seed=3)
    path = _write(hub / RESNET18_FILE, state)
    torch.manual_seed(0)
    model = build_model("resnet18", (3, 224, 224), 65, pretrained=True)
    fc_before = model.fc.weight.detach().clone()
    report = load_imagenet_weights(model)
    assert torch.equal(model.layer3[1].conv2.weight, state["layer3.1.conv2.weight"])
    assert torch.equal(model.conv1.weight, state["conv1.weight"])
    assert torch.equal(model.bn1.running_var, state["bn1.running_var"])
    assert model.fc.weight.shape == (65, 512) and torch.equal(model.fc.weight, fc_before)
    assert report["path"] == str(path)
    assert report["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert report["official"] is False  # a seeded stand-in, not torchvision's file
    assert report["loaded"] == len(state) - 2  # all but fc.weight and fc.bias
    assert {"fc.weight", "fc.bias"} <= set(report["skipped"]) and report["adapted"] == []
    assert all(k.startswith("fc.") or k.endswith("num_batches_tracked") for k in report["skipped"])


def test_explicit_file_small_stem_and_grey(hub, tmp_path):
    state = _imagenet_like(seed=4)
    explicit = _write(tmp_path / "elsewhere" / "weights.pth", state)
    assert pretrained_weights_path(str(explicit)) == explicit
    small = build_model("resnet18", (3, 32, 32), 10, pretrained=True)
    conv1 = small.conv1.weight.detach().clone()
    report = load_imagenet_weights(small, weights=str(explicit))
    assert report["path"] == str(explicit) and "conv1.weight" in report["skipped"]
    assert torch.equal(small.conv1.weight, conv1)  # the 3x3 stem is trained from scratch
    assert torch.equal(small.layer1[0].conv1.weight, state["layer1.0.conv1.weight"])
    grey = build_model("resnet18", (1, 64, 64), 10, pretrained=True)
    report = load_imagenet_weights(grey, weights=explicit)
    assert report["adapted"] == ["conv1.weight"]
    torch.testing.assert_close(
        grey.conv1.weight, state["conv1.weight"].sum(dim=1, keepdim=True), rtol=0, atol=0
    )
    assert _forward(grey, torch.rand(2, 1, 64, 64)).shape == (2, 10)


def test_missing_file_offline_names_the_exact_path(hub, tmp_path):
    model = build_model("resnet18", (3, 64, 64), 10, pretrained=True)
    where = hub / RESNET18_FILE
    with pytest.raises(PretrainedWeightsError) as err:
        load_imagenet_weights(model)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"ImageNet weights for resnet18 not found at {where} and the")
    assert "network is unreachable (test)" in message
    assert f"place {RESNET18_FILE} (https://download.pytorch.org/models/{RESNET18_FILE})" in message
    assert f"at {where}, or set pretrained-weights=<file>" in message
    assert isinstance(err.value, FileNotFoundError)
    missing = tmp_path / "nowhere.pth"
    with pytest.raises(PretrainedWeightsError, match=f"pretrained-weights file {missing}"):
        load_imagenet_weights(model, weights=missing)


def test_a_download_is_used_when_it_succeeds(hub, monkeypatch):
    state = _imagenet_like(seed=5)
    monkeypatch.setattr(pretrained, "_download", lambda path: _write(path, state))
    model = build_model("resnet18", (3, 64, 64), 10, pretrained=True)
    report = load_imagenet_weights(model)
    assert report["path"] == str(hub / RESNET18_FILE)
    assert torch.equal(model.layer4[1].bn2.weight, state["layer4.1.bn2.weight"])


def test_download_checks_the_hash_and_writes_atomically(tmp_path, monkeypatch):
    payload = io.BytesIO()
    torch.save(_imagenet_like(seed=8), payload)
    data = payload.getvalue()
    urls = []

    def fake_urlopen(url, timeout=None):
        urls.append((url, timeout))
        return io.BytesIO(data)

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    target = tmp_path / "checkpoints" / RESNET18_FILE
    with pytest.raises(ValueError, match="sha256 .* expected f37072fd"):
        pretrained._download(target)
    assert not target.exists() and list(target.parent.iterdir()) == []
    assert urls == [(f"https://download.pytorch.org/models/{RESNET18_FILE}", 60.0)]
    monkeypatch.setattr(pretrained, "_SHA256_PREFIX", hashlib.sha256(data).hexdigest()[:8])
    pretrained._download(target)
    assert target.read_bytes() == data and list(target.parent.iterdir()) == [target]


def test_wrong_files_are_refused_and_nothing_is_written(hub, tmp_path):
    model = build_model("resnet18", (3, 64, 64), 10, pretrained=True)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(6)
    resnet34 = torchvision.models.resnet34(weights=None).state_dict()
    wrong = dict(_imagenet_like(seed=6))
    wrong["layer2.0.conv1.weight"] = torch.zeros(128, 64, 5, 5)
    cases = {
        "resnet34.pth": (resnet34, "unexpected layer1.2"),
        "shapes.pth": (wrong, r"layer2.0.conv1.weight is \(128, 64, 5, 5\) in the file"),
        "partial.pth": ({"conv1.weight": wrong["conv1.weight"]}, r"bn1.weight missing.*in all"),
    }
    for name, (state, match) in cases.items():
        path = _write(tmp_path / name, state)
        with pytest.raises(ValueError, match=f"{path} does not hold torchvision's resnet18"):
            load_imagenet_weights(model, weights=path)
        with pytest.raises(ValueError, match=match):
            load_imagenet_weights(model, weights=path)
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot read the resnet18 ImageNet weights"):
        load_imagenet_weights(model, weights=tmp_path / "junk.pth")
    _write(tmp_path / "list.pth", [torch.zeros(1)])
    with pytest.raises(ValueError, match="is not a state dict"):
        load_imagenet_weights(model, weights=tmp_path / "list.pth")
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    with pytest.raises(ValueError, match="pretrained=True"):
        load_imagenet_weights(build_model("resnet18", (3, 64, 64), 10), weights=path)


def test_server_and_client_builds_give_the_same_outputs(hub):
    _write(hub / RESNET18_FILE, _imagenet_like(seed=7))
    shape = (3, 64, 64)
    torch.manual_seed(0)
    server = build_model("resnet18", shape, 12, pretrained=True)
    load_imagenet_weights(server)
    state = get_state(server)
    torch.manual_seed(123)  # another random init: everything must come from the state
    client = build_model("resnet18", shape, 12, pretrained=True)
    set_state(client, state)
    x = torch.rand(4, *shape)
    np.testing.assert_array_equal(_forward(server, x).numpy(), _forward(client, x).numpy())
    # The normalisation is part of the architecture, not of the state: a plain ResNet-18
    # with the same stem and weights sees un-normalised inputs and differs.
    plain = torchvision.models.resnet18(num_classes=12)
    plain.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    torch.testing.assert_close(_forward(plain, (x - mean) / std), _forward(client, x))
    assert not torch.allclose(_forward(plain, x), _forward(client, x))
    if torch.cuda.is_available():
        client.to("cuda")
        assert client.input_mean.device.type == "cuda"
        out = _forward(client, x.to("cuda")).cpu()
        torch.testing.assert_close(out, _forward(server, x), rtol=1e-3, atol=1e-3)
