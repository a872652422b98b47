"""pretrain_vae.py refuses every bad option in one line, before any bank or training work."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from ripple_flwr.cli import pretrain as pretrain_vae
from ripple_flwr.cli import pretrain_bounds as bounds
from ripple_flwr.settings import LABEL_KINDS, RunSettings


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("pretrain_vae.py: error: "), lines[0]
    return lines[0]


BAD = [
    (["-J", "5"], r"-J/-L: scattering J=5 is too large for 28x28 images.*use J <= 4"),
    (["-J", "0"], r"-J must be in \[1, 8\], got 0 \(as run-config J\); the default is 3"),
    (["-L", "0"], r"-L must be in \[1, 32\], got 0"),
    (["-K", "1"], r"-K/--num-components must be in \[2, 100\], got 1"),
    (["-K", "12"], r"-K must be <= 10, the number of class labels of mnist-5k"),
    (["--aux-size", "0"], r"--aux-size must be in \[1, 10000000\], got 0"),
    (["--aux-size", "5"], r"--aux-size: aux_size must be in \[10, 5000\)"),
    (["--aux-size", "15"], r"leaves component \d+ with 1 image\(s\) in D_aux.*raise --aux-size"),
    (["--aux-size", "4990"], r"--n-syn 200 is larger than the 10 images left outside D_aux"),
    (["--lr", "-1"], r"--lr must be a finite number in \(0, 1\], got -1 \(AdamW"),
    (["--lr", "0"], r"--lr must be a finite number in \(0, 1\], got 0 .*the default is 0.0005"),
    (["--lr", "inf"], r"--lr must be a finite number in \(0, 1\], got inf"),
    (["--steps", "0"], r"--steps must be in \[1, 10000000\], got 0"),
    (["--batch-size", "0"], r"--batch-size must be in \[1, 65536\], got 0"),
    (["--eval-every", "0"], r"--eval-every must be in \[1, 10000000\]"),
    (["--patience", "0"], r"--patience must be in \[1, 10000000\]"),
    (["--weight-decay", "-0.1"], r"--weight-decay must be a finite number in \[0, 1\]"),
    (["--ema", "1"], r"--ema must be a finite number in \[0, 1\)"),
    (["--prune", "-0.5"], r"--prune must be a finite number in \[0, 1\)"),
    (["--lambda-kl", "-1"], r"--lambda-kl must be a finite number in \[0, 10000\]"),
    (["--latent-dim", "0"], r"--latent-dim must be in \[1, 1024\]"),
    (["--n-syn", "1"], r"--n-syn must be in \[2, 10000000\]"),
    (["--bank-size", "0"], r"--bank-size must be in \[1, 1000000\]"),
    (["--heldout-clients", "0"], r"--heldout-clients must be in \[1, 100000\]"),
    (["--real-clients", "0"], r"--real-clients must be in \[1, 10000\]"),
    (["--alpha-low", "0"], r"--alpha-low must be a finite number in \(0, 1000\]"),
    (["--alpha-low", "2", "--alpha-high", "1"], r"--alpha-high must be >= --alpha-low \(2.0\)"),
    (["--rho", "1.5"], r"--rho/--explained-variance must be a finite number in \[0, 1\]"),
    (["-M", "-1"], r"-M/--svd-rank must be in \[0, 1000\], got -1"),
    (["--device", "gpu"], r"--device 'gpu' is not a device these tools run on; use auto, cpu"),
    (["--label-kind", "domain"], r"--label-kind domain: dataset 'mnist-5k' has no domain label"),
    (["--steps", "abc"], r"argument --steps: invalid int value: 'abc' \(see --help\)"),
    (["--dataset", "nope"], r"argument --dataset: invalid choice: 'nope'"),
    (["--bogus", "1"], r"unrecognized arguments: --bogus 1 \(see --help\)$"),
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
    assert parser_actions["label-kind"].choices == list(LABEL_KINDS)


# -- every numeric option has a finite range, checked before any work --------------------
@pytest.fixture
def no_data(monkeypatch, no_work):
    """Fail the test if a dataset is read (the range checks come before it) or the job runs."""

    def forbidden(*args, **kwargs):
        raise AssertionError("a dataset was loaded although an option was out of range")

    monkeypatch.setattr(pretrain_vae, "load_dataset", forbidden)


def numeric_actions():
    parser = pretrain_vae.build_parser()
    return [a for a in parser._actions if a.type in (int, float)]


ABSURD = {int: [str(10**12), str(-(10**12))], float: ["1e30", "-1e30", "inf", "-inf", "nan"]}


def test_every_numeric_option_has_a_bound():
    dests = {a.dest for a in numeric_actions()}
    assert len(dests) >= 25
    assert dests == set(bounds.BOUNDS), "add the new option's range to pretrain_bounds.BOUNDS"
    parser = pretrain_vae.build_parser()
    for dest, bound in bounds.BOUNDS.items():  # finite on both sides, default inside
        assert bound.option.low is not None and bound.option.high is not None, dest
        assert math.isfinite(bound.option.low) and math.isfinite(bound.option.high), dest
        assert parser.get_default(dest) in (None, bound.option.default), dest


@pytest.mark.parametrize("action", numeric_actions(), ids=lambda a: a.option_strings[-1])
def test_an_absurd_number_is_one_line_naming_its_option(action, tmp_path, capsys, no_data):
    names = "/".join(action.option_strings)
    out = tmp_path / "out" / "vae.pt"
    for value in ABSURD[action.type]:
        # flag=value: argparse would take "-1e30" for an option, not a value
        argv = ["--output", str(out), f"{action.option_strings[-1]}={value}"]
        assert pretrain_vae.main(argv) == 2, value
        line = one_error_line(capsys)
        assert line.startswith(f"pretrain_vae.py: error: {names} must be "), line
        assert bounds.BOUNDS[action.dest].text() in line and "got " in line, line
    assert not out.parent.exists()  # refused before even the output folder was made


PROBE = [  # what a probe found: tracebacks, hangs, and an error under the wrong name
    (["-L", "1000000"], r"^-L must be in \[1, 32\], got 1000000"),
    (["--bank-size", "1000000000"], r"^--bank-size must be in \[1, 1000000\]"),
    (["--heldout-clients", "1000000000"], r"^--heldout-clients must be in \[1, 100000\]"),
    (["--latent-dim", "1000000000"], r"^--latent-dim must be in \[1, 1024\]"),
    (["--lr", "1e30"], r"^--lr must be a finite number in \(0, 1\], got 1e\+30"),
    (["--seed", "-5"], r"^--seed must be in \[0, 4294967295\], got -5"),
    (["--batch-size", "1000000000"], r"^--batch-size must be in \[1, 65536\]"),
    (["--real-clients", "1000000000"], r"^--real-clients must be in \[1, 10000\]"),
    (["--data-seed", "-1"], r"^--data-seed must be in \[0, 4294967295\], got -1"),
    (["--bank-seed", "-1"], r"^--bank-seed must be in \[0, 4294967295\]"),
    # bounds that depend on another option
    (["--bank-size", "50"], r"^--batch-size must be <= --bank-size \(50\), got 64 .*lower"),
    (["--steps", "10000000", "--batch-size", "512"], r"^--steps must be <= 10,000,000 x 256 /"),
    (["--n-syn", "30000"], r"^--real-clients must be <= 2,000,000 / --n-syn \(30000\), got 100"),
    (["--device", "tpu"], r"^--device 'tpu' is not a device"),
    (["--device", "cuda:x"], r"^--device 'cuda:x' is not a device"),
]


@pytest.mark.parametrize(("extra", "pattern"), PROBE, ids=[" ".join(p[0]) for p in PROBE])
def test_probe_cases_are_one_line_before_any_data(extra, pattern, tmp_path, capsys, no_data):
    assert pretrain_vae.main(["--output", str(tmp_path / "vae.pt"), *extra]) == 2
    line = one_error_line(capsys).removeprefix("pretrain_vae.py: error: ")
    assert re.search(pattern, line), line


def test_cuda_is_refused_where_there_is_none(tmp_path, capsys, monkeypatch, no_data):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pretrain_vae.main(["--output", str(tmp_path / "v.pt"), "--device", "cuda"]) == 2
    assert "--device cuda: CUDA is not available on this machine" in one_error_line(capsys)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert pretrain_vae.main(["--output", str(tmp_path / "v.pt"), "--device", "cuda:2"]) == 2
    assert "this machine has 2 CUDA device(s); use cuda:0 to cuda:1" in one_error_line(capsys)


def test_rho_zero_is_off_as_in_a_run(tmp_path, monkeypatch):
    seen = {}

    def fake_pretrain(settings, output, progress):
        seen["settings"] = settings
        return None, {"history": [], "settings": {}}

    monkeypatch.setattr(pretrain_vae, "pretrain", fake_pretrain)
    monkeypatch.setattr(pretrain_vae, "_check_data", lambda a: None)
    argv = ["--output", str(tmp_path / "v.pt"), "--rho", "0", "--device", "cpu"]
    assert pretrain_vae.main([*argv, "--no-progress"]) == 0
    assert seen["settings"].explained_variance is None


def test_bounds_shared_with_a_run_are_its_declarations():
    declared = {o.key: o for o in RunSettings.fields_as_options()}
    for key in ("aux-size", "data-seed", "num-components", "J", "L", "svd-rank", "seed"):
        opt, bound = declared[key], bounds.BOUNDS[key.replace("-", "_")].option
        assert (bound.low, bound.high, bound.low_open, bound.high_open) == (
            opt.low,
            opt.high,
            opt.low_open,
            opt.high_open,
        )
    for dest, key in (("bank_size", "pretrain-bank-size"), ("steps", "pretrain-steps")):
        assert bounds.BOUNDS[dest].option.high == declared[key].high
    assert bounds.BOUNDS["n_syn"].option.high == declared["pretrain-client-size"].high
