"""Experiment tracking: one finished run sent to MLflow, TensorBoard or W&B (offline), then
read back with each tracker's own reader; nothing written outside the folder it was given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ripple_flwr.runs import tracking
from ripple_flwr.runs.tracking import TrackerError, track_run, tracked_run, tracker_folder
from ripple_flwr.settings import ConfigError, RunSettings

ROUNDS = 6
EVAL_ROUNDS = (2, 4, 6)
ACCURACY = {2: 0.41, 4: 0.5625, 6: 0.6875}  # weighted mean per evaluation
NAME = "ripple-seed7-tracked"


def results_dict() -> dict:
    """A results dict of the real shape (the server's keys, a Ripple run with new clients)."""
    settings = RunSettings.of(
        method="ripple",
        seed=7,
        num_server_rounds=ROUNDS,
        eval_every=2,
        num_partitions=6,
        clients_per_round=3,
    ).to_dict()
    evaluations = [
        {
            "round": r,
            "bytes_down": 7_210_224,
            "wall_seconds": 0.02,
            "expected": 6,
            "population": 6,
            "scored": 6,
            "coverage": 1.0,
            "accuracy": {
                "weighted_mean": ACCURACY[r],
                "mean": ACCURACY[r] - 0.01,
                "std": 0.2,
                "min": 0.1,
                "max": 0.9,
            },
            "loss": {"weighted_mean": 2.3 - r / 10, "mean": 2.3 - r / 10, "std": 0.1},
            "clients": [
                {"partition": p, "accuracy": ACCURACY[r], "loss": 2.0, "num_examples": 12}
                for p in range(6)
            ],
            "failed": [],
        }
        for r in EVAL_ROUNDS
    ]
    rounds = [
        {
            "round": r,
            "sampled": [0, 2, 4],
            "bytes_down": 3_605_112,
            "bytes_up": 3_605_112 - r,
            "server_seconds": 0.02,
            "wall_seconds": 0.2 + r / 100,
            "received": 3,
            "dropped": [{"partition": 4, "reason": "update norm"}] if r == 3 else [],
            "train_loss": 2.4 - r / 10,
            "num_examples": 144,
            "refused": None,
        }
        for r in range(1, ROUNDS + 1)
    ]
    return {
        "results_version": 1,
        "settings": settings,
        "federation": {"source": "benchmark", "dataset": "mnist-5k", "num_classes": 10},
        "checkpoint": {"checkpoint": "/x/gmm-vae.pt", "source": "cache", "report": None},
        "pretrained": None,
        "embedding_dp": None,
        "model_bytes": 1_201_704,
        "embedding_bytes_per_client": 7812,
        "final_accuracy": 0.5533,
        "final_accuracy_coverage": 1.0,
        "accuracy_per_round": {
            str(e["round"]): {k: e["accuracy"][k] for k in ("weighted_mean", "mean", "std")}
            for e in evaluations
        },
        "saved_run": None,
        "num_models": 4,
        "final_accuracy_weighting": "clients",
        "zero_shot_accuracy": 0.375,
        "train_loss_per_round": {str(r["round"]): r["train_loss"] for r in rounds},
        "bytes_per_round": {
            str(r["round"]): {"down": r["bytes_down"], "up": r["bytes_up"]} for r in rounds
        },
        "clients": {"partition_ids": list(range(6))},
        "rounds": rounds,
        "evaluations": evaluations,
        "timings": {"data": 2.0, "pretrain_or_load": 0.5, "query": 0.2, "rounds": 1.3,
                    "evaluation": 0.06, "total": 4.25},
        "late_joiners": [],
        "routing": {"l1": 0.3698, "ari": 1.0, "ari_clients": 2, "ari_threshold": 0.9,
                    "weights": [[0.25] * 4] * 6, "source": "gmm-vae", "out_of_domain": []},
        "zero_shot": {"clients": 2, "accuracy": {"weighted_mean": 0.375, "mean": 0.375},
                      "routing": {"l1": 0.2165, "ari": None}},
    }  # fmt: skip


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """The tracker's folder; the working folder and home stay empty (checked after)."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir(), cwd.mkdir()
    monkeypatch.chdir(cwd)
    for var in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"):
        monkeypatch.setenv(var, str(home))
    for var in ("WANDB_API_KEY", "WANDB_DIR", "WANDB_CACHE_DIR", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    yield tmp_path / "tracking"
    assert sorted(p.name for p in cwd.rglob("*")) == [], "written to the working folder"
    assert sorted(p.name for p in home.rglob("*")) == [], "written to the home folder"


def test_what_is_tracked_comes_from_the_results_file():
    run = tracked_run(results_dict(), name=NAME)
    assert run.name == NAME and run.step == ROUNDS
    assert run.settings["method"] == "ripple" and run.settings["seed"] == 7
    assert run.series["accuracy/weighted_mean"] == ACCURACY
    assert run.series["train/loss"][1] == pytest.approx(2.3)
    assert run.series["train/dropped"][3] == 1 and run.series["bytes/up"][6] == 3_605_106
    assert run.figures["final/accuracy"] == 0.5533
    assert run.figures["final/zero_shot_accuracy"] == 0.375
    assert run.figures["final/wall_seconds"] == 4.25
    assert run.figures["routing/l1"] == 0.3698 and run.figures["zero_shot/routing/l1"] == 0.2165
    assert "zero_shot/routing/ari" not in run.figures  # None: left out
    assert run.figures["bytes/total_down"] == 6 * 3_605_112
    # Without the evaluations block, the per-round summary still gives the accuracy series.
    res = results_dict()
    del res["evaluations"]
    assert tracked_run(res).series["accuracy/weighted_mean"] == ACCURACY
    assert tracked_run(res).name == "ripple-seed7"


def test_mlflow_run_read_back_with_mlflow_client(sandbox):
    from mlflow.tracking import MlflowClient

    db = track_run(results_dict(), "mlflow", sandbox, name=NAME)
    assert db == sandbox.resolve() / "mlflow.db" and db.is_file()
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name("ripple-flwr")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.run_name == NAME and run.info.status == "FINISHED"
    settings = results_dict()["settings"]
    assert run.data.params == {k: str(v) for k, v in settings.items()}
    history = client.get_metric_history(run.info.run_id, "accuracy/weighted_mean")
    assert {m.step: m.value for m in history} == ACCURACY
    loss = client.get_metric_history(run.info.run_id, "train/loss")
    assert [m.step for m in sorted(loss, key=lambda m: m.step)] == list(range(1, ROUNDS + 1))
    assert run.data.metrics["final/accuracy"] == 0.5533
    assert run.data.metrics["final/zero_shot_accuracy"] == 0.375
    assert run.data.metrics["final/wall_seconds"] == 4.25
    assert run.data.metrics["routing/l1"] == 0.3698
    # A second run goes to the same store and experiment.
    track_run(results_dict(), "mlflow", sandbox, name=NAME + "-again")
    assert len(client.search_runs([exp.experiment_id])) == 2


def test_tensorboard_events_read_back_with_event_accumulator(sandbox):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    folder = track_run(results_dict(), "tensorboard", sandbox, name=NAME)
    assert folder == sandbox.resolve() / NAME
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    acc = {e.step: e.value for e in events.Scalars("accuracy/weighted_mean")}
    assert acc == pytest.approx(ACCURACY, rel=1e-6)  # stored as float32
    assert [e.step for e in events.Scalars("train/loss")] == list(range(1, ROUNDS + 1))
    final = events.Scalars("final/accuracy")
    assert [e.step for e in final] == [ROUNDS] and final[0].value == pytest.approx(0.5533)
    assert events.Scalars("final/zero_shot_accuracy")[0].value == pytest.approx(0.375)
    assert events.Scalars("final/wall_seconds")[0].value == pytest.approx(4.25)
    assert events.Scalars("routing/l1")[0].value == pytest.approx(0.3698)
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
    assert hparams["method"].string_value == "ripple"
    assert hparams["seed"].number_value == 7
    assert hparams["num-server-rounds"].number_value == ROUNDS
    assert set(hparams) == set(results_dict()["settings"])
    # The same name again: a folder of its own, never mixed into the first run's.
    assert track_run(results_dict(), "tensorboard", sandbox, name=NAME).name == NAME + "-2"


def wandb_inspect(run_folder: Path, *flags: str) -> str:
    """W&B's own reader of a run's .wandb transaction log (``wandb leet inspect``)."""
    out = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", str(run_folder), "--json", *flags],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


def test_wandb_offline_run_read_back_with_wandb_inspect(sandbox):
    folder = track_run(results_dict(), "wandb", sandbox, name=NAME)
    assert folder.parent == sandbox.resolve() / "wandb" and folder.name.startswith("offline-run-")
    assert len(list(folder.glob("run-*.wandb"))) == 1
    state = json.loads(wandb_inspect(folder, "--summary"))
    assert state["state"] == "finished" and state["name"] == NAME
    assert state["project"] == "ripple-flwr"
    config = {k: v for k, v in state["config"].items() if k != "_wandb"}
    assert config == results_dict()["settings"]
    summary = state["summary"]
    assert summary["final/accuracy"] == 0.5533
    assert summary["final/zero_shot_accuracy"] == 0.375
    assert summary["final/wall_seconds"] == 4.25
    assert summary["routing/l1"] == 0.3698
    records = [json.loads(line) for line in wandb_inspect(folder).splitlines() if line.strip()]
    history = [r["history"]["item"] for r in records if r["type"] == "history"]
    assert [h["_step"] for h in history] == list(range(1, ROUNDS + 1))
    acc = {h["_step"]: h["accuracy/weighted_mean"] for h in history if "accuracy/mean" in h}
    assert acc == ACCURACY
    assert os.environ.get("WANDB_DIR") is None  # W&B's folders were set for the call only


def test_an_unknown_tracker_is_refused_in_one_line_before_anything_is_written(tmp_path):
    with pytest.raises(TrackerError) as err:
        track_run(results_dict(), "neptune", tmp_path / "t")
    assert str(err.value) == "tracker='neptune' is not one of none, mlflow, tensorboard, wandb"
    assert track_run(results_dict(), "none", tmp_path / "t") is None
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("tracker", ["mlflow", "tensorboard", "wandb"])
def test_a_missing_package_names_the_extra(tracker, tmp_path, monkeypatch):
    real = tracking.importlib.util.find_spec
    module = tracking.PACKAGES[tracker][0]

    def find_spec(name, *args):
        return None if name == module else real(name, *args)

    monkeypatch.setattr(tracking.importlib.util, "find_spec", find_spec)
    with pytest.raises(TrackerError) as err:
        track_run(results_dict(), tracker, tmp_path / "t")
    assert 'pip install "ripple-flwr[track]"' in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "t").exists()


def test_run_config_keys(tmp_path, monkeypatch):
    from ripple_flwr.app.run_config import parse_run_config

    monkeypatch.setenv("RIPPLE_OUTPUT_DIR", str(tmp_path / "outputs"))
    with pytest.raises(ConfigError, match=r"^tracker='comet' is not one of none, mlflow"):
        parse_run_config({"tracker": "comet"})
    assert tracker_folder(parse_run_config({})) is None
    settings = parse_run_config({"tracker": "tensorboard"})
    assert tracker_folder(settings) == (tmp_path / "outputs" / "tracking").resolve()
    inside = parse_run_config({"tracker": "mlflow", "tracker-dir": str(tmp_path / "outputs/ml")})
    assert tracker_folder(inside) == (tmp_path / "outputs" / "ml").resolve()
    outside = parse_run_config({"tracker": "mlflow", "tracker-dir": str(tmp_path / "elsewhere")})
    with pytest.raises(ConfigError, match="tracker-dir=.* is outside the folders it may name"):
        tracker_folder(outside)


def test_a_single_run_with_tracker_set_is_tracked_when_its_results_are_written(cache_dir, tmp_path):
    from conftest import FakeGrid, tiny_run_config

    from ripple_flwr.app.server.run import run_server

    cfg = tiny_run_config(cache_dir, tracker="tensorboard", **{"tracker-dir": str(tmp_path / "tb")})
    cfg["results-path"] = str(tmp_path / "tracked.json")
    path = run_server(FakeGrid(cfg), cfg)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb" / "tracked"))
    events.Reload()
    res = json.loads(path.read_text())
    assert res["settings"]["tracker"] == "tensorboard"
    final = events.Scalars("final/accuracy")[0]
    assert final.value == pytest.approx(res["final_accuracy"], rel=1e-6)
    assert final.step == cfg["num-server-rounds"]


def test_a_tracker_that_fails_after_the_run_loses_nothing(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("RIPPLE_OUTPUT_DIR", str(tmp_path))
    path = tmp_path / "run.json"
    path.write_text(json.dumps(results_dict()))
    (tmp_path / "tracking").write_text("a file where the folder should be")
    settings = RunSettings.of(tracker="tensorboard", num_partitions=6, clients_per_round=3)
    with caplog.at_level("WARNING", logger="flwr.ripple"):
        assert tracking.track_finished_run(settings, path) is None
    assert "could not send the run to tensorboard" in caplog.text
    assert json.loads(path.read_text()) == results_dict()
