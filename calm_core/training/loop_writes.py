"""What the training loop writes as it goes (rank 0 alone): a step's metrics record
(`train/*`, `bome/*`, `alpha/*`) into metrics.jsonl and, beside it, the TensorBoard event
files; the heartbeat; and on schedule a checkpoint with the calibrated stop's selection.
"""

from __future__ import annotations

from typing import Any

from calm_core.faults import fault_point
from calm_core.runs.events import TENSORBOARD, EventLog, final_counts, final_scalars, hparams_of
from calm_core.runs.rundir import RunDir
from calm_core.training.bilevel import BOME_LOG_KEYS
from calm_core.training.checkpoints import save_checkpoint
from calm_core.training.context import StepContext
from calm_core.training.loop_state import Loop


def alpha_values(ctx: StepContext) -> dict[str, Any]:
    """`alpha/*` summary statistics and, for the options scope, the vectors themselves."""
    if ctx.head is None:
        return {}
    values: dict[str, Any] = {f"alpha/{k}": v for k, v in ctx.head.summary().items()}
    if ctx.head.scope in ("options", "scalar"):  # the adaptive head's tau depends on the question: summary only
        values["alpha/tau"] = ctx.head.tau.detach().cpu().tolist()
        if ctx.head.shift is not None:
            values["alpha/l"] = ctx.head.shift.detach().cpu().tolist()
    return values


def step_row(step: int, elapsed: float, log: dict[str, float]) -> dict[str, Any]:
    bome_keys = set(BOME_LOG_KEYS)
    row: dict[str, Any] = {"step": step, "elapsed": elapsed}
    for key, value in log.items():
        section = "bome" if key in bome_keys else "train"
        row[f"{section}/{key}"] = value
    return row


def log_step(loop: Loop, stopping: bool) -> None:
    """Rank 0's writes after a step: the metrics record, the heartbeat, and on schedule a
    checkpoint with the calibrated stop's selection beside it."""
    writer, step, cfg = loop.writer, loop.step, loop.cfg
    assert writer is not None
    append_row(loop)
    fault_point("step_logged")
    writer.heartbeat(step, cfg.steps)
    if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and step < cfg.steps and not stopping:
        save_checkpoint(loop.ctx, writer, step, loop.stop.record())
        loop.stop.write_selected(loop.ctx, writer)


def append_row(loop: Loop) -> None:
    """The one place a step's record leaves the loop: its metrics.jsonl line and, beside
    it, its scalars in the event files (where they are written)."""
    assert loop.writer is not None
    loop.writer.append_metrics(loop.row)
    if loop.events is not None:
        loop.events.add(loop.row)


def open_events(writer: RunDir | None, start_step: int) -> EventLog | None:
    """Rank 0's event log. A resumed run continues after `start_step`: TensorBoard hides the
    earlier process's events from the next step on (metrics.jsonl was cut back to the same
    step); a run starting over from 0 with event files already there hides them all."""
    if writer is None:
        return None
    if start_step:
        purge: int | None = start_step + 1
    else:
        purge = 0 if (writer.path / TENSORBOARD).exists() else None
    return EventLog.open(writer.path, purge_step=purge)


def close_events(loop: Loop) -> None:
    """Close the event log with the hyperparameters (the resolved config) and, when the
    final evaluation wrote results.json, its metrics: the hparams table's row for this run.
    Called however the loop ended, so a failed run's curves are flushed too."""
    if loop.events is None or loop.writer is None:
        return
    rows: list[dict[str, Any]] = []
    if loop.writer.has_results():
        try:
            rows = [dict(row) for row in loop.writer.results().rows]

        except (OSError, ValueError):  # a damaged results.json: the curves and settings still go in
            rows = []
    loop.events.close(hparams_of(loop.cfg.to_dict()), final_scalars(rows), counts=final_counts(rows))
    loop.events = None
