"""Background training jobs: start, queue, cancel, kill and resume, all through run directories.

A job is any command (usually `python -m calm_core.cli train --run-dir <run> ...`); this
module never imports the trainer. The protocol with the job (calm_core.runs.rundir, .state):

- `submit` writes the command to `<run>/job.json`, marks the run `queued` and calls
  `schedule`, which starts queued runs, oldest first, while fewer than `CALM_MAX_JOBS`
  (default 1) hold a slot. `schedule` takes an `flock` on `<runs root>/.queue.lock`, so
  the studio (on every poll), the CLI and an exiting job may all call it at once.
- `start_job` launches the command detached (own session, output appended to
  `<run>/stdout.log`), records pid + state `running` before the job can write anything.
- The job heartbeats, checks `cancel_requested()` every step, writes `cancelled` /
  `finished` / `failed` itself, and calls `schedule(run.path.parent)` as it exits.
- A killed or hung job is `failed` by `state.run_state`; `resume` requeues it with
  `resume: true` in job.json, and the trainer continues from `RunDir.prepare_resume()`.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping

from calm_core.io import atomic_write_json, file_lock
from calm_core.paths import PROJECT_ROOT
from calm_core.runs.damage import RunFileError, read_json_object
from calm_core.runs.layout import CONFIG, JOB_FILE, RESULTS, STDOUT
from calm_core.runs.listing import queued_runs, run_statuses
from calm_core.runs.naming import runs_root
from calm_core.runs.process import HOST, pids_with_option, process_alive
from calm_core.runs.records import RunStatus
from calm_core.runs.rundir import RunDir
from calm_core.runs.state import ACTIVE_STATES, DAMAGED, RESUMABLE_STATES, STATUS, RunState, ShownState, run_state

MAX_JOBS_ENV = "CALM_MAX_JOBS"
JOB = JOB_FILE
QUEUE_LOCK = ".queue.lock"
KILL_GRACE_S = 5.0  # SIGTERM -> SIGKILL
RUN_DIR_ARG = "{run_dir}"  # in a job's command: the run's directory, filled in when the job starts
RUN_DIR_OPTION = "--run-dir"  # the worker's option naming its run directory
TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN", "HF_API_TOKEN")
NO_TOKEN_FILE = "/nonexistent/calm-no-operator-token"  # HF_TOKEN_PATH of a job without the operator's token
CREDENTIALS = "operator_credentials"  # job.json: may the job use the operator's hub token


def worker_command() -> list[str]:
    """The training job's command line: this Python, the CLI in worker form. The run
    directory stays a placeholder in job.json, so a copied or moved run starts on itself."""
    return [sys.executable, "-m", "calm_core.cli", "train", RUN_DIR_OPTION, RUN_DIR_ARG]


def bind_run_dir(command: list[str], run_dir: RunDir) -> list[str]:
    """`command` for this run: RUN_DIR_ARG becomes its path, and so does the value of a
    `--run-dir` (job.json of older runs held an absolute path: a copy of such a run would
    otherwise write into the original). A job only ever writes inside its own directory."""
    bound = [str(run_dir.path) if part == RUN_DIR_ARG else part for part in command]
    for i, part in enumerate(bound[:-1]):
        if part == RUN_DIR_OPTION:
            bound[i + 1] = str(run_dir.path)
    return bound


def worker_pids(run_dir: RunDir) -> list[int]:
    """Live processes on this machine whose command line trains this run (`--run-dir` its
    path): what a damaged status.json can no longer tell. Linux /proc; [] elsewhere."""
    return pids_with_option(RUN_DIR_OPTION, str(run_dir.path))


def max_jobs() -> int:
    raw = os.environ.get(MAX_JOBS_ENV, "1")
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"Expected `{MAX_JOBS_ENV}` to be a positive int, but got {raw!r}")
    return value


def read_job(run_dir: RunDir) -> dict[str, Any] | None:
    """job.json (None for a run never submitted); RunFileError when it is damaged."""
    path = run_dir.path / JOB
    if not path.is_file():
        return None
    return read_json_object(path, run_dir.advice(JOB), {"command": list})


def _check_command(command: list[str]) -> list[str]:
    if not command or not all(isinstance(part, str) for part in command):
        raise ValueError(f"Expected `command` to be a non-empty list of strings, but got {command!r}")
    return list(command)


def job_environment(environ: Mapping[str, str], credentials: bool = True) -> dict[str, str]:
    """A job's environment: its launcher's, less any `*_PASSWORD` variable. A training
    job never needs one, and the shared studio's password (CALM_STUDIO_PASSWORD) must
    not reach a process that runs user-chosen code paths. With `credentials` the hub
    token stays (a job may need it for a gated model); without (a shared user's job, whose
    model the operator did not list) the token variables go and the token file is pointed
    at nothing, so huggingface_hub downloads anonymously."""
    env = {k: v for k, v in environ.items() if not k.upper().endswith("_PASSWORD")}
    if credentials:
        return env
    env = {k: v for k, v in env.items() if k.upper() not in TOKEN_VARIABLES}
    return {**env, "HF_TOKEN_PATH": NO_TOKEN_FILE, "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}


def _reap(process: subprocess.Popen[bytes]) -> None:
    process.wait()  # in a daemon thread: no zombie lingers while the launcher lives


def start_job(run_dir: RunDir, command: list[str], env: dict[str, str] | None = None, credentials: bool = True) -> int:
    """Launch `command` detached from the caller; record pid and state `running`; return the pid.
    `credentials`: whether it inherits the operator's hub token (job_environment).

    The launch and the status write happen under the run's status lock, so the job's own
    first status write always lands after (never under) the launcher's.
    """
    command = bind_run_dir(_check_command(command), run_dir)
    full_env = {**job_environment(os.environ, credentials), "PYTHONUNBUFFERED": "1", **(env or {})}
    with open(run_dir.path / STDOUT, "ab") as log, run_dir.locked():
        log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} start: {shlex.join(command)}\n".encode())
        log.flush()
        try:
            process = subprocess.Popen(
                command,
                cwd=PROJECT_ROOT,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as error:
            run_dir.write_status(RunState.FAILED, error=f"could not start {command[0]!r}: {error}", pid=None)
            raise
        # no heartbeat until the job's own: run_state allows it STARTUP_GRACE_S to get going
        run_dir.write_status(
            RunState.RUNNING, pid=process.pid, started=time.time(), heartbeat=None, error=None, ended=None
        )
    threading.Thread(target=_reap, args=(process,), daemon=True).start()
    return process.pid


def _holds_slot(status: RunStatus) -> bool:
    """An active run holds a job slot until its process is known to be gone (a hung
    process still holds one; on another machine, only a fresh heartbeat does)."""
    if status.state not in ACTIVE_STATES:
        return False
    alive = process_alive(status)
    return alive if alive is not None else run_state(status).state in ACTIVE_STATES


def schedule(root: str | Path | None = None, limit: int | None = None) -> list[str]:
    """Start queued runs, oldest first, while fewer than `limit` (default `CALM_MAX_JOBS`)
    hold a slot; returns the ids started. Safe to call from several processes at once."""
    root = runs_root(root)
    limit = max_jobs() if limit is None else limit
    started: list[str] = []
    if not root.is_dir():
        return started
    with file_lock(root / QUEUE_LOCK):
        statuses = run_statuses(root)  # each status.json read once
        busy = sum(_holds_slot(status) for _, status in statuses)
        for run in queued_runs(statuses):
            if busy >= limit:
                break
            try:
                job = read_job(run)
            except RunFileError as error:  # one damaged run must not stall the queue
                run.write_status(RunState.FAILED, only_from=(RunState.QUEUED,), error=str(error))
                continue
            if job is None:
                continue  # created but never submitted
            if run.cancel_requested():
                run.write_status(RunState.CANCELLED, only_from=(RunState.QUEUED,))
                continue
            try:
                start_job(run, job["command"], job.get("env"), job.get(CREDENTIALS) is not False)
            except OSError:
                continue  # marked failed with the reason; try the next one
            busy += 1
            started.append(run.run_id)
    return started


def submit(run_dir: RunDir, command: list[str], env: dict[str, str] | None = None, credentials: bool = True) -> bool:
    """Queue `command` for the run (job.json + state `queued`) and schedule; whether the run
    has left the queue since (left_the_queue: started by this call's `schedule` or anyone's).

    `env` holds only the overrides the job needs; it is stored in job.json, so keep
    secrets out of it (the job inherits the environment of whoever starts it).
    `credentials` is recorded in job.json: whichever process starts the job (the studio, the
    operator's CLI, an exiting job), a job without them gets no hub token.
    """
    command = _check_command(command)
    with file_lock(run_dir.path.parent / QUEUE_LOCK):
        state = run_dir.status.state
        if state != RunState.QUEUED:
            raise ValueError(
                f"Expected a new (queued) run to submit, but {run_dir.run_id} is {state}; "
                "use resume() for a failed or cancelled run"
            )
        atomic_write_json(
            run_dir.path / JOB,
            {
                "command": command,
                "env": env or {},
                "resume": False,
                "resumes": 0,
                "submitted": time.time(),
                CREDENTIALS: credentials,
            },
        )
        run_dir.write_status(RunState.QUEUED, queued_at=time.time())
    schedule(run_dir.path.parent)
    return left_the_queue(run_dir)


def left_the_queue(run: RunDir) -> bool:
    """Whether the run has started, by anyone: another session's or job's `schedule` may
    start it before this caller's own does, so a caller asks this rather than trusting
    what its own `schedule` returned."""
    return run.status.state != RunState.QUEUED


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
    with file_lock(run_dir.path.parent / QUEUE_LOCK):
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


def _signal_group(status: RunStatus, signum: int) -> None:
    pid = int(status.pid or 0)
    try:
        os.killpg(os.getpgid(pid), signum)  # the job's session: its workers go too
    except ProcessLookupError:
        pass


def kill(run_dir: RunDir, grace_s: float = KILL_GRACE_S) -> ShownState:
    """Stop a stuck job: SIGTERM to its process group, SIGKILL after `grace_s`; the run
    is left `failed` with error "killed" (unless the job wrote a final state itself)."""
    status = run_dir.status
    if status.state not in ACTIVE_STATES:
        return run_dir.state()
    if (status.host or HOST) != HOST:
        raise RuntimeError(f"Run {run_dir.run_id} runs on {status.host}; kill it from there")
    if process_alive(status):
        _signal_group(status, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while process_alive(status) and time.monotonic() < deadline:
            time.sleep(0.05)
        if process_alive(status):
            _signal_group(status, signal.SIGKILL)
            deadline = time.monotonic() + 10.0
            while process_alive(status) and time.monotonic() < deadline:
                time.sleep(0.05)
    run_dir.write_status(RunState.FAILED, only_from=ACTIVE_STATES, error="killed")
    return run_dir.state()


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
    with file_lock(run_dir.path.parent / QUEUE_LOCK):
        if run_dir.state().state not in RESUMABLE_STATES:  # resumed meanwhile by someone else
            raise ValueError(
                f"Expected a stopped run to resume, but run {run_dir.run_id} is {run_dir.state().state} now"
            )
        run_dir.clear_cancel()
        atomic_write_json(run_dir.path / JOB, {**job, "resume": True, "resumes": job.get("resumes", 0) + 1})
        run_dir.update_status(
            state=RunState.QUEUED, queued_at=time.time(), error=None, pid=None, ended=None, fresh_start=bool(fresh)
        )
    return schedule(run_dir.path.parent)


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
        atomic_write_json(
            run_dir.path / JOB,
            {
                "command": worker_command(),
                "env": {},
                "resume": False,
                "resumes": 0,
                "submitted": time.time(),
                "rebuilt": True,
            },
        )
    if run_dir.status.state == RunState.FINISHED:  # results.json damaged or missing: evaluate again
        try:
            run_dir.results()
        except (FileNotFoundError, RunFileError):
            _set_aside(run_dir.path / RESULTS)
            run_dir.update_status(state=RunState.FAILED, error="results.json was damaged or missing; evaluating again")


def _set_aside(path: Path) -> None:
    if path.exists():
        os.replace(path, path.with_name(path.name + ".damaged"))
