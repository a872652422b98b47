"""A resume file's method fields are restored only as the method keeps them (issue 21, 6).

The server state is sealed with a hash, but whoever can write the file can re-seal it;
so restoring takes only the fields the method declares, each of the kind (list, dict,
array of one dtype, scalar) the method's own value is, with finite numbers.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FakeGrid, tiny_run_config
from test_resume import METHOD_CONFIG

from ripple_flwr.app.run_config import parse_run_config
from ripple_flwr.app.server.resume.file import load_server_state, save_server_state
from ripple_flwr.app.server.resume.plain import to_plain
from ripple_flwr.app.server.resume.restore import restored_fields
from ripple_flwr.app.server.run import run_server
from ripple_flwr.app.server.run_data import resolve_run_data
from ripple_flwr.app.server.setup import build_engine, initial_state, resolve_checkpoint
from ripple_flwr.methods.registry import METHODS, get_method
from ripple_flwr.settings import ConfigError


def prepared(cfg: dict):
    """The strategy as :func:`run_server` has it when it restores: built, query round done."""
    settings = parse_run_config(cfg)
    data = resolve_run_data(settings)
    router = None
    if get_method(settings.method).needs_router:
        ckpt, _ = resolve_checkpoint(settings, data.image_shape, data.classes_hash)
        router = ckpt.router(settings.embedding.router)
    state = initial_state(settings, data.image_shape, data.num_classes)
    strategy = build_engine(settings, state, data, router)
    strategy.roster.query_records.update(data.query_records())
    strategy.roster.local = data.local(settings)
    strategy.prepare(FakeGrid(cfg))
    return strategy


def wrong_kind(fresh, saved):
    """A value of another kind than the method's (a NaN array where it holds nothing yet)."""
    if fresh is None:
        return np.array([np.nan])
    if isinstance(fresh, np.ndarray):
        return saved.astype(np.float32 if saved.dtype == np.float64 else np.float64)
    if isinstance(fresh, str):
        return 1
    return "not the method's kind"


def method_run(method, cache_dir, tmp_path) -> tuple[dict, dict]:
    """(config, saved state) of a 2-round run of ``method`` that checkpointed every round."""
    over = {"num-server-rounds": 2, "checkpoint-every": 1, "eval-every": 2}
    cfg = tiny_run_config(
        cache_dir,
        method=method,
        **{**over, **METHOD_CONFIG.get(method, {}), "results-path": str(tmp_path / "a.json")},
    )
    run_server(FakeGrid(cfg), cfg)
    return cfg, load_server_state(tmp_path / "a.resume.npz")


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_restores_only_its_declared_fields_of_their_kind(method, cache_dir, tmp_path):
    cfg, saved = method_run(method, cache_dir, tmp_path)
    strategy = prepared(cfg)
    fields = saved["fields"]
    assert set(fields) == set(strategy.declared_state())
    restored = restored_fields(strategy, fields)  # what the run saved is what it restores
    assert set(restored) == set(fields)
    for name in ("checkpoint_path", "settings", "num_rounds"):
        with pytest.raises(ValueError, match=f"state field '{name}' is not one") as err:
            restored_fields(strategy, {**fields, name: "/etc/passwd"})
        assert "\n" not in str(err.value)
    for name, value in fields.items():
        fresh = to_plain(name, strategy.state_values()[name])
        with pytest.raises(ValueError, match=f"state field '{name}'.*this method wrote") as err:
            restored_fields(strategy, {**fields, name: wrong_kind(fresh, value)})
        assert "\n" not in str(err.value)


def test_a_model_state_keeps_its_keys_dtypes_and_finite_values(cache_dir, tmp_path):
    cfg, saved = method_run("fedavg", cache_dir, tmp_path)
    strategy = prepared(cfg)
    fields = saved["fields"]
    model = fields["latest_global"]
    key = next(iter(model))
    cases = {
        "differs at": {k: v for k, v in model.items() if k != key},
        "holds NaN or Inf": {**model, key: np.full_like(model[key], np.nan)},
        r"has shape \(3, 3, 3, 3, 3\)": {**model, key: np.zeros((3,) * 5, np.float32)},
        "is a str, expected an array": {**model, key: "a string"},
    }
    for message, bad in cases.items():
        with pytest.raises(ValueError, match=rf"state field 'latest_global'.*{message}"):
            restored_fields(strategy, {**fields, "latest_global": bad})


def test_tampered_resume_files_are_refused_before_round_one(cache_dir, tmp_path):
    """Re-sealed by the writer, with another field or a bent update-bound history."""
    cfg, saved = method_run("fedavg", cache_dir, tmp_path)
    path = tmp_path / "t.resume.npz"
    resumed = {
        **cfg,
        "num-server-rounds": 3,
        "resume": str(path),
        "results-path": str(tmp_path / "b.json"),
    }
    tampers = {
        "'checkpoint_path' is not one": {"checkpoint_path": "/etc/cron.d/x"},
        "'_accepted_norms' is a float, expected a list": {"_accepted_norms": 1e6},
        r"'_accepted_norms'\[0\] is -1.0, expected a norm": {"_accepted_norms": [-1.0, 2.0]},
        r"'_accepted_norms'\[1\] is inf, not a finite": {"_accepted_norms": [1.0, np.inf]},
        "'failures' is a list, expected a dict": {"failures": [1]},
    }
    for message, change in tampers.items():
        save_server_state(path, {**saved, "fields": {**saved["fields"], **change}})
        grid = FakeGrid(resumed)
        with pytest.raises(ConfigError, match=f"cannot resume from .*state field {message}") as err:
            run_server(grid, resumed)
        assert "\n" not in str(err.value)
        assert not grid.sent_of_type("train")  # refused before any training
    capped = {**cfg, "max-update-norm": 10.0}
    strategy = prepared(capped)
    with pytest.raises(ValueError, match=r"above max-update-norm=10 \(never accepted\)"):
        restored_fields(strategy, {**saved["fields"], "_accepted_norms": [1.0, 1e6]})
