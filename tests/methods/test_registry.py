"""The method registry: the one list of methods, and what it refuses."""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import get_args

import pytest

from ripple_flwr.app.run_config import check_run, summary_kind
from ripple_flwr.methods import registry as methods
from ripple_flwr.methods.api import Method
from ripple_flwr.methods.fedavg.server import FedAvgMethod
from ripple_flwr.methods.registry import (
    METHODS,
    Family,
    MethodSpec,
    all_options,
    get_method,
    register,
)
from ripple_flwr.settings import ConfigError, Option, RunSettings

FEDAVG = "ripple_flwr.methods.fedavg"


class Forgetful(FedAvgMethod):  # keeps whatever it likes, says nothing
    pass


def _spec(**over) -> MethodSpec:
    base = {
        "name": "toy",
        "summary": "a toy method",
        "package": FEDAVG,
        "models": "one",
        "exports": "global",
        "family": "global",
    }
    return MethodSpec(**{**base, **over})


@pytest.fixture
def scratch_registry(monkeypatch):
    monkeypatch.setattr(methods, "METHODS", dict(METHODS))
    return methods.METHODS


def test_every_registered_method_is_complete():
    assert METHODS, "no method registered"
    for name, spec in METHODS.items():
        assert name == spec.name
        spec.check()
        # Its folder: a package named after one of its entries, whose server runs it and whose
        # client.py, where there is one, gives its clients' side (rule, summary, answer).
        assert spec.package.startswith("ripple_flwr.methods."), name
        side = spec.client_side()
        assert spec.client_rule == ("sgd" if side.rule is None else spec.package.rpartition(".")[2])
        assert "state_fields" in vars(spec.method_class), f"{name} declares no state"
        # Every option it reads is parsed from a run config, and only those of registered ones.
        assert set(o.key for o in spec.options) <= set(o.key for o in all_options())
        assert spec.family in get_args(Family), f"{name} has no family"
        # A method whose K is swept holds K cluster models, and is no Ripple variant.
        assert not spec.sweeps_k or (spec.models == "clusters" and spec.family == "clustered")


def test_each_family_is_held_by_a_registered_method():
    assert {spec.family for spec in METHODS.values()} == set(get_args(Family))


def test_duplicate_name_is_refused(scratch_registry):
    with pytest.raises(ValueError, match="'fedavg' is registered already"):
        register(_spec(name="fedavg"))


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"name": ""}, "must be a lower-case word"),
        ({"name": "Fed Avg"}, "must be a lower-case word"),
        ({"summary": " "}, "has no summary"),
        ({"models": "two"}, "models='two'"),
        ({"exports": "weights"}, "exports='weights'"),
        ({"exports": "clusters"}, "exports clusters but has no router"),
        ({"family": ""}, "'toy' has no family: one of"),
        ({"family": "clusterd"}, "family='clusterd' not in"),
        ({"sweeps_k": True}, "'toy' sweeps K but holds models='one', not clusters"),
    ],
)
def test_incomplete_spec_is_refused(scratch_registry, over, message):
    with pytest.raises(ValueError, match=message):
        register(_spec(**over))
    assert "toy" not in scratch_registry


def test_registered_method_is_accepted_by_the_config(scratch_registry):
    with pytest.raises(ConfigError, match="method='toy' is not one of ripple, oracle"):
        check_run(RunSettings.of(method="toy"))
    register(_spec())
    check_run(RunSettings.of(method="toy"))
    assert summary_kind(RunSettings.of(method="toy")) == "none"
    register(_spec(name="toyrouted", exports="clusters", needs_router=True))
    assert summary_kind(RunSettings.of(method="toyrouted")) == "embedding"


def test_a_folder_whose_server_declares_no_state_or_has_no_method_is_refused(
    scratch_registry, monkeypatch
):
    """The registry imports a folder's server side only to build the method (clients never
    do), and refuses a server whose METHOD is missing or declares no state."""
    for package, method in (("toyforget", Forgetful), ("toynone", None)):
        server = types.ModuleType(f"{package}.server")
        if method is not None:
            server.METHOD = method
        monkeypatch.setitem(sys.modules, package, types.ModuleType(package))
        monkeypatch.setitem(sys.modules, f"{package}.server", server)
    spec = register(_spec(package="toyforget"))
    with pytest.raises(ValueError, match="Forgetful does not declare state_fields"):
        _ = spec.method_class
    with pytest.raises(ValueError, match="toynone.server has no METHOD class"):
        _ = _spec(name="thing", package="toynone").method_class
    with pytest.raises(ValueError, match="has no folder: register it through discover"):
        _ = _spec(name="loose", package="").method_class


def test_an_option_may_not_shadow_a_setting_or_differ_between_methods(scratch_registry):
    with pytest.raises(ValueError, match="option 'lr' is a run setting"):
        register(_spec(options=(Option("lr", float, 0.1, "again"),)))
    other_mu = Option("proximal-mu", float, 0.5, "another mu", low=0)
    with pytest.raises(ValueError, match="'proximal-mu' is declared differently"):
        register(_spec(options=(other_mu,)))


def test_unknown_method_lists_the_registered_ones():
    with pytest.raises(KeyError, match="registered: ripple, oracle, fedavg"):
        get_method("fedsomething")


def test_hdb_is_allowed_only_for_methods_with_routing_weights():
    for name, spec in METHODS.items():
        if spec.routing_weights:
            check_run(RunSettings.of(method=name, refine="hdb"))
        else:
            with pytest.raises(ConfigError, match="Use method='ripple' or 'oracle'"):
                check_run(RunSettings.of(method=name, refine="hdb"))


def test_specs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        METHODS["fedavg"].models = "clusters"  # type: ignore[misc]


def test_the_engine_is_the_one_strategy_and_every_method_lineage_is_short():
    """Exactly one class of the package subclasses Flower's ``Strategy`` (the engine), and no
    registered method inherits it: each has at most 2 ``ripple_flwr`` classes in its MRO."""
    import importlib
    import pkgutil

    from flwr.serverapp.strategy import Strategy

    import ripple_flwr
    from ripple_flwr.app.server.engine import Engine

    for info in pkgutil.walk_packages(ripple_flwr.__path__, "ripple_flwr."):
        importlib.import_module(info.name)

    def below(cls: type) -> set[type]:
        return {s for c in cls.__subclasses__() for s in {c} | below(c)}

    ours = {c for c in below(Strategy) if c.__module__.split(".")[0] == "ripple_flwr"}
    assert ours == {Engine}
    for name, spec in METHODS.items():
        lineage = [
            k
            for k in spec.method_class.__mro__
            if k.__module__.startswith("ripple_flwr.") and k is not Method  # the interface
        ]
        assert 1 <= len(lineage) <= 2, f"{name}: {[k.__name__ for k in lineage]}"
        assert not issubclass(spec.method_class, Strategy), name
        assert issubclass(spec.method_class, Method), name


def _folder_with(tmp_path, body: str) -> MethodSpec:
    """A registered-looking spec whose folder's server.py is ``body`` (never registered)."""
    import importlib
    import sys
    import textwrap

    pkg = tmp_path / "hookcheck"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "server.py").write_text(textwrap.dedent(body))
    sys.path.insert(0, str(tmp_path))
    try:
        importlib.invalidate_caches()
        sys.modules.pop("hookcheck.server", None)
        spec = MethodSpec(
            "hookcheck", "a test", models="one", exports="none", family="global",
            package="hookcheck",
        )  # fmt: skip
        spec.method_class  # noqa: B018 - the check runs on first use
        return spec
    finally:
        sys.path.remove(str(tmp_path))
        for mod in [m for m in sys.modules if m.startswith("hookcheck")]:
            del sys.modules[mod]


METHOD_BODY = """
    from ripple_flwr.methods.api import Method

    class HookCheck(Method):
        state_fields = ()

        def aggregate(self, server_round, accepted):
            return None

        def eval_payloads(self, arrays, rows):
            return [arrays] * len(rows)

        def state(self):
            return {}

        def restore(self, fields):
            pass
    {extra}
    METHOD = HookCheck
"""


def test_a_misspelt_hook_is_refused_at_registration_with_the_hook_it_looks_like(tmp_path):
    ok = METHOD_BODY.replace("{extra}", "")
    _folder_with(tmp_path, ok)  # the bare method registers
    misspelt = METHOD_BODY.replace(
        "{extra}", "\n        def sample_row(self, server_round):\n            return None\n"
    )
    with pytest.raises(ValueError, match=r"HookCheck\.sample_row .*did you mean sample_rows"):
        _folder_with(tmp_path, misspelt)


def test_a_method_without_a_required_hook_or_not_a_method_is_refused(tmp_path):
    no_restore = METHOD_BODY.replace("{extra}", "").replace(
        "def restore(self, fields):\n            pass", "pass"
    )
    with pytest.raises(ValueError, match="does not define restore"):
        _folder_with(tmp_path, no_restore)
    with pytest.raises(ValueError, match="subclass of ripple_flwr.methods.api.Method"):
        _folder_with(tmp_path, "class Plain:\n    pass\nMETHOD = Plain\n")
