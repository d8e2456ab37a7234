"""Launching runs and estimating their cost (the Train page's numbers)."""

from __future__ import annotations

import json
from pathlib import Path

from calm_core.workspace.launch import estimate_step_seconds, past_step_seconds
from calm_core.io import atomic_write_json
from calm_core.runs.rundir import RunDir
from calm_core.training.config import TrainConfig


def _finished_run(root: Path, run_id: str, method: str, model: str, step_times: list[float]) -> RunDir:
    run = RunDir.create(root, run_id, {"train": {"method": method, "model": model}, "method": method})
    for step, seconds in enumerate(step_times, start=1):
        run.append_metrics({"step": step, "elapsed": float(step), "train/step_time": seconds})
    run.write_status("running")
    atomic_write_json(run.path / "results.json", {"results": []})  # a finished training run always has one
    run.write_status("finished", step=len(step_times), total_steps=len(step_times))
    return run


def test_past_step_seconds_uses_finished_runs_of_the_same_method_and_model(tmp_path: Path) -> None:
    _finished_run(tmp_path, "a", "calm", "embedded", [1.0, 3.0, 2.0])  # median 2
    _finished_run(tmp_path, "b", "sft", "embedded", [9.0])
    _finished_run(tmp_path, "c", "calm", "/other/model", [9.0])
    assert past_step_seconds("calm", "embedded", tmp_path) == 2.0
    assert past_step_seconds("cft", "embedded", tmp_path) is None
    seconds, source = estimate_step_seconds(TrainConfig(method="calm"), tmp_path)
    assert seconds == 2.0 and "recent finished" in source


def test_estimate_falls_back_to_the_benchmark_file_then_says_unknown(tmp_path: Path) -> None:
    from calm_core.workspace.launch import BENCH_FILE
    from calm_core.paths import PROJECT_ROOT

    bench = json.loads((PROJECT_ROOT / BENCH_FILE).read_text())
    quick = TrainConfig.preset("quick", method="calm")
    row = next(r for r in bench["rows"] if r["method"] == "calm" and r["inner_steps"] == quick.bilevel.inner_steps
               and r.get("inner_start", "theta") == quick.bilevel.inner_start and r["mode"] == "cached")
    cfg = TrainConfig.preset("quick", method="calm", batch_size=2 * row["batch_size"], inner_steps=row["inner_steps"],
                             inner_start=row.get("inner_start", "theta"))
    seconds, source = estimate_step_seconds(cfg, tmp_path)
    assert seconds == 2 * row["seconds_per_step"] and BENCH_FILE in source
    seconds, source = estimate_step_seconds(TrainConfig(method="calm", model="/some/dir"), tmp_path)
    assert seconds is None and "first run" in source


def test_a_run_on_a_split_records_how_the_split_was_made() -> None:
    from calm_core.data.split import split_dataset
    from calm_core.workspace.launch import create_run

    record = split_dataset("builtin/capitals/train", sizes=(0.6, 0.2, 0.2), seed=3, out="caps")
    cfg = TrainConfig(method="calm", train_data=record.names["train"], heldout_data=record.names["heldout"],
                      eval_data=(record.names["test"], "builtin/units/test"))
    run = create_run(cfg)
    recorded = run.config["splits"]["caps"]
    assert recorded["source"] == "builtin/capitals/train" and recorded["seed"] == 3 and recorded["stratify"]
    assert recorded["sizes"] == record.sizes and "ids" not in recorded


def test_launch_says_started_when_another_caller_started_the_run(tmp_path: Path, monkeypatch) -> None:
    """Two sessions launching at once: the other session's `schedule` may start this run
    before this one's own call does, which then starts nothing; the run is running all
    the same, and the launcher must say so (it said "queued")."""
    import sys

    from calm_core.runs import jobs

    from calm_core.workspace import launch

    real_schedule = jobs.schedule

    def scheduled_by_someone_else(root=None, limit=None):
        real_schedule(root, limit)  # this run starts here...
        return []  # ...but, as far as this caller knows, it started nothing

    monkeypatch.setattr(jobs, "schedule", scheduled_by_someone_else)
    monkeypatch.setattr(jobs, "worker_command", lambda: [sys.executable, "-c", "import time; time.sleep(30)"])
    run, started = launch.launch_training(TrainConfig(method="calm"), root=tmp_path)
    try:
        assert started and run.status["state"] == "running"
    finally:
        jobs.kill(run, grace_s=1)
