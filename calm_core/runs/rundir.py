"""Run-directory files, written in exactly one way (the guarantees: docs/reliability.md).

A run lives in `runs/<run_id>/` (root: `workspace_dir()/runs` unless given):

    config.json          the whole resolved config (the caller adds seed, versions, scoring rule)
    status.json          state, pid, heartbeat, step, total_steps, error, timestamps
    metrics.jsonl        one JSON object per logged step (`step`, `elapsed`, `section/name` keys)
    tensorboard/         the same records as TensorBoard event files, where installed (runs/events.py)
    checkpoint-<step>/   counts only once its `COMPLETE` marker exists (written last)
    selected/            adapter and head of the step the calibrated stop selected (same marker)
    CANCEL               present while a cancel is requested; the training loop checks it each step
    eval/<variant>/<dataset>.parquet, stdout.log, job.json (calm_core.runs.jobs)
    added_results.json   rows added after training (`calm eval --run`), with their sets' fingerprints
    added/eval/<variant>/<dataset>.parquet   their per-item predictions, apart from the run's own
    heldout/<variant>.parquet   each variant's S_V probabilities, as the recommendation saw them
    selective.json       the selective-answering threshold chosen on them (results/selective.py)

Everything a job writes goes through these functions: JSON files are replaced atomically
(temp file + rename) so a reader polling the directory never sees half a file; status
updates are read-merge-write under a per-run `flock`, so the job, the launcher and the
studio can all update fields without losing each other's; a metrics line goes out in one
`write` call, and a line cut short by a crash is ignored by the reader.

`RunDir` holds only a path: every property reads the disk afresh, nothing stays open.
Its parts live beside it, one job each (docs/architecture.md names them): `records` (the
typed status.json, config.json and results.json that `status`, `config` and `results()`
return), `layout`, `naming`, `damage`, `metrics_lines`, `status_writes` and `checkpoint_dirs`.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, TypeVar

from calm_core.io import atomic_write_json, atomic_write_text, staging_directory
from calm_core.runs.checkpoint_dirs import RunCheckpoints
from calm_core.runs.damage import RunFileError, read_json_object
from calm_core.runs.layout import (
    ADDED,
    ADDED_RESULTS,
    CANCEL,
    CONFIG,
    JOB_FILE,
    METRICS,
    RESULTS,
    SELECTIVE,
    STDOUT,
)
from calm_core.runs.metrics_lines import parse_metrics_lines
from calm_core.runs.naming import check_run_id, new_run_id, runs_root
from calm_core.runs.process import process_alive
from calm_core.runs.records import ResultRow, RunConfig, RunResults, RunStatus
from calm_core.runs.state import (
    ACTIVE_STATES,
    DAMAGED,
    STALE_AFTER_S,
    STATUS,
    RunState,
    ShownState,
    run_state,
)
from calm_core.runs.status_writes import RunStatusWrites, jsonable

T = TypeVar("T")


class RunFiles(NamedTuple):
    """The small files of a run as `RunDir.read_files` read them: status.json and
    config.json (None when one cannot be read) and why the run is damaged (None: it is
    not). Passed on, so a listing reads each file once."""

    status: RunStatus | None
    config: RunConfig | None
    damage: str | None


@dataclass(frozen=True)
class RunDir(RunStatusWrites, RunCheckpoints):
    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def create(cls, root: str | Path | None, run_id: str, config: RunConfig | Mapping[str, Any]) -> RunDir:
        """Make `<root>/<run_id>/` with `config.json` and a `queued` status (FileExistsError
        if taken). Both are written in a hidden directory renamed into place, so a reader
        never meets a run with one file and not the other."""
        if not isinstance(config, RunConfig):
            config = RunConfig.from_json(config, CONFIG, "the caller built it wrong")
        final = runs_root(root) / check_run_id(run_id)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            raise FileExistsError(f"Run {run_id} exists already under {final.parent}")
        staging = cls(staging_directory(final.parent, prefix=f".{run_id}.", suffix=".new"))
        try:
            atomic_write_json(staging.path / CONFIG, config.to_json())
            now = time.time()
            staging.write_status(
                RunState.QUEUED,
                run_id=run_id,
                created=now,
                queued_at=now,
                step=0,
                name=config.label("name"),
                method=config.label("method"),
            )
            try:
                os.rename(staging.path, final)  # fails on an existing non-empty directory: a clash
            except OSError as error:
                raise FileExistsError(f"Run {run_id} exists already under {final.parent}") from error
        except BaseException:
            shutil.rmtree(staging.path, ignore_errors=True)
            raise
        return cls(final)

    @classmethod
    def new(
        cls, config: RunConfig | Mapping[str, Any], name_hint: str | None = None, root: str | Path | None = None
    ) -> RunDir:
        """`create` with a fresh `new_run_id(name_hint)`, retrying on the rare id clash."""
        for _ in range(100):
            try:
                return cls.create(root, new_run_id(name_hint), config)
            except FileExistsError:
                continue
        raise FileExistsError(f"Could not find a free run id under {runs_root(root)}")

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        """A run directory: one with status.json, or with config.json alone (its status lost:
        listed as damaged, and `calm resume` rebuilds it)."""
        path = Path(path)
        if not (path / STATUS).is_file() and not (path / CONFIG).is_file():
            raise FileNotFoundError(f"Expected a run directory with {STATUS}, but {path} has none")
        return cls(path)

    @classmethod
    def at(cls, run_id: str, root: str | Path | None = None) -> RunDir:
        """Open a run by id (ids from a URL or a form are checked, so they cannot escape the root)."""
        return cls.open(runs_root(root) / check_run_id(run_id))

    @property
    def run_id(self) -> str:
        return self.path.name

    def advice(self, name: str) -> str:
        """What to do about a damaged or missing file `name` of this run (one clause)."""
        if name in (STATUS, JOB_FILE):
            return f"`calm resume {self.run_id}` rebuilds it"
        if name == RESULTS:
            return f"`calm resume {self.run_id}` evaluates the final checkpoint again"
        if name == CONFIG:
            return (
                f"run {self.run_id} cannot continue without it: restore it from a copy "
                "(its metrics and checkpoints are untouched)"
            )
        return f"restore it from a copy, or delete run {self.run_id}"

    @property
    def config(self) -> RunConfig:
        """config.json, checked (RunFileError names what is wrong)."""
        path = self.path / CONFIG
        return RunConfig.from_json(read_json_object(path, self.advice(CONFIG)), path, self.advice(CONFIG))

    @property
    def status(self) -> RunStatus:
        """status.json, checked (RunFileError names what is wrong)."""
        path = self.path / STATUS
        return RunStatus.from_json(read_json_object(path, self.advice(STATUS)), path, self.advice(STATUS))

    def status_or_none(self) -> RunStatus | None:
        """status.json, or None when it is lost or damaged: for readers of a finished run (an
        export, a report) whose subject is the results, not the status."""
        try:
            return self.status
        except (OSError, ValueError):
            return None

    def has_results(self) -> bool:
        """Whether the final evaluation wrote results.json (it may still be damaged)."""
        return (self.path / RESULTS).is_file()

    def results(self) -> RunResults:
        """results.json (the final evaluation), checked: its `results` rows each name their
        `dataset` and `variant`, and every typed part has its type."""
        path = self.path / RESULTS
        return RunResults.from_json(read_json_object(path, self.advice(RESULTS)), path, self.advice(RESULTS))

    def results_or_none(self) -> RunResults | None:
        """results.json, or None before the final evaluation wrote it (damage still raises)."""
        return self.results() if self.has_results() else None

    def added_results(self) -> list[ResultRow]:
        """The rows of evaluations added after training (added_results.json), [] when none
        was added; checked as `results()` checks its rows."""
        path = self.path / ADDED_RESULTS
        if not path.is_file():
            return []
        advice = f"delete it and run `calm eval --run {self.run_id}` again for the sets it held"
        rows = read_json_object(path, advice, {"results": list})["results"]
        return [ResultRow.from_json(row, path, advice) for row in rows]

    def write_results(self, results: RunResults) -> None:
        """results.json, replaced atomically (the final evaluation writes it once)."""
        atomic_write_json(self.path / RESULTS, results.to_json())

    def add_results(self, rows: list[Mapping[str, Any]]) -> list[ResultRow]:
        """Store rows of an evaluation added after training: they replace the earlier added
        rows of the same datasets (read-merge-write under the run's lock, written atomically);
        returns every added row. results.json, the final evaluation's, is never touched."""
        datasets = {row["dataset"] for row in rows}
        with self.locked():
            kept = [row for row in self.added_results() if row.dataset not in datasets]
            atomic_write_json(self.path / ADDED_RESULTS, {"results": [dict(row) for row in [*kept, *rows]]})
        return self.added_results()

    def write_selective(self, record: dict[str, Any]) -> None:
        """selective.json: the chosen selective-answering threshold (results/selective.py),
        replaced atomically; an export reads it."""
        atomic_write_json(self.path / SELECTIVE, record)

    def selective(self) -> dict[str, Any] | None:
        """selective.json, checked, or None when no threshold was saved."""
        path = self.path / SELECTIVE
        advice = f"delete it and choose again with `calm selective {self.run_id}`"
        return read_json_object(path, advice) if path.is_file() else None

    @property
    def added_dir(self) -> Path:
        """`added/`: the root of added evaluations' predictions (added/eval/<variant>/<dataset>.parquet)."""
        return self.path / ADDED

    def read_predictions(self, path: Path) -> Any:
        """One eval/<variant>/<dataset>.parquet as a DataFrame; a damaged file raises
        RunFileError naming it (the final evaluation writes them all again on resume)."""
        import pandas as pd

        try:
            return pd.read_parquet(path)
        except FileNotFoundError:
            raise
        except Exception as error:  # noqa: BLE001 - pyarrow's errors for a cut or foreign file vary
            first = str(error).splitlines()[0][:120] if str(error) else type(error).__name__
            raise RunFileError(
                f"{path} is damaged ({first}); delete {self.path / RESULTS} and run "
                f"`calm resume {self.run_id}` to evaluate again"
            ) from error

    def read_files(self) -> RunFiles:
        """status.json and config.json, each read once, and why the run cannot be shown or
        continued as it is (one line naming the file and what to do; None when it can).
        Checks the small files every view needs: status, config and a finished run's
        results (when it wrote them: a job need not). Damaged metrics lines are skipped by
        `read_metrics` instead, and checkpoints are checked when a resume reads them."""
        status, status_damage = self._read_checked(lambda: self.status)
        config, config_damage = self._read_checked(lambda: self.config)
        damage = status_damage or config_damage
        if status is not None and config is not None and status.state == RunState.FINISHED:
            if self.has_results() or config.train:  # a training run always writes it; others need not
                _, damage = self._read_checked(self.results)
        return RunFiles(status, config, damage)

    def _read_checked(self, read: Callable[[], T]) -> tuple[T | None, str | None]:
        """(`read()`, None), or (None, why) when the file it reads is damaged or missing."""
        try:
            return read(), None
        except RunFileError as error:
            return None, str(error)
        except FileNotFoundError as error:
            name = Path(error.filename or "").name
            return None, f"{self.path / name} is missing; {self.advice(name)}"

    def state(
        self, now: float | None = None, stale_after: float = STALE_AFTER_S, files: RunFiles | None = None
    ) -> ShownState:
        """The effective state (`run_state`), `damaged` when a file it needs is unreadable,
        and for a process that died without a word, the last line it printed. `files`:
        what `read_files` returned, when the caller has read them already (a listing)."""
        files = self.read_files() if files is None else files
        if files.damage is not None:
            return ShownState(DAMAGED, files.damage, not files.damage.startswith(str(self.path / CONFIG)))
        status = files.status
        if status is None:  # read_files names the damage whenever status.json cannot be read
            return ShownState(DAMAGED, f"{self.path / STATUS} cannot be read", True)
        view = run_state(status, now, stale_after)
        if view.state == RunState.FAILED and status.state in ACTIVE_STATES and process_alive(status) is False:
            last = self.last_output_line()
            if last:
                view = ShownState(view.state, f"{view.reason}; its last output: {last}", view.resumable)
        return view

    def last_output_line(self, tail_bytes: int = 4096) -> str | None:
        """The last non-empty line of stdout.log (why a job died before it could say so)."""
        try:
            with open(self.path / STDOUT, "rb") as handle:
                handle.seek(max(0, os.fstat(handle.fileno()).st_size - tail_bytes))
                lines = [ln.strip() for ln in handle.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        except OSError:
            return None
        return lines[-1][:300] if lines else None

    def record_resolved_train(self, train: Mapping[str, Any]) -> None:
        """config.json's `train` (and `scoring`) as the job resolved its `auto` settings."""
        scoring = {"rule": train["scoring"], "chat_template": bool(train.get("chat_template"))}
        with self.locked():
            record = {**self.config.to_json(), "train": dict(train), "scoring": scoring}
            atomic_write_json(self.path / CONFIG, RunConfig.from_json(record, self.path / CONFIG).to_json())

    # -- metrics -----------------------------------------------------------------------

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS

    def append_metrics(self, record: dict[str, Any]) -> None:
        """Append one JSON line in a single `write` call (a reader sees whole lines or none)."""
        if "step" not in record or "elapsed" not in record:
            raise ValueError(f"Expected a metrics record with `step` and `elapsed`, but got keys {sorted(record)}")
        line = (json.dumps(record, default=jsonable) + "\n").encode("utf-8")
        fd = os.open(self.metrics_path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line  # seal a line cut short by a crash, so this record stays whole
            os.write(fd, line)
        finally:
            os.close(fd)

    def read_metrics(self) -> list[dict[str, Any]]:
        """All complete records; an unfinished last line (a crash mid-write) is ignored."""
        try:
            data = self.metrics_path.read_bytes()
        except FileNotFoundError:
            return []
        return parse_metrics_lines(data)

    def truncate_metrics_after(self, step: int) -> int:
        """Keep only records with `step <= step` (atomic rewrite); returns how many were kept."""
        if not self.metrics_path.exists():
            return 0
        kept = [r for r in self.read_metrics() if r.get("step", 0) <= step]
        atomic_write_text(self.metrics_path, "".join(json.dumps(r, default=jsonable) + "\n" for r in kept))
        return len(kept)

    # -- cancel ------------------------------------------------------------------------

    def request_cancel(self) -> None:
        atomic_write_text(self.path / CANCEL, f"{time.time()}\n")

    def cancel_requested(self) -> bool:
        return (self.path / CANCEL).exists()

    def clear_cancel(self) -> None:
        (self.path / CANCEL).unlink(missing_ok=True)
