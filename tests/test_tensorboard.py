"""TensorBoard event files beside metrics.jsonl (calm_core/runs/events.py): a tiny run
writes them as it goes, hyperparameters included; `calm runs --tensorboard RUN` rebuilds
them from an older run's metrics.jsonl; without the package, or with the setting off,
nothing is written and the run says why. Read back with TensorBoard's own reader."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from calm_core.runs.events import (
    TENSORBOARD,
    convert_run,
    final_counts,
    final_scalars,
    hparams_of,
    record_scalars,
    tensorboard_choice,
)
from calm_core.runs.choices_record import TensorboardChoice
from calm_core.runs.rundir import RunDir
from calm_core.training.loop import train
from tests.test_trainer import fresh_lm, small_config

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.plugins.hparams import plugin_data_pb2  # noqa: E402


def read_events(folder: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def scalar_steps(accumulator: EventAccumulator, tag: str) -> list[int]:
    return [event.step for event in accumulator.Scalars(tag)]


def hparams_in(accumulator: EventAccumulator) -> dict:
    """The session-start hyperparameters the hparams plugin reads from this run."""
    content = accumulator.PluginTagToContent("hparams")
    for raw in content.values():
        data = plugin_data_pb2.HParamsPluginData.FromString(raw)
        if data.HasField("session_start_info"):
            return {key: value for key, value in data.session_start_info.hparams.items()}
    return {}


def test_record_scalars_numbers_and_vector_summaries() -> None:
    record = {"step": 3, "elapsed": 1.5, "train/lower_loss": 0.7, "alpha/tau": [1.0, 2.0, 3.0],
              "train/note": "text", "bome/flag": True, "eval/x/ece": None}
    assert record_scalars(record) == {"time/elapsed_s": 1.5, "train/lower_loss": 0.7, "alpha/tau_mean": 2.0,
                                      "alpha/tau_min": 1.0, "alpha/tau_max": 3.0}


def test_one_tag_per_quantity_when_the_head_logs_its_summary_beside_the_vector() -> None:
    """The head logs `alpha/tau_mean` and the options scope the vector `alpha/tau` too: its
    mean is the same quantity, written once under the head's name."""
    record = {"step": 1, "alpha/tau_mean": 2.0, "alpha/tau_min": 1.0, "alpha/tau_max": 3.0,
              "alpha/l_mean": 0.5, "alpha/tau": [1.0, 2.0, 3.0], "alpha/l": [0.0, 1.0]}
    scalars = record_scalars(record)
    assert scalars == {"alpha/tau_mean": 2.0, "alpha/tau_min": 1.0, "alpha/tau_max": 3.0,
                       "alpha/l_mean": 0.5, "alpha/l_min": 0.0, "alpha/l_max": 1.0}
    assert len({tag.replace("/", "_") for tag in scalars}) == len(scalars)

def test_hparams_flatten_sections_lists_and_leave_none_out() -> None:
    flat = hparams_of({"lr": 0.1, "lora": {"r": 8, "target_modules": ["q", "v"]}, "name": None, "on": True})
    assert flat == {"lr": 0.1, "lora.r": 8, "lora.target_modules": '["q", "v"]', "on": True}


def test_final_scalars_name_variant_dataset_metric() -> None:
    rows = [{"variant": "ts", "dataset": "a/b", "acc": 0.5, "ece": float("nan"), "note": "x"}, {"acc": 1.0}]
    assert final_scalars(rows) == {"final/ts/a/b/acc": 0.5}


def test_counts_are_a_text_table_not_curves() -> None:
    rows = [{"variant": "base", "dataset": "t", "n": 40, "ece_bins": 15, "chance": 0.25, "truncated": 0, "acc": 0.5},
            {"variant": "ts", "dataset": "t", "n": 40, "ece_bins": 15, "chance": 0.25, "truncated": 0, "acc": 0.6}]
    assert final_scalars(rows) == {"final/base/t/acc": 0.5, "final/ts/t/acc": 0.6}
    assert final_counts(rows).splitlines() == ["| variant | dataset | n | ece_bins | chance | truncated |",
                                               "|---|---|---|---|---|---|",
                                               "| base | t | 40 | 15 | 0.25 | 0 |",
                                               "| ts | t | 40 | 15 | 0.25 | 0 |"]
    assert final_counts([{"variant": "ts", "dataset": "t", "acc": 0.6}]) == ""

def test_a_tiny_run_writes_curves_and_hparams(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = small_config(steps=3, method="calm", eval_every=3)
    run = RunDir.create(tmp_path, "tb-run", {"train": cfg.to_dict()})
    result = train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
    assert result.state == "finished"
    assert run.status.choices.tensorboard.written is True
    events = read_events(run.path / TENSORBOARD)
    tags = set(events.Tags()["scalars"])
    assert scalar_steps(events, "train/lower_loss") == [1, 2, 3]
    records = run.read_metrics()
    logged = [r["train/lower_loss"] for r in records if "train/lower_loss" in r]
    assert [e.value for e in events.Scalars("train/lower_loss")] == pytest.approx(logged, rel=1e-6)
    assert any(tag.startswith("eval/") for tag in tags) and any(tag.startswith("bome/") for tag in tags)
    assert not any(tag == "alpha/tau" for tag in tags)  # a vector is its summary, never one curve per option
    assert any(tag.startswith("final/") for tag in tags)  # results.json's metrics, for the hparams table
    assert not [tag for tag in tags if tag.startswith("final/") and tag.rsplit("/", 1)[-1] in ("n", "ece_bins")]
    assert len({tag.replace("/", "_") for tag in tags}) == len(tags)  # one tag per quantity
    assert "final/counts/text_summary" in events.Tags()["tensors"]  # the counts, as text
    hparams = hparams_in(events)
    assert hparams["method"].string_value == "calm" and hparams["steps"].number_value == 3
    assert hparams["lora.r"].number_value == cfg.lora.r


def test_the_setting_off_writes_nothing_and_says_so(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = small_config(steps=1, tensorboard=False)
    run = RunDir.create(tmp_path, "tb-off", {"train": cfg.to_dict()})
    train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
    assert not (run.path / TENSORBOARD).exists()
    assert run.status.choices.tensorboard == TensorboardChoice(False, "off (tensorboard = false)")


def test_without_the_package_no_error_and_the_reason_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_tensorboard(name: str, *args, **kwargs):
        if name == "tensorboard" or name.startswith("tensorboard."):
            raise ImportError("No module named 'tensorboard'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    choice = tensorboard_choice(True)
    assert choice["written"] is False and "not installed" in choice["reason"]


def written_run(root: Path) -> RunDir:
    """An older run on disk: config, metrics.jsonl and results.json, no event files."""
    run = RunDir.create(root, "older", {"train": {"method": "calm", "lr_theta": 1e-4, "lora": {"r": 4}}})
    for step in range(4):
        run.append_metrics({"step": step, "elapsed": step * 2.0, "train/lower_loss": 1.0 / (step + 1),
                            "alpha/tau": [1.0, 1.0 + step], **({"eval/test/ece": 0.1} if step == 3 else {})})
    (run.path / "results.json").write_text(json.dumps(
        {"results": [{"variant": "calm", "dataset": "test", "acc": 0.75, "ece": 0.05}]}))
    run.write_status("finished")
    return run


def test_conversion_of_an_older_run(tmp_path: Path) -> None:
    run = written_run(tmp_path)
    folder = convert_run(run.path, run.read_metrics(), run.config.train, run.results().rows,
                         created=time.time() - 100)
    events = read_events(folder)
    assert scalar_steps(events, "train/lower_loss") == [0, 1, 2, 3]
    assert [e.value for e in events.Scalars("alpha/tau_max")] == [1.0, 2.0, 3.0, 4.0]
    assert events.Scalars("final/calm/test/acc")[0].value == 0.75
    assert hparams_in(events)["lora.r"].number_value == 4
    again = read_events(convert_run(run.path, run.read_metrics(), run.config.train, [], created=None))
    assert scalar_steps(again, "train/lower_loss") == [0, 1, 2, 3]  # a second conversion replaces, not appends


def test_calm_runs_tensorboard_converts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from calm_core.cli import main

    run = written_run(tmp_path)
    assert main(["runs", "--runs-root", str(tmp_path), "--tensorboard", run.run_id]) == 0
    assert str(run.path / TENSORBOARD) in capsys.readouterr().out
    assert scalar_steps(read_events(run.path / TENSORBOARD), "eval/test/ece") == [3]


def test_a_resumed_run_hides_the_cut_steps(tmp_path: Path) -> None:
    """A resumed run's writer purges the earlier process's events after its checkpoint,
    as metrics.jsonl is cut back there: each step's curve has one value."""
    from calm_core.runs.events import EventLog

    first = EventLog.open(tmp_path)
    for step in range(1, 6):
        first.add({"step": step, "elapsed": 0.0, "train/lower_loss": 1.0})
    first.close()
    second = EventLog.open(tmp_path, purge_step=4)  # resumed after the checkpoint at step 3
    for step in range(4, 7):
        second.add({"step": step, "elapsed": 0.0, "train/lower_loss": 2.0})
    second.close()
    values = [(e.step, e.value) for e in read_events(tmp_path / TENSORBOARD).Scalars("train/lower_loss")]
    assert values == [(1, 1.0), (2, 1.0), (3, 1.0), (4, 2.0), (5, 2.0), (6, 2.0)]


def test_a_cancelled_then_resumed_run_has_each_step_once(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = small_config(steps=4)
    run = RunDir.create(tmp_path, "tb-resumed", {"train": cfg.to_dict()})

    def cancel_after_two(step, total, record):
        if step == 2:
            run.request_cancel()

    assert train(cfg, run=run, lm=fresh_lm(tiny_model_dir), progress=cancel_after_two).state == "cancelled"
    assert train(cfg, run=run, lm=fresh_lm(tiny_model_dir)).state == "finished"
    events = read_events(run.path / TENSORBOARD)
    logged = [(r["step"], r["train/lower_loss"]) for r in run.read_metrics() if "train/lower_loss" in r]
    shown = [(e.step, e.value) for e in events.Scalars("train/lower_loss")]
    assert [s for s, _ in shown] == [1, 2, 3, 4]
    assert [v for _, v in shown] == pytest.approx([v for _, v in logged], rel=1e-6)


def test_calm_runs_tensorboard_without_the_package_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from calm_core.cli import main
    from calm_core.runs import events

    run = written_run(tmp_path)
    monkeypatch.setattr(events, "tensorboard_available", lambda: (False, "the tensorboard package is not installed"))
    assert main(["runs", "--runs-root", str(tmp_path), "--tensorboard", run.run_id]) == 2
    err = capsys.readouterr().err
    assert err.startswith("calm: error: Expected the tensorboard package") and "Traceback" not in err
    assert not (run.path / TENSORBOARD).exists()
