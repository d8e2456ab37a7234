"""The training loop's evaluation passes: every `eval_every` steps (`periodic_evaluation`,
on every set or S_V alone, fed to the calibrated stop), and once the loop stops
(`final_pass`: the last checkpoint, then for a finished run the selected step's adapter and
head put back and the task's final evaluation run on them). Rank 0 evaluates alone.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any

from calm_core.faults import fault_point
from calm_core.runs.state import FINAL_PHASE, RunState
from calm_core.training import distributed
from calm_core.training.checkpoints import save_checkpoint
from calm_core.training.loop_state import Loop


def periodic_evaluation(loop: Loop, kind: str) -> bool:
    """The evaluation of the current step into `loop.row` (then appended to metrics.jsonl):
    every set (`kind` "full") or S_V alone ("heldout", the dense start; selection.EvalSchedule),
    fed to the calibrated stop; True when the stop's patience ran out. Rank 0 evaluates
    alone; its wall time goes into `loop.times` (every rank waits for it)."""
    ctx, writer = loop.ctx, loop.writer
    stopping, began = False, time.perf_counter()
    with distributed.gathered(ctx.model):  # FSDP: rank 0 runs forwards alone
        if distributed.is_main():
            with writer.keepalive("evaluating") if writer is not None else nullcontext():
                caches: dict[str, dict[tuple[bool, bool], Any]] = {}
                loop.row.update(
                    ctx.task.evaluate_now(
                        ctx, loop.data, ctx.settings.eval_batch_size, caches, heldout_only=kind == "heldout"
                    )
                )
                stopping = loop.stop.offer(ctx, loop.data, loop.step, loop.row, caches, writer)
    items = loop.times.sizes.evaluation_items(kind) if loop.times.sizes is not None else 0
    loop.times.add_evaluation(loop.step, kind, items, time.perf_counter() - began)
    return stopping


def final_pass(loop: Loop, state: str) -> None:
    """The checkpoint of `training.loop._stop` and, for a finished run, its final evaluation."""
    ctx, writer, step, stop = loop.ctx, loop.writer, loop.step, loop.stop
    if writer is not None and step > 0:  # outside `gathered`: a state_dict() reshards FSDP's layers
        save_checkpoint(ctx, writer, step, stop.record())
        stop.write_selected(ctx, writer)
    evaluates = state == RunState.FINISHED
    with distributed.gathered(ctx.model) if evaluates else nullcontext():  # FSDP: rank 0 runs forwards alone
        if evaluates and distributed.is_main():
            reuse = stop.restore(ctx, step)
            selection = stop.summary()
            if writer is not None:
                with writer.keepalive(FINAL_PHASE):  # minutes without a step: keep the heartbeat
                    extra = {"selection": selection} if selection else {}
                    ctx.task.final_evaluation(ctx, loop.data, writer, reuse, extra, times=loop.times)
                fault_point("results_written")
