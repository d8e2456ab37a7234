"""Tests for calm_core.runs.jobs and .queue with a fake trainer (tests/fixtures/jobs/fake_train.py): real
detached processes, the queue, cancel, kill and resume; no model is loaded.

Waits poll the run directory with generous timeouts and never assert on durations.

    .venv/bin/python -m pytest tests/test_jobs.py -q
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, TypeVar

import psutil
import pytest

from calm_core.runs import jobs, queue
from calm_core.runs.queue import JobQueue
from calm_core.runs.process import pid_alive, process_start
from calm_core.runs.rundir import RunDir

FAKE = Path(__file__).parent / "fixtures" / "jobs" / "fake_train.py"
TIMEOUT_S = 60.0  # generous: the machine may be busy
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T], timeout_s: float = TIMEOUT_S) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def fake(run: RunDir, *options: str, steps: int = 1000, sleep: float = 0.05) -> list[str]:
    return [sys.executable, str(FAKE), "--run-dir", str(run.path), "--steps", str(steps), "--sleep", str(sleep),
            *options]


def steps_logged(run: RunDir) -> list[int]:
    return [record["step"] for record in run.read_metrics()]


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A runs root with one job slot; every job still alive at the end is killed."""
    monkeypatch.setenv(queue.MAX_JOBS_ENV, "1")
    root = tmp_path / "runs"
    root.mkdir()
    yield root
    for run_path in root.iterdir():
        pid = RunDir(run_path).status.pid if (run_path / "status.json").is_file() else None
        if pid and pid != os.getpid() and pid_alive(pid) and os.getpgid(pid) == pid:  # only our job sessions
            os.killpg(pid, signal.SIGKILL)


def new_run(root: Path, name: str) -> RunDir:
    return RunDir.new({"name": name, "method": "fake"}, name, root)


# ------------------------------------------------------------------------- no processes

def test_is_alive() -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    assert pid_alive(os.getpid())
    assert not pid_alive(process.pid)
    assert not pid_alive(None)


def test_unreaped_child_is_not_alive() -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])  # exits; nobody waits: a zombie
    wait_for("the child to exit", lambda: psutil.Process(process.pid).status() == psutil.STATUS_ZOMBIE)
    assert not pid_alive(process.pid)
    process.wait()


def test_a_reused_pid_is_not_the_jobs() -> None:
    """A start stamp from another process (the same pid given again) counts as dead; the
    process's own stamp, and an old /proc clock-tick stamp of the same process, as alive."""
    me = os.getpid()
    stamp = process_start(me)
    assert stamp is not None and pid_alive(me, stamp)
    assert not pid_alive(me, f"{float(stamp) - 1000:.2f}")
    if os.path.isdir("/proc/self"):
        with open("/proc/self/stat") as handle:
            text = handle.read()
        ticks = text[text.rindex(")") + 2 :].split()[19]
        assert pid_alive(me, ticks) and not pid_alive(me, str(int(ticks) + 1))


def test_max_jobs_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(queue.MAX_JOBS_ENV, "3")
    assert queue.max_jobs() == 3
    monkeypatch.setenv(queue.MAX_JOBS_ENV, "0")
    with pytest.raises(ValueError, match="CALM_MAX_JOBS"):
        queue.max_jobs()


def test_job_json_is_a_typed_record_that_keeps_what_it_does_not_type(root: Path) -> None:
    """job.json is read into a JobRecord: a job.json older than the credentials key had
    them, a key the record does not type survives a resume's rewrite, and a damaged value
    is refused by name."""
    import json

    from calm_core.runs.damage import RunFileError

    run = new_run(root, "typed")
    (run.path / jobs.JOB).write_text(json.dumps({"command": ["true"], "env": {}, "resume": False, "resumes": 2,
                                                 "submitted": 1.5, "note": "a newer writer's key"}))
    job = jobs.read_job(run)
    assert job == jobs.JobRecord(("true",), operator_credentials=True, resumes=2, submitted=1.5,
                                 extra={"note": "a newer writer's key"})
    run.write_status("failed", error="boom")
    queue.resume(run)
    written = json.loads((run.path / jobs.JOB).read_text())
    assert (written["resume"], written["resumes"], written["note"]) == (True, 3, "a newer writer's key")
    (run.path / jobs.JOB).write_text(json.dumps({"command": ["python", 3]}))
    with pytest.raises(RunFileError, match=r"`command\[1\]` is an int where a str belongs"):
        jobs.read_job(run)


def test_a_queue_takes_only_the_runs_of_its_own_root(root: Path, tmp_path: Path) -> None:
    """A run queued in another root's queue would never be started by the queue it lives
    in: refused, and nothing is written."""
    elsewhere = tmp_path / "other-runs"
    elsewhere.mkdir()
    run = new_run(root, "mine")
    with pytest.raises(ValueError, match="elsewhere"):
        JobQueue.at(elsewhere).submit(run, ["true"])
    assert jobs.read_job(run) is None and run.status.queued
    assert JobQueue.at(root) == JobQueue.of(run)


def test_submit_and_resume_refuse_wrong_states(root: Path) -> None:
    run = new_run(root, "states")
    with pytest.raises(ValueError, match="failed or cancelled"):
        queue.resume(run)  # queued
    run.write_status("failed", error="boom")
    with pytest.raises(ValueError, match="has no .*submit it instead"):
        queue.resume(run)
    with pytest.raises(ValueError, match="use resume"):
        JobQueue.of(run).submit(run, ["true"])
    run.write_status("running", pid=os.getpid())
    with pytest.raises(ValueError, match="failed or cancelled"):
        queue.resume(run)
    with pytest.raises(ValueError, match="non-empty list"):
        jobs.start_job(run, [])


def test_start_failure_marks_failed(root: Path) -> None:
    run = new_run(root, "nobinary")
    with pytest.raises(OSError):
        jobs.start_job(run, [str(root / "no-such-program")])
    view = run.state()
    assert view.state == "failed" and "could not start" in view.reason


# ------------------------------------------------------------------------- real jobs

def test_start_job_outlives_its_launcher(root: Path) -> None:
    run = new_run(root, "detached")
    launcher = ("import sys; from calm_core.runs.jobs import start_job; from calm_core.runs.rundir import RunDir; "
                "print(start_job(RunDir.open(sys.argv[1]), sys.argv[2:]))")
    done = subprocess.run([sys.executable, "-c", launcher, str(run.path), *fake(run)], capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=True)
    pid = int(done.stdout)
    assert run.status.pid == pid
    start_step = run.status.step or 0
    wait_for("steps after the launcher exited", lambda: (run.status.step or 0) >= start_step + 3)
    assert pid_alive(pid) and os.getpgid(pid) == pid  # alive, in its own session
    assert queue.cancel(run, grace_s=TIMEOUT_S).state == "cancelled"
    log = (run.path / "stdout.log").read_text()
    assert "fake_train: start after step 0" in log and "fake_train: cancelled" in log


def test_queue_runs_one_job_at_a_time(root: Path) -> None:
    first, second = new_run(root, "first"), new_run(root, "second")
    assert JobQueue.of(first).submit(first, fake(first, steps=10)) is True  # started: it left the queue
    assert JobQueue.of(second).submit(second, fake(second, steps=10)) is False  # every slot busy: it waits
    assert second.state().state == "queued"
    # no schedule() here: the first job starts the second as it exits
    wait_for("the second run to finish", lambda: second.state().state == "finished")
    assert first.state().state == "finished"
    assert first.status.ended <= second.status.started
    assert steps_logged(first) == steps_logged(second) == list(range(1, 11))


def test_schedule_from_many_callers_starts_one(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    queued = [new_run(root, f"q{i}") for i in range(3)]
    with monkeypatch.context() as patch:
        patch.setattr(JobQueue, "schedule", lambda *args, **kwargs: [])  # queue without starting
        for run in queued:
            JobQueue.of(run).submit(run, fake(run))
    barrier, started = threading.Barrier(6), []

    def caller() -> None:
        barrier.wait()
        started.extend(JobQueue.at(root).schedule())

    threads = [threading.Thread(target=caller) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert started == [queued[0].run_id]  # oldest first, exactly once
    # a job that dies without scheduling frees its slot at the next poll
    assert jobs.kill(queued[0], grace_s=10).state == "failed"
    assert JobQueue.at(root).schedule() == [queued[1].run_id]
    assert queued[2].state().state == "queued"


def test_cancel_queued_and_running(root: Path) -> None:
    running, waiting = new_run(root, "running"), new_run(root, "waiting")
    JobQueue.of(running).submit(running, fake(running))
    JobQueue.of(waiting).submit(waiting, fake(waiting))
    assert queue.cancel(waiting).state == "cancelled"
    assert waiting.status.pid is None
    wait_for("a few steps", lambda: (running.status.step or 0) >= 3)
    assert queue.cancel(running, grace_s=TIMEOUT_S).state == "cancelled"
    step = running.status.step
    assert running.latest_checkpoint() == (step, running.checkpoint_dir(step))
    assert steps_logged(running) == list(range(1, step + 1))
    assert JobQueue.at(root).schedule() == []  # the cancelled queued run never starts
    assert waiting.status.pid is None


def test_kill_escalates_to_sigkill(root: Path) -> None:
    run = new_run(root, "stubborn")
    JobQueue.of(run).submit(run, fake(run, "--ignore-term"))
    wait_for("the first step", lambda: (run.status.step or 0) >= 1)
    pid = run.status.pid
    view = jobs.kill(run, grace_s=0.5)
    assert (view.state, view.reason) == ("failed", "killed")
    assert not pid_alive(pid)


def test_sigkill_then_resume_logs_every_step_once(root: Path) -> None:
    run = new_run(root, "crash")
    JobQueue.of(run).submit(run, fake(run, "--ckpt-every", "5", "--hang-at", "7", steps=20, sleep=0.02))
    wait_for("the hang at step 7", lambda: run.status.step == 7 and "hanging" in
             (run.path / "stdout.log").read_text())
    os.kill(run.status.pid, signal.SIGKILL)
    view = wait_for("the dead job to show as failed", lambda: run.state().state == "failed" and run.state())
    assert view.resumable and "is gone" in view.reason
    with open(run.metrics_path, "ab") as handle:
        handle.write(b'{"step": 8, "elaps')  # as if it died mid-write
    assert queue.resume(run) == [run.run_id]
    assert jobs.read_job(run).resume is True
    wait_for("the resumed run to finish", lambda: run.state().state == "finished")
    assert steps_logged(run) == list(range(1, 21))  # no gap, no duplicate
    assert run.status.step == 20
    assert "fake_train: start after step 5" in (run.path / "stdout.log").read_text()


def test_resume_stops_a_hung_job_first(root: Path) -> None:
    run = new_run(root, "hung")
    JobQueue.of(run).submit(run, fake(run, "--ckpt-every", "2", "--hang-at", "3", steps=6, sleep=0.02))
    wait_for("the hang at step 3", lambda: "hanging" in (run.path / "stdout.log").read_text())
    hung_pid = run.status.pid
    run.update_status(heartbeat=time.time() - 3600)  # as if it had been silent for an hour
    view = run.state()
    assert view.state == "failed" and view.resumable and "still alive" in view.reason
    assert queue.resume(run) == [run.run_id]
    assert not pid_alive(hung_pid)  # never two processes on one run
    wait_for("the resumed run to finish", lambda: run.state().state == "finished")
    assert steps_logged(run) == list(range(1, 7))


def test_the_queue_is_read_from_the_statuses_not_the_listing(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """schedule() finds queued runs with `queued_runs` over one read of each status.json;
    the display listing (`list_runs`) is not on its path, and the oldest queued run goes first."""
    from calm_core.runs.listing import queued_runs, run_statuses

    older, newer = new_run(root, "older"), new_run(root, "newer")
    older.update_status(queued_at=1.0)
    newer.update_status(queued_at=2.0)
    assert [run.run_id for run in queued_runs(run_statuses(root))] == [older.run_id, newer.run_id]

    def no_listing(*args, **kwargs):
        raise AssertionError("schedule() went through the display listing")

    monkeypatch.setattr("calm_core.runs.listing.list_runs", no_listing)
    monkeypatch.setattr(queue, "max_jobs", lambda: 0)  # nothing may start: only the walk is tested
    assert JobQueue.at(root).schedule() == []


def test_a_cancel_asked_while_the_job_starts_stays_said(root: Path) -> None:
    """Cancel between start_job's `running` and the job's own writes (its pid, threads, first
    step: the minutes a model takes to load): the job's writes keep `stopping`, and their
    fields still land, so the Monitor never says `running` again for a run being stopped."""
    run = new_run(root, "starting")
    run.write_status("running", pid=os.getpid())  # as start_job records the job it started
    assert queue.cancel(run).state == "stopping"
    run.write_running(pid=os.getpid(), threads={"threads": 1, "why": "test"})
    run.write_running(step=0, total_steps=5)
    status = run.status
    assert (status.state, status.total_steps, status.threads) == ("stopping", 5, {"threads": 1, "why": "test"})
    assert run.cancel_requested()


def test_the_jobs_own_running_moves_a_queued_run_on(root: Path) -> None:
    run = new_run(root, "foreground")  # `calm train` in this process: nobody ran start_job
    run.write_running(pid=os.getpid())
    assert run.status.state == "running" and run.status.pid == os.getpid()


def test_calm_resume_says_whether_the_run_started(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`calm resume` reads the run's status after the queue's schedule: "resumed" when a slot
    was free, "queued to resume" when another job holds it."""
    import argparse

    from calm_core.cli.train import cmd_resume

    def stopped_run(name: str) -> RunDir:
        run = new_run(root, name)
        jobs.write_job(run, jobs.JobRecord(tuple(fake(run, steps=1, sleep=0.0))))
        run.write_status("failed", error="boom")
        return run

    def resume_said(run: RunDir) -> str:
        cmd_resume(argparse.Namespace(run_id=run.run_id, runs_root=root, fresh=False))
        return capsys.readouterr().out.strip()

    free = stopped_run("free")
    assert resume_said(free) == f"{free.run_id}: resumed"
    wait_for("the resumed run to finish", lambda: free.state().state == "finished")
    holder = new_run(root, "holder")
    JobQueue.of(holder).submit(holder, fake(holder, steps=1000))
    waiting = stopped_run("waiting")
    assert resume_said(waiting) == f"{waiting.run_id}: queued to resume"
    assert queue.cancel(holder, grace_s=TIMEOUT_S).state == "cancelled"
