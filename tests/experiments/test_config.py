"""Run-config parsing and validation: clear errors before any expensive work."""

import tomllib
from pathlib import Path

import pytest

from ripple_flwr.app.client.handlers import settings_from_context
from ripple_flwr.app.run_config import parse_run_config, summary_kind
from ripple_flwr.methods.registry import all_options
from ripple_flwr.router.pretrain import pretrain_settings_for
from ripple_flwr.settings import ConfigError, RunSettings

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_defaults_match_dataclass():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    settings = parse_run_config(config)
    defaults = {o.key: o.default for o in all_options()}
    assert settings == RunSettings.of(options=defaults)
    assert settings.to_dict() == config  # every field and option is a knob, at its default


def test_parse_types_and_derived_values():
    s = parse_run_config(
        {"num-partitions": 12, "alpha": 1, "explained-variance": 0.95, "router": "mean-unmixing"}
    )
    assert s.data.num_partitions == 12 and isinstance(s.data.alpha, float)
    assert s.embedding.explained_variance_or_none == 0.95
    assert summary_kind(s) == "mean"
    assert summary_kind(RunSettings.of(method="oracle")) == "none"
    assert summary_kind(RunSettings()) == "embedding"
    ps = pretrain_settings_for(s)
    assert ps.explained_variance == 0.95 and ps.bank.client_size == s.data.partition_size
    assert settings_from_context({"seed": 3}) is settings_from_context({"seed": 3})


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"dataset": "imagenet"}, "dataset='imagenet' is not one of"),
        ({"method": "fedsomething"}, "method='fedsomething' is not one of"),
        ({"sampling": "random"}, "sampling"),
        ({"router": "knn"}, "router"),
        ({"model": "vgg"}, "model"),
        ({"num-components": 1}, r"num-components must be in \[2, 100\]"),
        ({"alpha": 0.0}, "alpha"),
        ({"test-fraction": 1.0}, "test-fraction"),
        ({"explained-variance": 1.5}, "explained-variance"),
        ({"momentum": 1.0}, "momentum"),
        ({"clients-per-round": 30, "num-partitions": 20}, "exceeds num-partitions"),
        ({"J": 5}, "J=5 is too large for 28x28"),
        ({"num-partitions": 25}, "mnist-5k has 5000 images"),
        ({"round-timeout": 0.0}, "round-timeout"),
        ({"num-server-rounds": 0}, "num-server-rounds"),
        ({"lr": "0.1"}, "lr must be float"),
        ({"seed": 1.5}, "seed must be int"),
        ({"num-partitions": True}, "num-partitions must be int"),
        ({"num-partition": 10}, "unknown run-config key"),
    ],
)
def test_invalid_config_is_refused(override, message):
    with pytest.raises(ConfigError, match=message):
        parse_run_config(override)


def test_checkpoint_settings_mismatch_is_a_config_error(tiny_checkpoint, tmp_path):
    from ripple_flwr.app.server.setup import resolve_checkpoint

    # The tiny checkpoint has K=4; a run with K=5 must be refused before any round.
    settings = RunSettings.of(
        num_components=5, checkpoint=str(tiny_checkpoint), aux_size=300, cache_dir=str(tmp_path)
    )
    with pytest.raises(ConfigError, match="num_components: checkpoint has 4, run has 5"):
        resolve_checkpoint(settings, (1, 28, 28))
    with pytest.raises(ConfigError, match="J: checkpoint has 3, run has 2"):
        resolve_checkpoint(
            RunSettings.of(num_components=4, J=2, checkpoint=str(tiny_checkpoint)), (1, 28, 28)
        )


def test_every_integer_option_has_a_sanity_bound_checked_before_work():
    """No integer a run config sets can ask for unbounded memory or time (issue 21, 11)."""
    from ripple_flwr.app.run_config import parse_run_config
    from ripple_flwr.methods import registry
    from ripple_flwr.settings import ConfigError

    options = [*RunSettings.fields_as_options(), *registry.all_options()]
    ints = [o for o in options if o.type is int]
    assert ints
    for o in ints:
        assert o.high is not None, f"{o.key} has no upper bound"
        with pytest.raises(ConfigError, match=o.key):
            parse_run_config({o.key: int(o.high) + 1})


def test_quantity_skew_is_a_key_and_refused_beside_embedding_dp():
    from ripple_flwr.app.run_config import parse_run_config
    from ripple_flwr.settings import ConfigError

    assert parse_run_config({"partition-size-spread": 10}).data.partition_size_spread == 10.0
    with pytest.raises(ConfigError, match=r"partition-size-spread = 1 with embedding DP"):
        parse_run_config({"partition-size-spread": 10, "embedding-dp-epsilon": 1.0})
    with pytest.raises(ConfigError, match="partition-size-spread"):
        parse_run_config({"partition-size-spread": 0.5})


def test_a_preset_writes_its_keys_and_never_overrides_a_choice():
    from paper.variants import RECOMMENDED
    from ripple_flwr.methods.registry import METHODS

    rec = parse_run_config({"method": "ripple", "preset": "recommended"}).to_dict()
    assert {k: rec[k] for k in RECOMMENDED} == RECOMMENDED
    paper = parse_run_config({"method": "ripple", "preset": "paper"}).to_dict()
    assert paper["router"] == "gmm-vae" and paper["class-conditional"] is False
    # The map's recommended row is the preset, key by key.
    assert RECOMMENDED == METHODS["ripple"].presets["recommended"]
    # A key set to the preset's value, or left at its default, is fine; another is refused.
    parse_run_config({"preset": "recommended", "router": "mean-unmixing"})
    with pytest.raises(ConfigError, match="preset='paper' sets router='gmm-vae'"):
        parse_run_config({"preset": "paper", "router": "mean-unmixing"})
    with pytest.raises(ConfigError, match="not a preset of method 'ripple'"):
        parse_run_config({"preset": "fastest"})
