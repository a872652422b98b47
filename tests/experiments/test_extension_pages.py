"""The extension pages run: their Python blocks are executed in order, so a page that does not
work fails CI, and the example of adding-a-method.md is checked against the repository's code.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ripple_flwr.app.server.replies import defences
from ripple_flwr.data import registry as datasets
from ripple_flwr.methods import registry as methods

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def python_blocks(page: str) -> list[str]:
    """The ```python blocks of ``docs/<page>``, in order."""
    blocks = BLOCK.findall((ROOT / "docs" / page).read_text())
    assert blocks, f"docs/{page} has no python block"
    return blocks


@pytest.fixture
def scratch_registries(monkeypatch, tmp_path):
    """Registries a page may add to without touching the real ones, and an output folder."""
    monkeypatch.setattr(methods, "METHODS", dict(methods.METHODS))
    monkeypatch.setattr(datasets, "DATASETS", dict(datasets.DATASETS))
    monkeypatch.setattr(defences, "REPLY_DEFENCES", list(defences.REPLY_DEFENCES))
    monkeypatch.chdir(tmp_path)  # the pages write under outputs/, the default output folder
    monkeypatch.setenv("RIPPLE_OUTPUT_DIR", str(tmp_path / "outputs"))
    monkeypatch.setenv("RIPPLE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def test_adding_a_method_shows_the_repository_code_and_runs(scratch_registries, monkeypatch):
    """The FedAvgM folder on the page is the repository's, and a new method with its own client
    rule is one new folder: the page writes it, the registry finds it, it runs 2 rounds."""
    import sys

    import ripple_flwr.methods

    spec, server, run, toy, _ = python_blocks("adding-a-method.md")
    folder = ROOT / "ripple_flwr/methods/fedavgm"
    assert spec == (folder / "spec.py").read_text(), "the page's spec.py is not the file"
    assert server == (folder / "server.py").read_text(), "the page's server.py is not the file"
    namespace = {}
    exec(compile(run, "adding-a-method.md", "exec"), namespace)
    assert 0.0 <= namespace["results"]["final_accuracy"] <= 1.0
    monkeypatch.setattr(ripple_flwr.methods, "__path__", list(ripple_flwr.methods.__path__))
    try:
        exec(compile(toy, "adding-a-method.md", "exec"), namespace := {})
        assert namespace["results"]["settings"]["toyprox-mu"] == 0.05
        # Found in its folder, the only place the page wrote to, and built from it.
        assert methods.get_method("toyprox").package == "ripple_flwr.methods.toyprox"
        assert "ripple_flwr.methods.toyprox.server" in sys.modules
    finally:
        for name in [m for m in sys.modules if m.startswith("ripple_flwr.methods.toyprox")]:
            del sys.modules[name]


def test_a_method_with_its_own_client_summary_is_one_folder_and_runs(
    scratch_registries, monkeypatch
):
    """The page's toylabels: files in one new folder only; its clients compute its summary
    (client.py), its server places them from it, and it runs 2 rounds."""
    import sys

    import ripple_flwr.methods

    toy_summary = python_blocks("adding-a-method.md")[4]
    monkeypatch.setattr(ripple_flwr.methods, "__path__", list(ripple_flwr.methods.__path__))
    try:
        exec(compile(toy_summary, "adding-a-method.md", "exec"), namespace := {})
        results = namespace["results"]
        assert results["settings"]["method"] == "toylabels"
        assert set(results["assignment"]["labels"]) <= {0, 1}
        spec = methods.get_method("toylabels")
        assert spec.package == "ripple_flwr.methods.toylabels"
    finally:
        for name in [m for m in sys.modules if m.startswith("ripple_flwr.methods.toylabels")]:
            del sys.modules[name]


def test_adding_a_dataset_registers_refuses_and_runs(scratch_registries):
    namespace: dict = {"__name__": "adding_a_dataset"}
    for block in python_blocks("adding-a-dataset.md"):
        exec(compile(block, "adding-a-dataset.md", "exec"), namespace)
    assert "sklearn-digits" in datasets.available_datasets()
    assert "rotated-sklearn-digits" in datasets.available_datasets()
    assert namespace["results"]["settings"]["dataset"] == "sklearn-digits"


def test_a_dataset_entry_is_checked_when_registered(scratch_registries):
    def load(root=None):
        raise AssertionError("not loaded")

    for spec, why in (
        (datasets.DatasetSpec("Digits", load, (1, 8, 8)), "must be a lower-case word"),
        (datasets.DatasetSpec("rotated-x", load, (1, 8, 8)), "is derived, not registered"),
        (datasets.DatasetSpec("x", load, (2, 8, 8)), r"is not \(1 or 3, H, W\)"),
        (datasets.DatasetSpec("x", None, (1, 8, 8)), "load must be callable"),
        (datasets.DatasetSpec("mnist-5k", load, (1, 28, 28)), "registered already"),
    ):
        with pytest.raises(ValueError, match=why):
            datasets.register_dataset(spec)


def test_adding_a_defence_drops_the_hostile_client_and_only_it(scratch_registries):
    namespace: dict = {"__name__": "adding_a_defence"}
    for block in python_blocks("adding-a-defence.md"):
        exec(compile(block, "adding-a-defence.md", "exec"), namespace)
    assert [d.name for d in defences.REPLY_DEFENCES] == ["method-check", "loss-cap", "update-bound"]


def test_a_defence_is_checked_when_registered(scratch_registries):
    def keep_all(strategy, server_round, accepted):
        return [None] * len(accepted)

    for make, why in (
        (lambda: defences.ReplyDefence("Cap", keep_all, "x"), "must be a lower-case word"),
        (lambda: defences.ReplyDefence("cap", None, "x"), "check must be callable"),
        (lambda: defences.ReplyDefence("cap", keep_all, " "), "has no doc"),
    ):
        with pytest.raises(ValueError, match=why):
            make()
    cap = defences.ReplyDefence("cap", keep_all, "keeps every reply")
    with pytest.raises(ValueError, match="no defence 'nothing' to insert before"):
        defences.register_defence(cap, before="nothing")
    defences.register_defence(cap)
    with pytest.raises(ValueError, match="'cap' is registered already"):
        defences.register_defence(cap)
