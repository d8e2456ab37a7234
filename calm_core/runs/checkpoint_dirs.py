"""A run's checkpoint directories and `selected/`: written whole, found, pruned, resumed from.

`RunCheckpoints` is the part of `RunDir` (calm_core.runs.rundir) that handles the
directories a trainer saves its state into; it lives apart because it is its own
protocol (a hidden staging directory renamed into place with a `COMPLETE` marker, so a
crash leaves the old checkpoint or the new one, never a mix; docs/reliability.md).
`RunDir` inherits it: call these methods on a `RunDir`.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

from calm_core.io import atomic_write_json, staging_directory
from calm_core.runs.damage import RunFileError
from calm_core.runs.layout import COMPLETE, SELECTED


class ResumePoint(NamedTuple):
    """Where a (re)started trainer continues: after `step`, from `path` (None: from the
    start), with what the reader loaded from it, and the newer checkpoints it skipped."""

    step: int
    path: Path | None
    data: Any = None
    skipped: tuple[str, ...] = ()


class RunCheckpoints:
    """The checkpoint methods of `RunDir`, which provides `path`, `run_id` and
    `truncate_metrics_after`."""

    path: Path

    @property
    def run_id(self) -> str:
        raise NotImplementedError  # RunDir's property replaces it

    truncate_metrics_after: Callable[[int], int]

    def checkpoint_dir(self, step: int) -> Path:
        """Where the checkpoint of `step` goes (`checkpoint-<step>/`; not created here)."""
        return self.path / f"checkpoint-{int(step)}"

    def _checkpoints(self) -> list[tuple[int, Path, bool]]:
        """(step, dir, complete) for every checkpoint directory, by step."""
        self._restore_replaced()
        found = []
        for child in self.path.glob("checkpoint-*"):
            suffix = child.name.removeprefix("checkpoint-")
            if suffix.isdigit() and child.is_dir():
                found.append((int(suffix), child, (child / COMPLETE).is_file()))
        return sorted(found)

    def _restore_replaced(self) -> None:
        """Put back a complete checkpoint whose replacement was cut off between the two
        renames of `writing_checkpoint` (the only moment a step has no directory)."""
        for old in [*self.path.glob(".checkpoint-*.old"), *self.path.glob(f".{SELECTED}.old")]:
            final = self.path / old.name[1:].removesuffix(".old")
            if not final.exists() and (old / COMPLETE).is_file():
                os.rename(old, final)

    @contextmanager
    def writing_checkpoint(self, step: int) -> Iterator[Path]:
        """A fresh hidden directory to write the checkpoint of `step` into. When the block
        ends without an error, a `COMPLETE` marker goes in and the directory is renamed to
        `checkpoint-<step>` as a whole, so a crash at any moment leaves either the old
        checkpoint or the new one, never a mix. An error (or a kill) leaves only a hidden
        directory, which `prune_checkpoints` removes."""
        with self._writing_whole(self.checkpoint_dir(step), step) as staging:
            yield staging

    @property
    def selected_dir(self) -> Path:
        """`selected/`: the adapter and head of the step the calibrated stop selected
        (training/selection.py), replaced whole each time a better step is found."""
        return self.path / SELECTED

    @contextmanager
    def writing_selected(self, step: int) -> Iterator[Path]:
        """As `writing_checkpoint`, for `selected/` (its COMPLETE marker names the step)."""
        with self._writing_whole(self.selected_dir, step) as staging:
            yield staging

    def selected_step(self) -> int | None:
        """The step `selected/` holds, or None when there is no complete one."""
        self._restore_replaced()
        marker = self.selected_dir / COMPLETE
        try:
            return int(json.loads(marker.read_text(encoding="utf-8"))["step"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    @contextmanager
    def _writing_whole(self, final: Path, step: int) -> Iterator[Path]:
        """A hidden staging directory renamed to `final` as a whole once the block ends
        (with a COMPLETE marker naming `step`); see `writing_checkpoint`."""
        staging = staging_directory(self.path, prefix=f".{final.name}.", suffix=".partial")
        try:
            yield staging
            atomic_write_json(staging / COMPLETE, {"step": int(step), "time": time.time()})
            if final.exists():  # the same step again (a resume that stops at once): swap
                old = self.path / f".{final.name}.old"
                shutil.rmtree(old, ignore_errors=True)
                os.rename(final, old)
                os.rename(staging, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def latest_checkpoint(self) -> tuple[int, Path] | None:
        complete = [(step, path) for step, path, done in self._checkpoints() if done]
        return complete[-1] if complete else None

    def exported_step(self) -> tuple[int, Path]:
        """(step, directory) of what an export, an added evaluation or the Playground uses:
        the step the calibrated stop selected (`selected/`, training/selection.py) when the
        run has one, else the latest complete checkpoint."""
        selected = self.selected_step()
        if selected is not None:
            return selected, self.selected_dir
        latest = self.latest_checkpoint()
        if latest is None:
            raise ValueError(f"Expected a complete checkpoint in run {self.run_id}, but it has none")
        return latest

    def prune_checkpoints(self, keep: int = 2) -> list[Path]:
        """Delete all but the `keep` newest complete checkpoints, unfinished ones older than
        the newest complete one, and staging directories left by a crash. Returns the
        deleted directories."""
        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"Expected `keep` to be a positive int, but got {keep!r}")
        checkpoints = self._checkpoints()
        complete = [step for step, _, done in checkpoints if done]
        if not complete:
            return []
        keep_steps = set(complete[-keep:])
        doomed = [path for step, path, done in checkpoints if step < complete[-1] and step not in keep_steps]
        doomed += sorted(self.path.glob(".checkpoint-*.partial")) + sorted(self.path.glob(f".{SELECTED}.*.partial"))
        for path in doomed:
            (path / COMPLETE).unlink(missing_ok=True)  # first, so a half-deleted one never counts
            shutil.rmtree(path, ignore_errors=True)
        return doomed

    def prepare_resume(self, read: Callable[[Path], Any] | None = None, fresh: bool = False) -> ResumePoint:
        """For a (re)starting trainer: the newest complete checkpoint that `read` can load
        (`read(dir)` returns its contents or raises), with metrics.jsonl cut back to its
        step so curves have no gaps or duplicates. Nothing is cut before a checkpoint has
        been read whole: a damaged one is skipped (and named in `skipped`) for the one
        before it. When checkpoints exist and none can be read, RunFileError, with every
        file untouched, unless `fresh` (asked for explicitly: `calm resume --fresh`), which
        starts over: step 0, no metrics kept. Without any checkpoint it starts over too."""
        skipped: list[str] = []
        if not fresh:
            for step, path in reversed([(s, p) for s, p, done in self._checkpoints() if done]):
                try:
                    data = read(path) if read is not None else None
                except Exception as error:  # noqa: BLE001 - any reason a checkpoint cannot be read
                    skipped.append(f"{path.name}: {str(error).splitlines()[0] if str(error) else type(error).__name__}")
                    continue
                self.truncate_metrics_after(step)
                return ResumePoint(step, path, data, tuple(skipped))
            if skipped:
                raise RunFileError(
                    f"no usable checkpoint in run {self.run_id} ({'; '.join(skipped)}); "
                    f"`calm resume {self.run_id} --fresh` starts it over from step 0"
                )
        self.truncate_metrics_after(-1)
        return ResumePoint(0, None, None, tuple(skipped))
