"""A run's state machine, and the state to show for a status.json as it is now.

The job and its launcher write the states: `queued` (submitted, waiting for a slot) ->
`running` -> `finished` | `failed` | `cancelled`, through `stopping` once a cancel is
asked (a queued run is `cancelled` at once); `queue.resume` puts a `failed`, `cancelled`
or repaired damaged run back to `queued`.

status.json holds the state the run last wrote; `run_state` is what the studio and
`calm runs` show: a `running` job whose process is gone, or that stopped heartbeating,
is `failed` (and resumable), whatever its file still says. `DAMAGED` is shown, never
written: `RunDir.state` returns it when a file the run needs cannot be read."""

from __future__ import annotations

import time
from dataclasses import dataclass

from calm_core.runs.lifecycle import (
    ACTIVE_STATES,
    RESUMABLE_STATES,
    STATES,
    TERMINAL_STATES,
    WAITING_OR_ACTIVE,
    RunState,
)
from calm_core.runs.process import process_alive
from calm_core.runs.records import RunStatus

STATUS = "status.json"  # the file that holds a run's state (calm_core.runs.rundir reads and writes it)
STALE_AFTER_S = 60.0  # a running job that has not heartbeat for this long counts as failed
STARTUP_GRACE_S = 600.0  # before its first heartbeat a job may be importing torch / converting a model
FINAL_PHASE = "final evaluation"  # status.json `phase` while it runs (training/loop_evaluation.py; its passes: `final`)
DAMAGED = RunState.DAMAGED  # shown, never written: a file the run needs cannot be read (RunFileError says which)


__all__ = [
    "ACTIVE_STATES",
    "DAMAGED",
    "RESUMABLE_STATES",
    "STATES",
    "TERMINAL_STATES",
    "WAITING_OR_ACTIVE",
    "RunState",
    "ShownState",
    "run_state",
]


@dataclass(frozen=True)
class ShownState:
    """What the studio shows: the state after liveness checks, why, and whether resume is offered."""

    state: RunState
    reason: str
    resumable: bool


def _progress(status: RunStatus) -> str:
    total = status.total_steps
    return f"step {status.step}/{total if total is not None else '?'}"


def run_state(status: RunStatus, now: float | None = None, stale_after: float = STALE_AFTER_S) -> ShownState:
    """The state to show for `status`: `running`/`stopping` with a dead process or a
    heartbeat older than `stale_after` seconds is `failed` (stale), and resumable. Until
    the job's first heartbeat, `STARTUP_GRACE_S` (if longer) counts from `started`.

    A stale job whose process is still alive (hung) is resumable too: `queue.resume`
    stops it first, so two processes never write one run.
    """
    if status.state not in STATES:  # a record from a newer writer, or by hand
        return ShownState(RunState.FAILED, f"unknown state {status.state!r} in {STATUS}", False)
    state = RunState(status.state)
    if state == RunState.QUEUED:
        return ShownState(state, "waiting for a free job slot", False)
    if state == RunState.FINISHED:
        return ShownState(state, f"finished at {_progress(status)}", False)
    if state == RunState.FAILED:
        return ShownState(state, status.error or RunState.FAILED.value, True)
    if state == RunState.CANCELLED:
        return ShownState(state, f"cancelled at {_progress(status)}", True)
    now = time.time() if now is None else now
    beat = status.heartbeat
    if beat is None:
        stale_after = max(stale_after, STARTUP_GRACE_S)
    age = now - float(beat or status.started or status.updated or 0.0)
    alive, pid = process_alive(status), status.pid
    if alive is False:
        return ShownState(
            RunState.FAILED, f"process {pid} is gone (last heartbeat {age:.0f} s ago, at {_progress(status)})", True
        )
    if age > stale_after:
        hung = f"; process {pid} is still alive (hung?) and is stopped on resume" if alive else ""
        return ShownState(RunState.FAILED, f"no heartbeat for {age:.0f} s (at {_progress(status)}){hung}", True)
    phase = f" ({status.phase})" if status.phase else ""

    return ShownState(state, f"{state} at {_progress(status)}{phase}, heartbeat {age:.0f} s ago", False)
