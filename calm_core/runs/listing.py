"""Every run under a root, one summary line each: `calm runs`, the studio's run pickers, the job queue.

A listing polls every run directory, so it reads each run's small files once
(`RunDir.read_files`) and derives the state, the labels and the progress from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from calm_core.runs.layout import CONFIG
from calm_core.runs.lifecycle import RunState
from calm_core.runs.naming import runs_root
from calm_core.runs.records import RunStatus
from calm_core.runs.rundir import RunDir
from calm_core.runs.state import DAMAGED, STALE_AFTER_S, STATUS


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    path: Path
    state: str  # effective state (liveness checked)
    reason: str
    resumable: bool
    step: int | None
    total_steps: int | None
    created: float | None
    name: str | None
    method: str | None
    queued_at: float | None = None
    launched_by: str | None = None  # the studio session's opaque tag (config.json), None from the CLI
    data: str | None = None  # the training set S_T (config.json), for the pickers
    started: float | None = None  # when the job began running (status.json), else None
    launched_from: str | None = None  # the signed-in browser's opaque tag (config.json), shared studio only


def summarize(run: RunDir, now: float | None = None, stale_after: float = STALE_AFTER_S) -> RunSummary:
    """One line of `calm runs` / the run pickers. A damaged run is listed too, as
    `damaged` with the file and what to do, never skipped."""
    files = run.read_files()
    view = run.state(now, stale_after, files)
    status, config = files.status or RunStatus(DAMAGED), files.config
    name, method = status.name, status.method
    if name is None and method is None and config is not None:
        name, method = config.label("name"), config.label("method")
    return RunSummary(
        run.run_id,
        run.path,
        view.state,
        view.reason,
        view.resumable,
        status.step if files.status is not None else None,
        status.total_steps,
        status.created,
        name,
        method,
        status.queued_at,
        config.launched_by if config is not None else None,
        config.label("train_data") if config is not None else None,
        status.started,
        config.launched_from if config is not None else None,
    )


def run_label(summary: RunSummary) -> str:
    """A run in a picker: its name or id, state, method, training data and start time (UTC,
    when it began running, else when it was created), so a person can tell runs apart
    without opening them: "20261201-224000-domain-1a2b · finished · calm on split/quiz/train ·
    2026-12-01 22:40". The id leads: it is what the picker returns and what `calm` takes."""
    when = summary.started or summary.created
    stamp = datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%d %H:%M") if when else "not started"
    method = summary.method or "?"
    on = f" on {summary.data}" if summary.data else ""
    return f"{summary.run_id} · {summary.state} · {method}{on} · {stamp}"


def run_statuses(root: str | Path | None = None) -> list[tuple[RunDir, RunStatus]]:
    """(run, status.json) of every run under `root` whose status reads, each read once:
    what the scheduler needs (the queue and the slots held), without the display
    summaries `list_runs` makes. A damaged or vanished run is left out."""
    root = runs_root(root)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        if child.name.startswith(".") or not (child / STATUS).is_file():
            continue
        run = RunDir(child)
        try:
            found.append((run, run.status))
        except (OSError, ValueError):
            continue  # removed or damaged meanwhile
    return found


def queued_runs(statuses: list[tuple[RunDir, RunStatus]]) -> list[RunDir]:
    """The queued runs among `run_statuses`, oldest first (queued_at, then id)."""
    queued = [(run, status) for run, status in statuses if status.state == RunState.QUEUED]
    return [run for run, _ in sorted(queued, key=lambda rs: (rs[1].queued_at or 0.0, rs[0].run_id))]


def list_runs(
    root: str | Path | None = None, now: float | None = None, stale_after: float = STALE_AFTER_S
) -> list[RunSummary]:
    """Every run under `root`, newest first, damaged ones included (state `damaged`).
    Reads the small JSON files only; a directory with neither status.json nor config.json
    is not a run."""
    root = runs_root(root)
    if not root.is_dir():
        return []
    summaries = []
    for child in root.iterdir():
        if child.name.startswith(".") or not ((child / STATUS).is_file() or (child / CONFIG).is_file()):
            continue
        try:
            summaries.append(summarize(RunDir(child), now, stale_after))
        except (OSError, ValueError):
            continue  # removed while listing
    return sorted(summaries, key=lambda s: (s.created or 0.0, s.run_id), reverse=True)
