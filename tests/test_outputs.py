"""The ServerApp writes only inside its output folder and never replaces a results file unasked."""

from __future__ import annotations

import pytest

from ripple_flwr.app.server import run_server
from ripple_flwr.runs.outputs import confined_results_path, output_root
from ripple_flwr.settings import ConfigError, RunSettings


@pytest.fixture
def root(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("RIPPLE_OUTPUT_DIR", str(out))
    return out.resolve()


def settings(**over) -> RunSettings:
    return RunSettings(**over)


def test_default_and_relative_paths_stay_inside(root, monkeypatch):
    assert output_root() == root
    path = confined_results_path(settings())
    assert path.parent == root and path.name.startswith("ripple-ripple-seed0-")
    monkeypatch.chdir(root)
    assert confined_results_path(settings(results_path="sub/run.json")) == root / "sub/run.json"


@pytest.mark.parametrize("escape", ["../x.json", "/etc/x.json", "sub/../../x.json"])
def test_escaping_paths_are_refused_with_the_fix(root, monkeypatch, escape):
    monkeypatch.chdir(root)
    with pytest.raises(ConfigError, match=r"outside the server's output folder.*RIPPLE_OUTPUT_DIR"):
        confined_results_path(settings(results_path=escape))


def test_a_link_out_of_the_folder_is_refused(root, tmp_path):
    (root / "link").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(ConfigError, match="outside the server's output folder"):
        confined_results_path(settings(results_path=str(root / "link" / "x.json")))


def test_existing_results_are_kept_unless_overwrite(root):
    (root / "run.json").write_text("{}")
    with pytest.raises(ConfigError, match="exists already.*overwrite-results=true"):
        confined_results_path(settings(results_path=str(root / "run.json")))
    (root / "other.run.pt").write_bytes(b"x")  # a side file counts too
    with pytest.raises(ConfigError, match="other.run.pt exists already"):
        confined_results_path(settings(results_path=str(root / "other.json")))
    path = str(root / "run.json")
    assert str(confined_results_path(settings(results_path=path, overwrite_results=True))) == path


def test_run_server_refuses_before_any_work(root, tmp_path):
    outside = tmp_path / "elsewhere.json"
    cfg = {"num-partitions": 2, "clients-per-round": 2, "results-path": str(outside)}
    with pytest.raises(ConfigError, match="outside the server's output folder"):
        run_server(grid=None, run_config=cfg)  # no grid needed: it stops first
    assert not outside.exists()
