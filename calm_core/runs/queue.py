"""The job queue of a runs root: which queued run starts when, and the per-run requests
that change its place in it (cancel, resume).

    queue = JobQueue.at(root)               # the workspace's runs root, or any other
    left = queue.submit(run, worker_command())

- `submit` writes the run's job.json (calm_core.runs.jobs.JobRecord), marks the run `queued`
  and schedules.
- `schedule` starts queued runs, oldest first, while fewer than `CALM_MAX_JOBS` (default 1)
  hold a slot. It holds the queue's lock, an `flock` on `<runs root>/.queue.lock`, so the
  studio (on every poll), the CLI and an exiting job may all call it at once.
- `cancel` stops a queued run at once and asks a running one to stop; `resume` requeues a
  failed, cancelled or damaged run (`resume: true` in job.json), and the trainer continues
  from `RunDir.prepare_resume()`.

A queue belongs to its runs root, not to a run: a launch hands its new run to the queue of
the root it created the run in, and the queue starts whichever run is oldest.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from calm_core.io import atomic_write_json, file_lock
from calm_core.runs.damage import RunFileError
from calm_core.runs.jobs import (
    JOB,
    JobRecord,
    check_command,
    kill,
    read_job,
    start_job,
    worker_command,
    worker_pids,
    write_job,
)
from calm_core.runs.layout import CONFIG, RESULTS
from calm_core.runs.listing import queued_runs, run_statuses
from calm_core.runs.naming import runs_root
from calm_core.runs.process import process_alive
from calm_core.runs.records import RunStatus
from calm_core.runs.rundir import RunDir
from calm_core.runs.state import ACTIVE_STATES, DAMAGED, RESUMABLE_STATES, STATUS, RunState, ShownState, run_state

MAX_JOBS_ENV = "CALM_MAX_JOBS"
QUEUE_LOCK = ".queue.lock"


def max_jobs() -> int:
    raw = os.environ.get(MAX_JOBS_ENV, "1")
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"Expected `{MAX_JOBS_ENV}` to be a positive int, but got {raw!r}")
    return value


def _holds_slot(status: RunStatus) -> bool:
    """An active run holds a job slot until its process is known to be gone (a hung
    process still holds one; on another machine, only a fresh heartbeat does)."""
    if status.state not in ACTIVE_STATES:
        return False
    alive = process_alive(status)
    return alive if alive is not None else run_state(status).state in ACTIVE_STATES


@dataclass(frozen=True)
class JobQueue:
    """The queue of the runs in `root`: each run directory directly under it that has a
    job.json is one of its jobs."""

    root: Path

    @classmethod
    def at(cls, root: str | Path | None = None) -> JobQueue:
        """The queue of `root` (None: the workspace's runs root)."""
        return cls(runs_root(root))

    @classmethod
    def of(cls, run: RunDir) -> JobQueue:
        """The queue that `run` waits in: the one of the root it lives in."""
        return cls(run.path.parent)

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the queue's lock: every thread and process of every studio and CLI on it."""
        with file_lock(self.root / QUEUE_LOCK):
            yield

    def submit(
        self, run_dir: RunDir, command: list[str], env: dict[str, str] | None = None, credentials: bool = True
    ) -> bool:
        """Queue `command` for the new run (job.json + state `queued`) and schedule; whether
        the run has left the queue since: started by this call's `schedule` or by anyone's
        (another session's or job's may start it first). `credentials`: whether the job may
        use the operator's hub token (JobRecord)."""
        if run_dir.path.parent.resolve() != self.root.resolve():
            raise ValueError(f"Expected a run in {self.root} to queue there, but {run_dir.path} is elsewhere")
        job = JobRecord(check_command(command), env or {}, credentials, submitted=time.time())
        with self.lock():
            state = run_dir.status.state
            if state != RunState.QUEUED:
                raise ValueError(
                    f"Expected a new (queued) run to submit, but {run_dir.run_id} is {state}; "
                    "use resume() for a failed or cancelled run"
                )
            write_job(run_dir, job)
            run_dir.write_status(RunState.QUEUED, queued_at=time.time())
        self.schedule()
        return not run_dir.status.queued

    def schedule(self, limit: int | None = None) -> list[str]:
        """Start queued runs, oldest first, while fewer than `limit` (default `CALM_MAX_JOBS`)
        hold a slot; returns the ids started. Safe to call from several processes at once."""
        limit = max_jobs() if limit is None else limit
        started: list[str] = []
        if not self.root.is_dir():
            return started
        with self.lock():
            statuses = run_statuses(self.root)  # each status.json read once
            busy = sum(_holds_slot(status) for _, status in statuses)
            for run in queued_runs(statuses):
                if busy >= limit:
                    break
                if _start_queued(run):
                    busy += 1
                    started.append(run.run_id)
        return started


def _start_queued(run: RunDir) -> bool:
    """Start one queued run's job (under the queue's lock); whether it started. A run with
    a damaged job.json is failed and one whose cancel was asked is cancelled, so that one
    run cannot stall the queue."""
    try:
        job = read_job(run)
    except RunFileError as error:
        run.write_status(RunState.FAILED, only_from=(RunState.QUEUED,), error=str(error))
        return False
    if job is None:
        return False  # created but never submitted
    if run.cancel_requested():
        run.write_status(RunState.CANCELLED, only_from=(RunState.QUEUED,))
        return False
    try:
        start_job(run, job.command, job.env, job.operator_credentials)
    except OSError:
        return False  # marked failed with the reason; the next one is tried
    return True


def _wait_until_stopped(run_dir: RunDir, timeout_s: float) -> ShownState:
    deadline = time.monotonic() + timeout_s
    view = run_dir.state()
    while view.state in ACTIVE_STATES and time.monotonic() < deadline:
        time.sleep(0.1)
        view = run_dir.state()
    return view


def cancel(run_dir: RunDir, grace_s: float = 0.0) -> ShownState:
    """Ask the run to stop. A queued run is `cancelled` at once; a running job sees the
    CANCEL file at its next step, checkpoints and writes `cancelled` itself (shown as
    `stopping` meanwhile). Waits up to `grace_s` for that and returns the state then;
    a job still active afterwards is stuck: `kill` it."""
    with JobQueue.of(run_dir).lock():
        status = run_dir.status
        state, alive = status.state, process_alive(status)
        if state == RunState.QUEUED:
            run_dir.write_status(RunState.CANCELLED, only_from=(RunState.QUEUED,))
        elif state in ACTIVE_STATES and alive is False:
            run_dir.write_status(RunState.CANCELLED, only_from=ACTIVE_STATES)  # already dead: nothing to stop
        elif state in ACTIVE_STATES:
            run_dir.request_cancel()
            run_dir.write_status(RunState.STOPPING, only_from=(RunState.RUNNING,))
    return _wait_until_stopped(run_dir, grace_s)


def resume(run_dir: RunDir, fresh: bool = False) -> list[str]:
    """Requeue a failed, cancelled or damaged run (`resume: true` in job.json) and
    schedule it; returns the ids started. A hung process of the run (stale heartbeat) is
    killed first. The trainer continues from the newest checkpoint it can read whole, or
    starts over when the run has none, or with `fresh` (asked for explicitly: a run
    whose every checkpoint is damaged refuses to start over on its own).

    A damaged status.json or job.json is rebuilt (status from config and checkpoints,
    job.json with the standard worker command) once no worker of the run is alive."""
    view = run_dir.state()
    if view.state not in (*RESUMABLE_STATES, DAMAGED) or not view.resumable:
        raise ValueError(
            f"Expected a failed or cancelled run to resume, but {run_dir.run_id} is {view.state} ({view.reason})"
        )
    if view.state == DAMAGED:
        _repair(run_dir)
    job = read_job(run_dir)
    if job is None:
        raise ValueError(f"Expected a submitted run, but run {run_dir.run_id} has no {JOB}: submit it instead")
    if process_alive(run_dir.status):
        kill(run_dir)
    queue = JobQueue.of(run_dir)
    with queue.lock():
        if run_dir.state().state not in RESUMABLE_STATES:  # resumed meanwhile by someone else
            raise ValueError(
                f"Expected a stopped run to resume, but run {run_dir.run_id} is {run_dir.state().state} now"
            )
        run_dir.clear_cancel()
        write_job(run_dir, replace(job, resume=True, resumes=job.resumes + 1))
        run_dir.update_status(
            state=RunState.QUEUED, queued_at=time.time(), error=None, pid=None, ended=None, fresh_start=bool(fresh)
        )
    return queue.schedule()


def _repair(run_dir: RunDir) -> None:
    """Rebuild a damaged status.json / job.json so the run can be resumed; the damaged
    file is kept beside it as `<name>.damaged` for inspection. Refuses while a worker
    of the run is alive (it may be the one writing)."""
    alive = worker_pids(run_dir)
    if alive:
        raise ValueError(
            f"A worker of run {run_dir.run_id} is still running (pid {alive[0]}): wait for it to end "
            f"or stop it (kill {alive[0]}), then resume"
        )
    config = run_dir.config  # a damaged config cannot be rebuilt: its RunFileError says so
    try:
        _ = run_dir.status  # read, only to see whether it can be
    except (FileNotFoundError, RunFileError):
        _set_aside(run_dir.path / STATUS)
        latest = run_dir.latest_checkpoint()
        steps = config.train.get("steps")
        rebuilt = RunStatus(
            RunState.FAILED,
            run_id=run_dir.run_id,
            step=latest[0] if latest else 0,
            total_steps=steps if isinstance(steps, int) else None,
            name=config.name,
            method=config.method,
            created=(run_dir.path / CONFIG).stat().st_mtime,
            updated=time.time(),
            error="status.json was damaged and has been rebuilt from config.json and the checkpoints",
        )
        atomic_write_json(run_dir.path / STATUS, rebuilt.to_json())
    try:
        read_job(run_dir)
    except RunFileError:
        _set_aside(run_dir.path / JOB)
        write_job(run_dir, JobRecord(tuple(worker_command()), submitted=time.time(), rebuilt=True))
    if run_dir.status.state == RunState.FINISHED:  # results.json damaged or missing: evaluate again
        try:
            run_dir.results()
        except (FileNotFoundError, RunFileError):
            _set_aside(run_dir.path / RESULTS)
            run_dir.update_status(state=RunState.FAILED, error="results.json was damaged or missing; evaluating again")


def _set_aside(path: Path) -> None:
    if path.exists():
        os.replace(path, path.with_name(path.name + ".damaged"))
