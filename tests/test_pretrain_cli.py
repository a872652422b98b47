"""pretrain_vae.py refuses every bad option in one line, before any bank or training work."""

from __future__ import annotations

import json
import re

import pytest

from ripple_flwr.cli import pretrain as pretrain_vae


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if the job itself starts."""

    def forbidden(*args, **kwargs):
        raise AssertionError("pretrain() ran although an option was bad")

    monkeypatch.setattr(pretrain_vae, "pretrain", forbidden)


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("pretrain_vae.py: error: "), lines[0]
    return lines[0]


BAD = [
    (["-J", "5"], r"-J/-L: scattering J=5 is too large for 28x28 images.*use J <= 4"),
    (["-J", "0"], r"-J must be >= 1"),
    (["-L", "0"], r"-L must be >= 1"),
    (["-K", "1"], r"K \(num-components\) must be >= 2"),
    (["-K", "12"], r"-K must be <= 10, the number of class labels of mnist-5k"),
    (["--aux-size", "0"], r"--aux-size must be >= 1"),
    (["--aux-size", "5"], r"--aux-size: aux_size must be in \[10, 5000\)"),
    (["--aux-size", "15"], r"leaves component \d+ with 1 image\(s\) in D_aux.*raise --aux-size"),
    (["--aux-size", "4990"], r"--n-syn 200 is larger than the 10 images left outside D_aux"),
    (["--lr", "-1"], r"--lr must be a number > 0 \(AdamW learning rate"),
    (["--lr", "0"], r"--lr must be a number > 0"),
    (["--lr", "inf"], r"--lr must be a number > 0"),
    (["--steps", "0"], r"--steps must be >= 1"),
    (["--batch-size", "0"], r"--batch-size must be >= 1"),
    (["--eval-every", "0"], r"--eval-every must be >= 1"),
    (["--patience", "0"], r"--patience must be >= 1"),
    (["--weight-decay", "-0.1"], r"--weight-decay must be >= 0"),
    (["--ema", "1"], r"--ema must be in \[0, 1\)"),
    (["--prune", "-0.5"], r"--prune must be in \[0, 1\)"),
    (["--lambda-kl", "-1"], r"--lambda-kl must be a number >= 0"),
    (["--latent-dim", "0"], r"--latent-dim must be >= 1"),
    (["--n-syn", "1"], r"--n-syn must be >= 2"),
    (["--bank-size", "0"], r"--bank-size must be >= 1"),
    (["--heldout-clients", "0"], r"--heldout-clients must be >= 1"),
    (["--real-clients", "0"], r"--real-clients must be >= 1"),
    (["--alpha-low", "0"], r"--alpha-low must be a number > 0"),
    (["--alpha-low", "2", "--alpha-high", "1"], r"--alpha-high must be >= --alpha-low"),
    (["--rho", "1.5"], r"--rho must be in \(0, 1\]"),
    (["-M", "-1"], r"-M/--svd-rank must be >= 0"),
    (["--device", "gpu"], r"--device 'gpu' is not a torch device"),
    (["--label-kind", "domain"], r"--label-kind domain: dataset 'mnist-5k' has no domain label"),
    (["--steps", "abc"], r"argument --steps: invalid int value: 'abc' \(see --help\)"),
    (["--dataset", "nope"], r"argument --dataset: invalid choice: 'nope'"),
]


@pytest.mark.parametrize(("extra", "pattern"), BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_option_is_one_line_before_any_work(extra, pattern, tmp_path, capsys, no_work):
    argv = ["--output", str(tmp_path / "vae.pt"), "--cache-dir", "", "--no-progress", *extra]
    assert pretrain_vae.main(argv) == 2
    line = one_error_line(capsys)
    assert re.search(pattern, line), line


def test_output_not_writable_is_refused_first(tmp_path, capsys, no_work):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    # The output check comes before the data: even with a bad -J it names --output.
    argv = ["--output", str(blocker / "sub" / "vae.pt"), "--no-progress"]
    assert pretrain_vae.main(argv) == 2
    line = one_error_line(capsys)
    assert re.search(r"--output: cannot write to .*a-file/sub", line), line
    assert pretrain_vae.main(["--output", str(tmp_path), "--no-progress"]) == 2
    assert "is a folder; give a file path" in one_error_line(capsys)
    argv = ["--output", str(tmp_path / "x.pt"), "--report", str(blocker / "r.json")]
    assert pretrain_vae.main(argv) == 2
    assert "--report: cannot write to" in one_error_line(capsys)
    argv = ["--output", str(tmp_path / "x.pt"), "--report", str(tmp_path / "x.pt")]
    assert pretrain_vae.main(argv) == 2
    assert "is the checkpoint path" in one_error_line(capsys)
    argv = ["--output", str(tmp_path / "x.pt"), "--cache-dir", str(blocker / "cache")]
    assert pretrain_vae.main(argv) == 2
    assert "--cache-dir: cannot write to" in one_error_line(capsys)
    assert not list(tmp_path.glob(".ripple-write-test-*"))  # the probe file is removed


def test_good_options_reach_the_job_with_their_settings(tmp_path, capsys, monkeypatch):
    seen = {}

    def fake_pretrain(settings, output, progress):
        seen.update(settings=settings, output=output, progress=progress)
        return None, {"routing_l1_heldout": 0.1, "history": [], "settings": {}}

    monkeypatch.setattr(pretrain_vae, "pretrain", fake_pretrain)
    out = tmp_path / "deep" / "er" / "vae.pt"
    argv = ["--output", str(out), "-K", "4", "--aux-size", "300", "--lr", "1e-3", "--no-progress"]
    assert pretrain_vae.main(argv) == 0
    s = seen["settings"]
    assert (s.num_components, s.aux_size, s.train.lr) == (4, 300, 1e-3)
    assert seen["output"] == str(out) and seen["progress"] is False
    assert out.parent.is_dir()  # created by the writability check
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["routing_l1_heldout"] == 0.1
    assert "checkpoint:" in capsys.readouterr().out


def test_options_shared_with_a_run_are_its_declarations():
    """pretrain_vae.py's data and embedding flags: the run's defaults, choices and docs."""
    from ripple_flwr.settings import RunSettings

    declared = {o.key: o for o in RunSettings.fields_as_options()}
    parser_actions = {}
    parser = pretrain_vae.argparse.ArgumentParser()
    group = parser.add_argument_group("x")
    for key in pretrain_vae.SHARED_SETTINGS:
        pretrain_vae._setting(group, key)
        parser_actions[key] = parser._actions[-1]
    defaults = vars(pretrain_vae.parse_args([]))
    for key in pretrain_vae.SHARED_SETTINGS:
        opt, action = declared[key], parser_actions[key]
        assert action.help == opt.doc and action.type is opt.type
        if key != "data-root":  # None here means the loader's default, "" in a run
            assert defaults[opt.name] == opt.default, key
    assert parser_actions["label-kind"].choices == ["class", "domain"]
