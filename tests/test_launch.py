"""Launching runs (their cost estimate: tests/test_estimate.py)."""

from __future__ import annotations

from pathlib import Path

from calm_core.training.config import TrainConfig


def test_a_run_on_a_split_records_how_the_split_was_made() -> None:
    from calm_core.data.split import split_dataset
    from calm_core.launch import create_run

    record = split_dataset("builtin/capitals/train", sizes=(0.6, 0.2, 0.2), seed=3, out="caps")
    cfg = TrainConfig(method="calm", train_data=record.names["train"], heldout_data=record.names["heldout"],
                      eval_data=(record.names["test"], "builtin/units/test"))
    run = create_run(cfg)
    recorded = run.config.splits["caps"]
    assert recorded["source"] == "builtin/capitals/train" and recorded["seed"] == 3 and recorded["stratify"]
    assert recorded["sizes"] == record.sizes and "ids" not in recorded


def test_launch_says_started_when_another_caller_started_the_run(tmp_path: Path, monkeypatch) -> None:
    """Two sessions launching at once: the other session's `schedule` may start this run
    before this one's own call does, which then starts nothing; the run is running all
    the same, and the launcher must say so (it said "queued")."""
    import sys

    from calm_core.runs import jobs
    from calm_core.runs.queue import JobQueue

    from calm_core import launch

    real_schedule = JobQueue.schedule

    def scheduled_by_someone_else(self: JobQueue, limit: int | None = None) -> list[str]:
        real_schedule(self, limit)  # this run starts here...
        return []  # ...but, as far as this caller knows, it started nothing

    monkeypatch.setattr(JobQueue, "schedule", scheduled_by_someone_else)
    monkeypatch.setattr(jobs, "worker_command", lambda: [sys.executable, "-c", "import time; time.sleep(30)"])
    run, started = launch.launch_training(TrainConfig(method="calm"), root=tmp_path)
    try:
        assert started and run.status.state == "running"
    finally:
        jobs.kill(run, grace_s=1)


def test_the_launch_imports_no_estimate_module() -> None:
    """One launch path: the caller (the Train page, `calm train`) makes the estimate it
    shows; launch_training records it and never makes another (issue 51)."""
    import ast
    from pathlib import Path

    import calm_core.launch

    tree = ast.parse(Path(calm_core.launch.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not {m for m in imported if m.startswith("calm_core.estimate")}
