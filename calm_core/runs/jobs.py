"""A background job: its record (job.json) and its process (start, kill).

A job is any command (usually `python -m calm_core.cli train --run-dir <run> ...`); this
module never imports the trainer. The queue that decides when a job starts is
calm_core.runs.queue. The protocol with the job (calm_core.runs.rundir, .state):

- job.json (`JobRecord`) holds the command, with the run directory as a placeholder, the
  environment overrides, whether it may use the operator's hub token, and how often it was
  resumed; `write_job` and `read_job` are its one writer and reader.
- `start_job` launches the command detached (own session, output appended to
  `<run>/stdout.log`), records pid + state `running` before the job can write anything.
- The job heartbeats, checks `cancel_requested()` every step, writes `cancelled` /
  `finished` / `failed` itself, and schedules its queue as it exits.
- `kill` stops a stuck job's process group; the run is left `failed`.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calm_core.io import atomic_write_json
from calm_core.paths import PROJECT_ROOT
from calm_core.runs.damage import read_json_object
from calm_core.runs.layout import JOB_FILE, STDOUT
from calm_core.runs.process import HOST, pids_with_option, process_alive
from calm_core.runs.record_fields import decode, encode
from calm_core.runs.records import RunStatus
from calm_core.runs.rundir import RunDir
from calm_core.runs.state import ACTIVE_STATES, RunState, ShownState

JOB = JOB_FILE
KILL_GRACE_S = 5.0  # SIGTERM -> SIGKILL
RUN_DIR_ARG = "{run_dir}"  # in a job's command: the run's directory, filled in when the job starts
RUN_DIR_OPTION = "--run-dir"  # the worker's option naming its run directory
TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN", "HF_API_TOKEN")
NO_TOKEN_FILE = "/nonexistent/calm-no-operator-token"  # HF_TOKEN_PATH of a job without the operator's token
CREDENTIALS = "operator_credentials"  # job.json: may the job use the operator's hub token


@dataclass(frozen=True)
class JobRecord:
    """job.json: what the queue starts, and with what. `env` holds only the overrides the
    job needs and is stored as it is, so it must hold no secret (the job inherits the
    environment of whoever starts it). `operator_credentials` is recorded so that whichever
    process starts the job (the studio, the operator's CLI, an exiting job), a job without
    them gets no hub token; a job.json older than the key had them."""

    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    operator_credentials: bool = True
    resume: bool = False  # the trainer continues from the newest checkpoint
    resumes: int = 0
    submitted: float | None = None  # unix seconds
    rebuilt: bool = False  # written by a resume's repair in place of a damaged one
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any, path: str | Path = JOB, advice: str = "") -> JobRecord:
        """The record of a job.json object; RunFileError names the file and the wrong key."""
        return decode(cls, data, path, advice)

    def to_json(self) -> dict[str, Any]:
        return encode(self)


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


def read_job(run_dir: RunDir) -> JobRecord | None:
    """job.json (None for a run never submitted); RunFileError when it is damaged."""
    path = run_dir.path / JOB
    if not path.is_file():
        return None
    advice = run_dir.advice(JOB)
    return JobRecord.from_json(read_json_object(path, advice, {"command": list}), path, advice)


def write_job(run_dir: RunDir, job: JobRecord) -> None:
    """The run's job.json, written whole (atomically)."""
    atomic_write_json(run_dir.path / JOB, job.to_json())


def check_command(command: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """`command` as a job stores it; ValueError for an empty one or a part that is no string."""
    if not command or not all(isinstance(part, str) for part in command):
        raise ValueError(f"Expected `command` to be a non-empty list of strings, but got {command!r}")
    return tuple(command)


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


def start_job(
    run_dir: RunDir,
    command: list[str] | tuple[str, ...],
    env: Mapping[str, str] | None = None,
    credentials: bool = True,
) -> int:
    """Launch `command` detached from the caller; record pid and state `running`; return the pid.
    `credentials`: whether it inherits the operator's hub token (job_environment).

    The launch and the status write happen under the run's status lock, so the job's own
    first status write always lands after (never under) the launcher's.
    """
    command = bind_run_dir(list(check_command(command)), run_dir)
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
