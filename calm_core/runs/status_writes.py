"""The status.json writes of a run directory: one read-merge-write under the run's `flock`,
so the job, the launcher and the studio can all update fields without losing each other's,
and an atomic replace, so a reader polling the file never sees half of it.

`RunStatusWrites` is a part of `RunDir` (calm_core.runs.rundir), which provides `path`,
`status` and `status_or_none`; the states and their rules are calm_core.runs.state's.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from calm_core.io import atomic_write_json, file_lock
from calm_core.runs.damage import RunFileError
from calm_core.runs.layout import LOCK
from calm_core.runs.process import HOST, process_start
from calm_core.runs.records import RunStatus
from calm_core.runs.state import ACTIVE_STATES, STATES, STATUS, TERMINAL_STATES, RunState


def _status_of(merged: dict[str, Any], fields: dict[str, Any]) -> RunStatus:
    """The status record the writer is about to store; a field of the wrong type is the
    writer's bug, said as one (the file on disk is untouched)."""
    try:
        return RunStatus.from_json(json.loads(json.dumps(merged, default=jsonable)), STATUS, "")
    except RunFileError as error:
        raise TypeError(
            f"Expected status fields that status.json can hold, but got {sorted(fields)}: {error}"
        ) from error


def jsonable(value: Any) -> Any:
    """numpy / torch scalars and arrays become numbers and lists, anything else a string."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


class RunStatusWrites:
    """The status writes of `RunDir`, which provides `path`, `status` and `status_or_none`."""

    path: Path

    @property
    def status(self) -> RunStatus:
        raise NotImplementedError  # RunDir's property replaces it

    def status_or_none(self) -> RunStatus | None:
        raise NotImplementedError  # RunDir's method replaces it

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the run's status lock (re-entrant): read-merge-write cycles inside are not interleaved."""
        with file_lock(self.path / LOCK):
            yield

    def update_status(self, **fields: Any) -> RunStatus:
        """Merge `fields` into status.json atomically, keeping the state; returns the new
        status. A field of the wrong type is refused (TypeError) before anything is written."""
        now = time.time()
        if fields.get("pid"):  # the pid is only meaningful with its machine and start stamp
            fields.setdefault("host", HOST)
            fields.setdefault("pid_start", process_start(int(fields["pid"])))
        with self.locked():
            before = self.status.to_json() if (self.path / STATUS).is_file() else {}
            status = _status_of({**before, **fields, "updated": now}, fields)
            atomic_write_json(self.path / STATUS, status.to_json())
        return status

    def write_status(self, state: str, *, only_from: Iterable[str] | None = None, **fields: Any) -> bool:
        """Set `state` and merge `fields` (pid, step, total_steps, error, ...) atomically.

        Active states refresh the heartbeat, terminal ones stamp `ended`. With `only_from`,
        nothing is written unless the current state is one of those (returns False), so a
        launcher never overwrites a state the job itself has moved on to.
        """
        if state not in STATES:
            raise ValueError(f"Expected `state` to be one of {', '.join(STATES)}, but got {state!r}")
        now = time.time()
        if state in ACTIVE_STATES:
            fields.setdefault("heartbeat", now)
        if state in TERMINAL_STATES:
            fields.setdefault("ended", now)
        with self.locked():
            if only_from is not None and self.status.state not in set(only_from):
                return False
            self.update_status(state=state, **fields)
        return True

    def write_running(self, **fields: Any) -> None:
        """The job's own `running`, with `fields` (its pid, threads, first step). A cancel asked
        while the job was starting (`stopping`, by runs.queue.cancel) stays said: the fields are
        merged and the state kept. Otherwise the Monitor showed `running` again for the
        minutes a model takes to load, until the loop saw the cancel at its first step."""
        with self.locked():
            current = self.status_or_none()
            if current is not None and current.state == RunState.STOPPING:
                self.update_status(heartbeat=time.time(), **fields)
            else:
                self.write_status(RunState.RUNNING, **fields)

    def heartbeat(self, step: int, total_steps: int | None = None) -> None:
        """Refresh the heartbeat and step (one small atomic write; call it every step)."""
        fields: dict[str, Any] = {"heartbeat": time.time(), "step": step}
        if total_steps is not None:
            fields["total_steps"] = total_steps
        self.update_status(**fields)

    @contextmanager
    def keepalive(self, phase: str, every_s: float = 10.0) -> Iterator[None]:
        """Heartbeat from a thread through one long blocking call (loading a model, a full
        evaluation), with `phase` in the status. A hang inside goes unnoticed, so keep it narrow."""
        done = threading.Event()

        def beat() -> None:
            while not done.wait(every_s):
                self.update_status(heartbeat=time.time())

        self.update_status(heartbeat=time.time(), phase=phase)
        thread = threading.Thread(target=beat, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()
            self.update_status(heartbeat=time.time(), phase=None)
