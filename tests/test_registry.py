"""The method registry: the one list of methods, and what it refuses."""

from __future__ import annotations

import dataclasses

import pytest

from ripple_flwr.app import registry as methods
from ripple_flwr.app.registry import METHODS, MethodSpec, get_method, register
from ripple_flwr.settings import ConfigError, RunSettings
from ripple_flwr.training.rules import CLIENT_RULES


def _spec(**over) -> MethodSpec:
    base = {
        "name": "toy",
        "summary": "a toy method",
        "build": lambda inp: None,
        "models": "one",
        "exports": "global",
    }
    return MethodSpec(**{**base, **over})


@pytest.fixture
def scratch_registry(monkeypatch):
    monkeypatch.setattr(methods, "METHODS", dict(METHODS))
    return methods.METHODS


def test_every_documented_method_is_registered():
    assert set(METHODS) >= {
        "ripple",
        "oracle",
        "fedavg",
        "fedprox",
        "fedadam",
        "fedyogi",
        "fedadagrad",
        "scaffold",
        "feddyn",
        "perfedavg",
        "pfedme",
        "local",
    }
    for spec in METHODS.values():
        spec.check()
        assert spec.client_rule in CLIENT_RULES


def test_duplicate_name_is_refused(scratch_registry):
    with pytest.raises(ValueError, match="'fedavg' is registered already"):
        register(_spec(name="fedavg"))


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"name": ""}, "must be a lower-case word"),
        ({"name": "Fed Avg"}, "must be a lower-case word"),
        ({"summary": " "}, "has no summary"),
        ({"build": None}, "build must be callable"),
        ({"models": "two"}, "models='two'"),
        ({"exports": "weights"}, "exports='weights'"),
        ({"client_rule": "scaffold-ii"}, "client_rule='scaffold-ii' is not one of sgd"),
        ({"exports": "clusters"}, "exports clusters but has no router"),
    ],
)
def test_incomplete_spec_is_refused(scratch_registry, over, message):
    with pytest.raises(ValueError, match=message):
        register(_spec(**over))
    assert "toy" not in scratch_registry


def test_registered_method_is_accepted_by_the_config(scratch_registry):
    with pytest.raises(ConfigError, match="method='toy' is not one of ripple, oracle"):
        RunSettings(method="toy")
    register(_spec())
    assert RunSettings(method="toy").summary_kind == "none"
    register(_spec(name="toyrouted", exports="clusters", needs_router=True))
    assert RunSettings(method="toyrouted").summary_kind == "embedding"


def test_unknown_method_lists_the_registered_ones():
    with pytest.raises(KeyError, match="registered: ripple, oracle, fedavg"):
        get_method("fedsomething")


def test_hdb_is_allowed_only_for_methods_with_routing_weights():
    for name, spec in METHODS.items():
        if spec.routing_weights:
            assert RunSettings(method=name, refine="hdb").refine == "hdb"
        else:
            with pytest.raises(ConfigError, match="Use method='ripple' or 'oracle'"):
                RunSettings(method=name, refine="hdb")


def test_specs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        METHODS["fedavg"].models = "clusters"  # type: ignore[misc]
