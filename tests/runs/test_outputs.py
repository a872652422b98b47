"""The ServerApp writes only inside its output folder and never replaces a results file unasked."""

from __future__ import annotations

import pytest

from ripple_flwr.app.server.run import run_server
from ripple_flwr.runs.outputs import confined_results_path, output_root
from ripple_flwr.settings import ConfigError, RunSettings


@pytest.fixture
def root(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("RIPPLE_OUTPUT_DIR", str(out))
    return out.resolve()


def settings(**over) -> RunSettings:
    return RunSettings.of(**over)


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


# -- nothing a user saved is lost (issue 21, finding 7) ------------------------------------------
def test_a_crashed_runs_resume_file_is_kept(root):
    (root / "run.resume.npz").write_bytes(b"the crashed run's state")
    with pytest.raises(ConfigError, match="resume.npz exists already"):
        confined_results_path(settings(results_path=str(root / "run.json")))
    # Resuming from it is the run's own business: allowed.
    path = confined_results_path(
        settings(results_path=str(root / "run.json"), resume=str(root / "run.resume.npz"))
    )
    assert path == root / "run.json"


def test_a_results_path_that_is_a_folder_is_refused_before_work(root):
    (root / "run.json").mkdir()
    with pytest.raises(ConfigError, match="is a folder"):
        confined_results_path(settings(results_path=str(root / "run.json"), overwrite_results=True))


def test_the_server_never_writes_through_a_link(root, tmp_path):
    precious = tmp_path / "precious.pt"
    precious.write_bytes(b"keep me")
    (root / "run.run.pt").symlink_to(precious)
    with pytest.raises(ConfigError, match="symbolic link"):
        confined_results_path(settings(results_path=str(root / "run.json"), overwrite_results=True))
    assert precious.read_bytes() == b"keep me"


@pytest.mark.parametrize("folder", ["/", "/etc", "/usr/lib"])
def test_an_output_folder_at_a_system_folder_is_refused(monkeypatch, folder):
    monkeypatch.setenv("RIPPLE_OUTPUT_DIR", folder)
    with pytest.raises(ConfigError, match="system folder"):
        confined_results_path(settings())


def test_onboard_refuses_an_output_that_is_one_of_its_inputs(tmp_path, capsys):
    from ripple_flwr.cli.onboard import main

    run, images = tmp_path / "r.run.pt", tmp_path / "client.npy"
    run.write_bytes(b"saved run")
    images.write_bytes(b"images")
    for extra in (["--out", str(run)], ["--json", str(run)], ["--out", str(images)]):
        assert main([str(run), "--images", str(images), *extra]) == 2
        err = capsys.readouterr().err
        assert "write the output elsewhere" in err, err
    assert run.read_bytes() == b"saved run" and images.read_bytes() == b"images"


# -- server paths a run config names: no probing, no folders anywhere (issue 21, finding 6) --------
@pytest.fixture
def machine(root, tmp_path, monkeypatch):
    """The server's folders: output ``root``, cache root; no extra checkpoint folder."""
    cache = tmp_path / "machine-cache"
    monkeypatch.setenv("RIPPLE_CACHE_DIR", str(cache))
    monkeypatch.delenv("RIPPLE_CHECKPOINT_DIR", raising=False)
    return {"out": root, "cache": cache}


def checkpoint_error(path) -> str:
    from ripple_flwr.app.server.setup import resolve_checkpoint

    with pytest.raises(ConfigError) as err:
        resolve_checkpoint(settings(checkpoint=str(path)), (1, 28, 28))
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_checkpoint_outside_the_allowed_folders_is_refused_alike_whether_it_exists(
    machine, tmp_path
):
    secret = tmp_path / "secret"
    secret.mkdir()
    absent = checkpoint_error(secret / "key.pt")
    (secret / "key.pt").write_bytes(b"private")
    assert checkpoint_error(secret / "key.pt") == absent  # nothing learnt from the answer
    (secret / "key.pt").chmod(0)
    assert checkpoint_error(secret / "key.pt") == absent
    assert "checkpoint=" in absent and "outside the folders it may name" in absent
    assert "RIPPLE_CHECKPOINT_DIR" in absent and str(machine["out"]) in absent
    # A detour through a folder that does or does not exist reads the same file.
    inside = machine["out"] / "gmm.pt"
    detours = [
        f"{d}/{'../' * (len(d.parts) - 1)}{inside.relative_to('/')}"
        for d in (secret, tmp_path / "nope")
    ]
    through = [checkpoint_error(d) for d in detours]
    assert through[0] == through[1] and "not found" in through[0], through
    # Inside an allowed folder "not found" is fine, a link there may not lead out.
    assert "not found" in checkpoint_error(machine["out"] / "missing.pt")
    (machine["out"] / "link.pt").symlink_to(secret / "key.pt")
    assert "outside the folders it may name" in checkpoint_error(machine["out"] / "link.pt")


def test_a_checkpoint_may_lie_in_the_cache_root_or_the_checkpoint_folder(
    machine, tmp_path, monkeypatch
):
    from ripple_flwr.runs.outputs import confined_checkpoint

    shelf = tmp_path / "shelf"
    for allowed in (machine["out"] / "a.pt", machine["cache"] / "checkpoints" / "b.pt"):
        assert confined_checkpoint(settings(checkpoint=str(allowed))) == allowed.resolve()
    with pytest.raises(ConfigError, match="outside the folders"):
        confined_checkpoint(settings(checkpoint=str(shelf / "c.pt")))
    monkeypatch.setenv("RIPPLE_CHECKPOINT_DIR", str(shelf))
    assert confined_checkpoint(settings(checkpoint=str(shelf / "c.pt"))) == shelf / "c.pt"


def test_run_server_refuses_a_checkpoint_outside_before_any_work(machine, tmp_path):
    cfg = {
        "num-partitions": 2,
        "clients-per-round": 2,
        "checkpoint": str(tmp_path / "elsewhere.pt"),
        "results-path": str(machine["out"] / "r.json"),
    }
    with pytest.raises(ConfigError, match="checkpoint=.* is outside the folders it may name"):
        run_server(grid=None, run_config=cfg)  # no grid needed: it stops first


def test_a_resume_file_outside_the_output_folder_is_refused(machine, tmp_path):
    cfg = {"resume": str(tmp_path / "x.resume.npz"), "results-path": str(machine["out"] / "r.json")}
    with pytest.raises(ConfigError, match="resume=.* is outside the folders it may name"):
        run_server(grid=None, run_config=cfg)


def test_cache_dir_is_confined_on_server_and_client_alike(machine, tmp_path):
    from ripple_flwr.app.client.handlers import settings_from_context
    from ripple_flwr.app.run_config import parse_run_config

    outside = tmp_path / "anywhere" / "cache"
    for parse in (parse_run_config, settings_from_context):  # the ServerApp's, the ClientApp's
        with pytest.raises(ConfigError) as err:
            parse({"cache-dir": str(outside)})
        text = str(err.value)
        assert "\n" not in text and text.startswith("cache-dir=") and "RIPPLE_CACHE_DIR" in text
    assert not outside.parent.exists()  # refused before any folder was made
    for inside in (machine["out"] / "cache", machine["cache"] / "runs" / "a", "~/../../etc"):
        if isinstance(inside, str):
            with pytest.raises(ConfigError, match="cache-dir="):
                parse_run_config({"cache-dir": inside})
        else:
            assert parse_run_config({"cache-dir": str(inside)}).outputs.cache_dir == str(inside)
    run = {"cache-dir": str(outside), "results-path": str(machine["out"] / "r.json")}
    with pytest.raises(ConfigError, match="cache-dir="):
        run_server(grid=None, run_config=run)
    assert not outside.parent.exists()
