"""A run's states, one enum: what status.json's `state` may hold, and what is shown.

    RunState.RUNNING == "running"     # a str: JSON writes it as it is, old comparisons hold
    STATES, ACTIVE_STATES, TERMINAL_STATES

The job and its launcher write the states: `queued` (submitted, waiting for a slot) ->
`running` -> `finished` | `failed` | `cancelled`, through `stopping` once a cancel is
asked; `queue.resume` puts a `failed`, `cancelled` or repaired damaged run back to
`queued`. `damaged` is shown, never written (runs/state.py says why). A module of its
own, below the records, so that status.json's record types its `state` with it.
"""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    STOPPING = "stopping"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DAMAGED = "damaged"  # shown, never written: a file the run needs cannot be read


STATES = tuple(state for state in RunState if state is not RunState.DAMAGED)  # what status.json may hold
ACTIVE_STATES = (RunState.RUNNING, RunState.STOPPING)  # a process is expected to be alive and heartbeating
TERMINAL_STATES = (RunState.FINISHED, RunState.FAILED, RunState.CANCELLED)
WAITING_OR_ACTIVE = (RunState.QUEUED, *ACTIVE_STATES)  # what counts toward a queue quota
RESUMABLE_STATES = (RunState.FAILED, RunState.CANCELLED)
