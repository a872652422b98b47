"""Client-side loops on a tiny synthetic two-class problem."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from ripple_flwr.training.loops import evaluate_model, train_local
from ripple_flwr.training.models import build_model, get_state, set_state


def _two_patterns(n: int = 64, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Class 0 lights the top half of a 28x28 image, class 1 the bottom half, plus noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, size=n).astype(np.int64)
    x = rng.uniform(0.0, 0.3, size=(n, 1, 28, 28)).astype(np.float32)
    x[y == 0, :, :14, :] += 0.7
    x[y == 1, :, 14:, :] += 0.7
    return np.clip(x, 0.0, 1.0), y


def _cnn(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model("cnn", (1, 28, 28), 2)


def test_training_lowers_the_loss() -> None:
    x, y = _two_patterns()
    model = _cnn()
    before = evaluate_model(model, x, y)
    result = train_local(model, x, y, epochs=5, lr=0.01, batch_size=16)
    after = evaluate_model(model, x, y)
    assert result["num_examples"] == 64
    assert result["steps"] == 5 * 4
    assert np.isfinite(result["mean_loss"])
    assert after["loss"] < 0.5 * before["loss"]
    assert after["accuracy"] == 1.0


def test_evaluation_fields_and_mode_restored() -> None:
    x, y = _two_patterns(n=50, seed=1)
    model = _cnn()
    model.train()
    out = evaluate_model(model, x, y, batch_size=16)
    assert set(out) == {"loss", "accuracy", "num_examples"}
    with torch.no_grad():
        model.eval()
        logits = model(torch.as_tensor(x))
        model.train()
    target = torch.as_tensor(y)
    assert out["loss"] == pytest.approx(float(F.cross_entropy(logits, target)), rel=1e-5)
    assert out["accuracy"] == pytest.approx(float((logits.argmax(1) == target).float().mean()))
    assert out["num_examples"] == 50
    assert model.training  # restored
    # Batch size does not change the result (mean over examples, not batches).
    assert evaluate_model(model, x, y, batch_size=7)["loss"] == pytest.approx(out["loss"])


def test_train_local_is_deterministic_for_a_seed() -> None:
    x, y = _two_patterns(n=40, seed=2)
    start = get_state(_cnn(seed=5))
    results, states = [], []
    for _ in range(2):
        model = _cnn(seed=99)
        set_state(model, start)
        results.append(train_local(model, x, y, epochs=1, batch_size=8, seed=3))
        states.append(get_state(model))
    assert results[0] == results[1]
    for key in states[0]:
        np.testing.assert_array_equal(states[0][key], states[1][key])
    model = _cnn(seed=99)
    set_state(model, start)
    train_local(model, x, y, epochs=1, batch_size=8, seed=4)
    assert any(not np.array_equal(states[0][k], v) for k, v in get_state(model).items())


def test_train_local_leaves_global_rng_alone() -> None:
    x, y = _two_patterns(n=16)
    model = _cnn()
    torch.manual_seed(42)
    rng_before = torch.get_rng_state()
    train_local(model, x, y, epochs=1, batch_size=8)
    assert torch.equal(torch.get_rng_state(), rng_before)


def test_lone_trailing_example_joins_the_last_batch() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(17, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 2, size=17)
    # ResNet-18 on 8x8 ends in 1x1 maps: BatchNorm cannot train on a batch of one there.
    torch.manual_seed(0)
    out = train_local(build_model("resnet18", (1, 8, 8), 2), x, y, epochs=1, batch_size=8)
    assert out["steps"] == 2  # batches of 8 and 9
    x28, y28 = _two_patterns(n=3)
    assert train_local(_cnn(), x28, y28, epochs=1, batch_size=1)["steps"] == 3  # no folding
    assert np.isfinite(out["mean_loss"])


@pytest.mark.parametrize(
    ("x", "y", "match"),
    [
        (np.zeros((0, 1, 28, 28), np.float32), np.zeros(0, np.int64), "empty"),
        (np.zeros((4, 3, 28, 28), np.float32), np.zeros(4, np.int64), r"expects images of shape"),
        (np.zeros((4, 28, 28), np.float32), np.zeros(4, np.int64), r"\(n, C, H, W\)"),
        (np.zeros((4, 1, 28, 28), np.float32), np.zeros(3, np.int64), "4 images but 3 labels"),
        (np.zeros((2, 1, 28, 28), np.float32), np.array([0, 2]), r"\[0, 2\)"),
        (np.zeros((2, 1, 28, 28), np.float32), np.array([0.0, 1.0]), "integers"),
    ],
)
def test_bad_inputs_raise(x: np.ndarray, y: np.ndarray, match: str) -> None:
    model = _cnn()
    with pytest.raises(ValueError, match=match):
        train_local(model, x, y, epochs=1)
    with pytest.raises(ValueError, match=match):
        evaluate_model(model, x, y)


def test_bad_epochs_raise() -> None:
    x, y = _two_patterns(n=8)
    with pytest.raises(ValueError, match="epochs"):
        train_local(_cnn(), x, y, epochs=0)
