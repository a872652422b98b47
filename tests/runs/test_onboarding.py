"""Zero-shot onboarding: saved runs round trip, theta_new = sum_c w_c theta_c, clear errors, CLI."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
import torch
from conftest import tiny_run_config

from ripple_flwr.aggregation.hdb import collapse_weights
from ripple_flwr.aggregation.mixing import mix_model
from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.cli import onboard
from ripple_flwr.data.cache import cached_federation
from ripple_flwr.io.integrity import seal
from ripple_flwr.router.checkpoint import load_checkpoint
from ripple_flwr.runs.onboarding import Onboarder, load_model, save_model
from ripple_flwr.runs.saved_runs import (
    SAVED_RUN_VERSION,
    SavedRun,
    file_sha256,
    load_run,
    save_run,
)
from ripple_flwr.training.models import build_model, get_state
from ripple_flwr.wst.embedder import PrototypeSettings, SpectralEmbedder

HDB_MAP = np.array([0, 0, 1, 1])


def stacked_models(m: int, image_shape, num_classes: int, seed: int = 0) -> dict:
    """M differently initialised CNNs, each tensor stacked as (M, ...)."""
    states = []
    for i in range(m):
        torch.manual_seed(seed + i)
        states.append(get_state(build_model("cnn", image_shape, num_classes)))
    return {k: np.stack([s[k] for s in states]) for k in states[0]}


@pytest.fixture(scope="module")
def world(cache_dir, tiny_checkpoint):
    """The tiny federation, its settings, and 4 random cluster models."""
    cfg = tiny_run_config(cache_dir, method="ripple", checkpoint=str(tiny_checkpoint))
    settings = parse_run_config(cfg)
    fed = cached_federation(settings)
    shape, classes = fed.dataset.image_shape, fed.dataset.num_classes
    return {
        "settings": settings,
        "fed": fed,
        "shape": shape,
        "classes": classes,
        "stacked": stacked_models(4, shape, classes),
        "checkpoint": tiny_checkpoint,
    }


def make_run(world, router="gmm-vae", stacked=None, component_map=None, checkpoint=None):
    return SavedRun(
        cluster_states=world["stacked"] if stacked is None else stacked,
        model="cnn",
        image_shape=world["shape"],
        num_classes=world["classes"],
        router=router,
        router_checkpoint="" if router == "none" else str(checkpoint or world["checkpoint"]),
        component_map=component_map,
        settings=world["settings"].to_dict(),
    )


@pytest.fixture(scope="module")
def onboarder(world):
    return Onboarder(make_run(world))


@pytest.fixture(scope="module")
def hdb_onboarder(world):
    stacked2 = stacked_models(2, world["shape"], world["classes"], seed=10)
    return Onboarder(make_run(world, stacked=stacked2, component_map=HDB_MAP))


def images_of(world, pid: int) -> np.ndarray:
    return world["fed"].client_images(pid)


# -- saved runs ----------------------------------------------------------------------------
def test_save_load_round_trip(world, tmp_path):
    run = make_run(world, stacked=world["stacked"], component_map=np.array([0, 1, 1, 3]))
    path = save_run(tmp_path / "sub" / "run.pt", run)
    assert path.is_file() and not path.with_name("run.pt.tmp").exists()
    raw = torch.load(path, weights_only=True)  # plain tensors and python values only
    assert raw["version"] == SAVED_RUN_VERSION
    back = load_run(path)
    assert list(back.cluster_states) == list(run.cluster_states)
    for k, v in run.cluster_states.items():
        assert back.cluster_states[k].dtype == v.dtype
        np.testing.assert_array_equal(back.cluster_states[k], v)
    np.testing.assert_array_equal(back.component_map, [0, 1, 1, 3])
    assert back.num_models == 4 and back.num_components == 4
    assert (back.model, back.image_shape, back.num_classes) == ("cnn", (1, 28, 28), 10)
    assert back.router == "gmm-vae"
    assert back.router_checkpoint == str(world["checkpoint"].resolve())
    assert back.router_sha256 == file_sha256(world["checkpoint"])  # filled in on save
    assert back.settings == run.settings and back.settings["svd-rank"] == 20
    none = load_run(save_run(tmp_path / "none.pt", make_run(world, "none", stacked_one(world))))
    assert none.component_map is None and none.router_checkpoint == ""


def stacked_one(world) -> dict:
    return {k: v[:1] for k, v in world["stacked"].items()}


def test_saved_run_rejects_inconsistent_shapes(world, tmp_path):
    bad = dict(world["stacked"])
    first = next(iter(bad))
    bad[first] = bad[first][:3]
    with pytest.raises(ValueError, match="do not share one leading model axis M"):
        make_run(world, stacked=bad)
    with pytest.raises(ValueError, match=r"component map values must lie in \[0, 4\).*\[5\]"):
        make_run(world, component_map=np.array([0, 1, 2, 5]))
    with pytest.raises(ValueError, match="router 'none' serves one global model"):
        make_run(world, router="none")
    # The same checks guard a file edited after saving (and re-hashed, see test_integrity).
    path = save_run(tmp_path / "run.pt", make_run(world))
    payload = torch.load(path, weights_only=True)
    payload["cluster_states"][first] = payload["cluster_states"][first][:2]
    torch.save(seal(payload), path)
    with pytest.raises(ValueError, match="inconsistent.*leading model axis"):
        load_run(path)
    payload["version"] = 99
    torch.save(seal(payload), path)
    with pytest.raises(
        ValueError, match=f"version 99; this code reads version {SAVED_RUN_VERSION}"
    ):
        load_run(path)


def test_load_run_errors(world, tmp_path):
    with pytest.raises(FileNotFoundError, match="not found; a ripple-flwr run saves it next to"):
        load_run(tmp_path / "nope.pt")
    with pytest.raises(ValueError, match="not a ripple-flwr saved run.*GMM-VAE checkpoint"):
        load_run(world["checkpoint"])
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="cannot read saved run"):
        load_run(junk)


# -- onboarding ----------------------------------------------------------------------------
def test_onboard_is_router_then_mix(world, onboarder):
    images = images_of(world, 0)
    result = onboarder.onboard(images)
    ckpt = load_checkpoint(world["checkpoint"])
    embedder = SpectralEmbedder(
        world["shape"], J=3, L=8, prototype=PrototypeSettings(20, None), device="cpu"
    )
    phi = embedder.embed(images)
    np.testing.assert_array_equal(result.summary, phi)
    expected = ckpt.router("gmm-vae").route(phi)[0]
    assert result.weights.shape == (4,)
    assert result.weights.sum() == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(result.weights, expected, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(result.model_weights, result.weights)
    mixed = mix_model(result.model_weights, world["stacked"])
    assert list(result.state) == list(world["stacked"])
    for k in mixed:
        np.testing.assert_array_equal(result.state[k], mixed[k])
    # ... and that mix is the convex combination sum_c w_c theta_c.
    key = "classifier.2.weight"
    direct = np.tensordot(result.model_weights, world["stacked"][key], axes=1)
    np.testing.assert_allclose(result.state[key], direct, atol=1e-4 * np.abs(direct).max())
    # Images without the channel axis give the same answer.
    again = onboarder.onboard(images[:, 0])
    np.testing.assert_array_equal(again.weights, result.weights)
    model = onboarder.build_model(result.state)
    assert not model.training
    with torch.no_grad():
        assert model(torch.from_numpy(images[:5])).shape == (5, 10)


def test_onboard_with_hdb_component_map(world, onboarder, hdb_onboarder):
    images = images_of(world, 1)
    result = hdb_onboarder.onboard(images)
    plain = onboarder.onboard(images)
    np.testing.assert_allclose(result.weights, plain.weights, rtol=0, atol=1e-12)  # same router
    assert result.model_weights.shape == (2,)
    np.testing.assert_array_equal(
        result.model_weights, collapse_weights(result.weights, HDB_MAP, 2)
    )
    assert result.model_weights[0] == pytest.approx(result.weights[:2].sum())
    stacked2 = hdb_onboarder.run.cluster_states
    mixed = mix_model(result.model_weights, stacked2)
    for k in mixed:
        np.testing.assert_array_equal(result.state[k], mixed[k])


def test_onboard_many_equals_one_by_one(world, onboarder, hdb_onboarder):
    clients = [images_of(world, pid) for pid in (0, 2, 3)]
    clients[1] = clients[1][:25]  # clients of different sizes
    for ob in (onboarder, hdb_onboarder):
        many = ob.onboard_many(clients)
        assert len(many) == 3
        for images, got in zip(clients, many, strict=True):
            one = ob.onboard(images)
            np.testing.assert_array_equal(got.summary, one.summary)
            # The router runs in float32: a batch of 3 and a batch of 1 may round apart.
            np.testing.assert_allclose(got.weights, one.weights, rtol=0, atol=1e-6)
            np.testing.assert_allclose(got.model_weights, one.model_weights, rtol=0, atol=1e-6)
            for k, v in one.state.items():
                np.testing.assert_allclose(got.state[k], v, rtol=1e-5, atol=1e-6)
    assert onboarder.onboard_many([]) == []
    with pytest.raises(ValueError, match="client 1: .*uint8"):
        onboarder.onboard_many([clients[0], (clients[1] * 255).astype(np.uint8)])


def test_router_none_returns_the_global_model(world, tmp_path):
    stacked = stacked_one(world)
    path = save_run(tmp_path / "fedavg.pt", make_run(world, "none", stacked))
    ob = Onboarder.from_path(path)
    assert ob.router is None and ob.embedder is None and ob.summary_kind == "none"
    result = ob.onboard(images_of(world, 0))
    assert result.summary is None
    np.testing.assert_array_equal(result.weights, [1.0])
    np.testing.assert_array_equal(result.model_weights, [1.0])
    for k, v in stacked.items():
        np.testing.assert_array_equal(result.state[k], v[0])
    many = ob.onboard_many([images_of(world, 0), images_of(world, 1)])
    assert [m.weights.tolist() for m in many] == [[1.0], [1.0]]
    with pytest.raises(ValueError, match="shape"):
        ob.onboard(np.zeros((3, 1, 8, 8), np.float32))


def test_mean_unmixing_router(world):
    ob = Onboarder(make_run(world, router="mean-unmixing"))
    assert ob.embedder is None and ob.summary_kind == "mean"
    images = images_of(world, 4)
    result = ob.onboard(images)
    mean = images.reshape(len(images), -1).mean(axis=0)
    np.testing.assert_allclose(result.summary, mean, rtol=1e-6, atol=1e-7)
    ref = load_checkpoint(world["checkpoint"]).router("mean-unmixing").route(result.summary)[0]
    np.testing.assert_allclose(result.weights, ref, rtol=0, atol=1e-12)
    assert result.weights.sum() == pytest.approx(1.0)
    for k, v in mix_model(result.model_weights, world["stacked"]).items():
        np.testing.assert_array_equal(result.state[k], v)


# -- errors --------------------------------------------------------------------------------
def test_checkpoint_changed_or_missing(world, tmp_path):
    ckpt = tmp_path / "vae.pt"
    shutil.copy(world["checkpoint"], ckpt)
    path = save_run(tmp_path / "run.pt", make_run(world, checkpoint=ckpt))
    Onboarder.from_path(path)  # intact: fine
    with open(ckpt, "ab") as f:
        f.write(b"\0")
    with pytest.raises(ValueError, match="changed after the run was saved"):
        Onboarder.from_path(path)
    ckpt.unlink()
    with pytest.raises(FileNotFoundError, match="checkpoint .* of this saved run is missing"):
        Onboarder.from_path(path)


def test_router_size_must_match_models(world):
    with pytest.raises(ValueError, match="K=4 components but the saved run's component map length"):
        Onboarder(make_run(world, component_map=np.array([0, 1, 1])))
    three = {k: v[:3] for k, v in world["stacked"].items()}
    with pytest.raises(ValueError, match="K=4 components but the saved run's number of models"):
        Onboarder(make_run(world, stacked=three))
    wrong_classes = make_run(world, "none", stacked_one(world))
    wrong_classes.num_classes = 3
    with pytest.raises(ValueError, match="do not fit model 'cnn'.*3 classes.*classifier.2"):
        Onboarder(wrong_classes)


def test_bad_images(world, onboarder):
    images = images_of(world, 0)
    with pytest.raises(ValueError, match=r"shape \(60, 1, 20, 20\).*\(N, 1, 28, 28\)"):
        onboarder.onboard(images[:, :, :20, :20])
    with pytest.raises(ValueError, match=r"uint8; scale them to float32 in \[0, 1\]"):
        onboarder.onboard((images * 255).astype(np.uint8))
    with pytest.raises(ValueError, match=r"scaled to \[0, 1\].*divide 0-255 pixels by 255"):
        onboarder.onboard(images * 255)
    with pytest.raises(ValueError, match="at least 2 images"):
        onboarder.onboard(images[:1])
    bad = images.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        onboarder.onboard(bad)


def test_saved_model_file(world, onboarder, tmp_path):
    result = onboarder.onboard(images_of(world, 0))
    path = save_model(tmp_path / "m" / "client.model.pt", result, onboarder.run)
    payload = torch.load(path, weights_only=True)
    assert payload["model"] == "cnn" and payload["image_shape"] == [1, 28, 28]
    assert payload["num_classes"] == 10
    assert payload["weights"] == pytest.approx(result.weights.tolist())
    model = build_model(payload["model"], tuple(payload["image_shape"]), payload["num_classes"])
    model.load_state_dict(payload["state_dict"])
    for k, v in result.state.items():
        np.testing.assert_array_equal(model.state_dict()[k].numpy(), v)
    loaded = load_model(path)
    x = torch.from_numpy(images_of(world, 0)[:4])
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), onboarder.build_model(result.state)(x))


# -- the command ---------------------------------------------------------------------------
@pytest.fixture
def saved_run(world, tmp_path):
    return save_run(tmp_path / "run.pt", make_run(world))


def test_cli_onboards_and_writes_a_model(world, saved_run, tmp_path, capsys):
    images = images_of(world, 0)
    npy = tmp_path / "client.npy"
    np.save(npy, images)
    report_path = tmp_path / "out" / "report.json"
    assert onboard.main([str(saved_run), "--images", str(npy), "--json", str(report_path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    report = json.loads(out[0])
    for key in ("run", "num_images", "weights", "model_weights", "top_component", "model", "ms"):
        assert key in report
    assert report["num_images"] == len(images)
    assert json.loads(report_path.read_text()) == report
    direct = Onboarder.from_path(saved_run).onboard(images)
    np.testing.assert_allclose(report["weights"], direct.weights, rtol=0, atol=1e-12)
    assert report["top_component"] == int(np.argmax(direct.weights))
    assert report["ms"] > 0
    model_path = tmp_path / "client.model.pt"  # default: next to the images
    assert report["model"] == str(model_path.resolve()) and model_path.is_file()
    payload = torch.load(model_path, weights_only=True)
    model = build_model(payload["model"], tuple(payload["image_shape"]), payload["num_classes"])
    model.load_state_dict(payload["state_dict"])
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(images)).argmax(dim=1)
    assert pred.shape == (len(images),) and int(pred.max()) < 10


def test_cli_uint8_npz_is_scaled_with_a_note(world, saved_run, tmp_path, capsys):
    images = (images_of(world, 1)[:, 0] * 255).round().astype(np.uint8)  # (N, H, W) bytes
    npz = tmp_path / "client.npz"
    np.savez(npz, images=images)
    out = tmp_path / "custom.pt"
    assert onboard.main([str(saved_run), "--images", str(npz), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "uint8" in captured.err and "/ 255" in captured.err
    assert json.loads(captured.out)["model"] == str(out.resolve()) and out.is_file()


def test_cli_help_and_errors(world, saved_run, tmp_path, capsys):
    assert onboard.main(["--help"]) == 0
    text = capsys.readouterr().out
    for option in ("RUN_FILE", "--images", "--out", "--json", "--device", "example"):
        assert option in text
    cases = [
        ([str(saved_run), "--images", str(tmp_path / "missing.npy")], "images file .* not found"),
        ([str(tmp_path / "no-run.pt"), "--images", None], "saved run .* not found"),
        ([str(world["checkpoint"]), "--images", None], "not a ripple-flwr saved run"),
        ([str(saved_run), "--images", "small"], r"shape \(5, 1, 8, 8\)"),
        ([str(saved_run), "--images", None, "--device", "cuda:7"], "device"),
    ]
    good = tmp_path / "good.npy"
    np.save(good, images_of(world, 0))
    small = tmp_path / "small.npy"
    np.save(small, np.zeros((5, 1, 8, 8), np.float32))
    for argv, pattern in cases:
        argv = [str(good) if a is None else str(small) if a == "small" else a for a in argv]
        if "cuda:7" in argv and torch.cuda.is_available():
            continue
        assert onboard.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: "), err
        assert re.search(pattern, err[0]), err[0]
    assert onboard.main([str(saved_run)]) == 2  # --images is required (argparse usage error)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "required: --images (see --help)" in err[0], err


@pytest.fixture
def nothing_loaded(monkeypatch):
    """Fail the test if the saved run or the images are read."""

    class NoOnboarder:
        @classmethod
        def from_path(cls, *args, **kwargs):
            raise AssertionError("the saved run was loaded although an option was bad")

    def no_images(*args, **kwargs):
        raise AssertionError("the images were loaded although an option was bad")

    import ripple_flwr.runs.onboarding as onboarding  # onboard.py imports it after the flags

    monkeypatch.setattr(onboarding, "Onboarder", NoOnboarder)
    monkeypatch.setattr(onboard, "load_images", no_images)


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    ("extra", "pattern"),
    [
        (["--bogus"], r"^onboard.py: error: unrecognized arguments: --bogus \(see --help\)$"),
        (["--device"], r"^onboard.py: error: argument --device: expected one argument"),
        (["--out"], r"^onboard.py: error: argument --out: expected one argument"),
    ],
)
def test_cli_usage_error_is_one_line(extra, pattern, tmp_path, capsys, nothing_loaded):
    argv = [str(tmp_path / "run.pt"), "--images", str(tmp_path / "x.npy"), *extra]
    assert onboard.main(argv) == 2
    line = one_line(capsys)
    assert re.search(pattern, line), line


@pytest.mark.parametrize("device", ["tpu", "gpu", "cuda:x", "cuda:-1", "meta", ""])
def test_cli_unknown_device_is_refused_before_loading(device, tmp_path, capsys, nothing_loaded):
    argv = [str(tmp_path / "run.pt"), "--images", str(tmp_path / "x.npy"), "--device", device]
    assert onboard.main(argv) == 2
    line = one_line(capsys)
    assert line == (
        f"error: --device {device!r} is not a device these tools run on; "
        "use auto, cpu, cuda or cuda:N"
    )


def test_cli_cuda_is_checked_before_loading(tmp_path, capsys, monkeypatch, nothing_loaded):
    argv = [str(tmp_path / "run.pt"), "--images", str(tmp_path / "x.npy"), "--device"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert onboard.main([*argv, "cuda"]) == 2
    assert "--device cuda: CUDA is not available on this machine" in one_line(capsys)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert onboard.main([*argv, "cuda:1"]) == 2
    assert "this machine has 1 CUDA device(s); use cuda:0" in one_line(capsys)
    for good in ("cuda:0", "cuda", "auto", "cpu"):  # past the check: the run is what is read
        with pytest.raises(AssertionError, match="saved run was loaded"):
            onboard.main([*argv, good])


# -- images the router does not recognise (issue 45) ----------------------------------------
def unlike_the_training_data(world) -> dict[str, np.ndarray]:
    """Client images no synthetic client looks like: white-background digits and noise."""
    digits = images_of(world, 0)
    noise = np.random.default_rng(0).random(digits.shape, dtype=np.float32)
    return {"inverted": (1.0 - digits).astype(np.float32), "noise": noise}


def test_a_fallback_to_uniform_weights_says_why(world, onboarder):
    assert onboarder.onboard(images_of(world, 0)).fallback is None
    odd = unlike_the_training_data(world)
    for images in odd.values():
        result = onboarder.onboard(images)
        assert "outside the router's domain" in result.fallback
        np.testing.assert_array_equal(result.weights, np.full(4, 0.25))
    many = onboarder.onboard_many([images_of(world, 0), *odd.values()])
    assert [m.fallback is None for m in many] == [True, False, False]


def test_cli_warns_of_a_fallback_and_strict_refuses_it(world, saved_run, tmp_path, capsys):
    for name, images in unlike_the_training_data(world).items():
        npy = tmp_path / f"{name}.npy"
        np.save(npy, images)
        assert onboard.main([str(saved_run), "--images", str(npy)]) == 0
        captured = capsys.readouterr()
        report = json.loads(captured.out)
        reason = report["fallback"]["reason"]
        assert "outside the router's domain" in reason and "routed uniformly" in reason
        assert report["weights"] == [0.25] * 4
        (warning,) = captured.err.strip().splitlines()
        assert warning.startswith("warning: the router cannot place the images")
        assert reason in warning and "--strict" in warning
        out = tmp_path / f"{name}-strict.pt"
        argv = [str(saved_run), "--images", str(npy), "--out", str(out), "--strict"]
        assert onboard.main(argv) == 2
        line = one_line(capsys)
        assert line.startswith("error: the router cannot place the images"), line
        assert reason in line and "drop --strict" in line
        assert not out.exists()  # refused: no model written
    good = tmp_path / "good.npy"
    np.save(good, images_of(world, 0))
    assert onboard.main([str(saved_run), "--images", str(good), "--strict"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "fallback" not in json.loads(captured.out)


@pytest.mark.parametrize("flag", ["--out", "--json"])
def test_cli_output_under_a_file_is_one_line_before_loading(flag, tmp_path, capsys, nothing_loaded):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file, not a folder")
    target = blocker / "sub" / "x.out"
    argv = [str(tmp_path / "run.pt"), "--images", str(tmp_path / "x.npy"), flag, str(target)]
    assert onboard.main(argv) == 2
    line = one_line(capsys)
    assert line == (
        f"error: {flag}: cannot write to {target} ({blocker} is a file, not a folder); "
        "choose another path"
    )
