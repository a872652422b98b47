"""benchmarks/tables.py end to end on tiny federations: Table 1 (CIFAR-10, ResNet-9), Table 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_data import cifar_md5_off, offline, write_cifar10  # noqa: F401  (fixtures)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _restore_output_dir(monkeypatch):
    """tables.main points $RIPPLE_OUTPUT_DIR at its --out (it is the server); undo that after."""
    import os

    monkeypatch.setenv("RIPPLE_OUTPUT_DIR", os.environ.get("RIPPLE_OUTPUT_DIR", ""))


def run_tables(argv: list[str], capsys) -> dict:
    import tables

    assert tables.main(argv) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.usefixtures("cifar_md5_off", "offline")
def test_table1_runs_cifar10_with_resnet9_from_torchvision_files(tmp_path, capsys):
    write_cifar10(tmp_path / "data", per_batch=40, n_test=20)
    out = tmp_path / "runs"
    argv = [
        "table1",
        "--dataset", "cifar10", "--data-root", str(tmp_path / "data"), "--model", "resnet9",
        "--clients", "4", "--clients-per-round", "4", "--partition-size", "30",
        "--aux-size", "50", "--rounds", "1",
        "--eval-every", "1", "--methods", "fedavg", "ifca", "--out", str(out),
    ]  # fmt: skip
    line = run_tables(argv, capsys)
    rows = line["rows"]
    assert set(rows) == {"fedavg", "ifca"}
    assert rows["fedavg"]["bytes_ratio_vs_fedavg"] == pytest.approx(1.0)
    # IFCA: K = 10 models down and one up per client, against FedAvg's one and one.
    assert rows["ifca"]["bytes_ratio_vs_fedavg"] == pytest.approx((10 + 1) / 2)
    res = json.loads((out / "ifca-seed0.json").read_text())
    assert res["settings"]["model"] == "resnet9"
    assert res["federation"]["image_shape"] == [3, 32, 32]
    assert len(res["assignment"]["labels"]) == 4
    assert (out / "ifca-seed0.assignment.png").stat().st_size > 1000
    assert not (out / "fedavg-seed0.assignment.png").exists()  # one model: nothing to draw
    md = (out / "table1.md").read_text()
    assert "| ifca |" in md and "| fedavg |" in md and (out / "table1.png").is_file()

    # --reuse: a second call reads the finished runs instead of training again.
    before = (out / "ifca-seed0.json").stat().st_mtime_ns
    again = run_tables([*argv, "--reuse"], capsys)
    assert (out / "ifca-seed0.json").stat().st_mtime_ns == before
    assert again["rows"]["ifca"]["final_accuracy"] == rows["ifca"]["final_accuracy"]


def test_table2_scores_new_clients_of_every_method(tmp_path, capsys):
    out = tmp_path / "runs"
    argv = [
        "table2",
        "--dataset", "mnist-5k", "--clients", "6", "--clients-per-round", "3",
        "--partition-size", "60", "--aux-size", "300", "--new-clients", "2",
        "--rounds", "1", "--eval-every", "1",
        "--alphas-train", "0.1", "--alphas-test", "1", "100", "--methods", "fedavg", "ifca", "cfl",
        "--out", str(out),
    ]  # fmt: skip
    line = run_tables(argv, capsys)
    for name in ("fedavg", "ifca", "cfl"):
        cell = line["cells"][name]["0.1/1"]
        res = json.loads((out / f"{name}-a0.1-t1-seed0.json").read_text())
        assert cell["zero_shot_accuracy"] == res["zero_shot"]["accuracy"]["weighted_mean"]
        assert res["zero_shot"]["clients"] == 2
    ifca = json.loads((out / "ifca-a0.1-t1-seed0.json").read_text())
    assert all(c["chosen"] in range(10) for c in ifca["zero_shot"]["per_client"])
    md = (out / "table2.md").read_text()
    assert "alpha_train/alpha_test 0.1/1 " in md and "alpha_train/alpha_test 0.1/100 " in md
    # The second alpha_test resumed the finished training: same rounds, other new clients.
    t100 = json.loads((out / "ifca-a0.1-t100-seed0.json").read_text())
    assert t100["settings"]["alpha-new"] == 100.0 and t100["settings"]["resume"]
    assert t100["rounds"] == ifca["rounds"]
    assert (
        line["cells"]["ifca"]["0.1/100"]["zero_shot_accuracy"]
        == (t100["zero_shot"]["accuracy"]["weighted_mean"])
    )
