"""The frozen-prefix cache filled before a multiple-choice run's first step: every item
whose frozen layers the rest of the run reads, computed once (FrozenPrefixModel.prefill
says why that is cheaper than filling batch by batch), with progress in the run's status
and a cancel honoured between batches. The mcqa task's `prefill` is `fill_frozen_prefix`."""

from __future__ import annotations

import time
from typing import Any

from calm_core.data.stream import subset
from calm_core.faults import fault_point
from calm_core.runs.rundir import RunDir
from calm_core.scoring.progress import progress_callback
from calm_core.scoring.truncation import context_limit
from calm_core.training import distributed
from calm_core.training.batches import Data, batch_indices
from calm_core.training.context import StepContext
from calm_core.training.objectives import forward_sequences

PHASE_EVERY_S = 5.0  # seconds between progress writes to status.json during the cache fill


class _FillStopped(Exception):
    """A cancel asked for during the cache fill: stop filling (every batch so far is kept)."""


def scheduled_items(cfg: Any, data: Data, start_step: int) -> list[Any]:
    """Every item whose frozen layers the rest of the run reads on this rank: its share of
    the training items that steps start_step.. will draw (batch_indices is deterministic),
    all of S_V (periodic evaluation and TS read it whole; the upper level draws from it)
    and, on the rank that evaluates, the evaluation sets."""
    drawn = {
        i
        for step in range(start_step, cfg.steps)
        for i in distributed.shard(batch_indices(len(data.train), cfg.batch_size, step, cfg.seed))
    }
    evals = [it for items in data.evals.values() for it in items] if distributed.is_main() else []
    return list(subset(data.train, sorted(drawn))) + list(data.heldout) + evals  # LazyItems: one read of those rows


def fill_frozen_prefix(
    ctx: StepContext, data: Data, start_step: int, writer: RunDir | None, show: bool
) -> dict[str, Any] | None:
    """Fill the frozen-prefix cache before the first step (FrozenPrefixModel.prefill says
    why it is cheaper than filling batch by batch); progress goes to the run's status
    phase and, in the foreground, a progress bar. Returns a record for status.json, or
    None when the frozen layers are not cached."""
    if ctx.runner is None:
        return None
    per_item = forward_sequences(
        ctx.tokenizer,
        scheduled_items(ctx.settings, data, start_step),
        ctx.scoring,
        max_length=context_limit(ctx.net, ctx.tokenizer),
    )  # cut as the steps cut them
    update_bar, close_bar = progress_callback(show, len(per_item), "caching frozen layers")
    last_write = [float("-inf")]

    def report(done: int, total: int) -> None:  # status.json at most every PHASE_EVERY_S seconds, and at the end
        update_bar(done, total)
        fault_point("cache_fill")
        if writer is not None and (done == total or time.monotonic() - last_write[0] >= PHASE_EVERY_S):
            writer.update_status(phase=f"caching frozen layers: {done}/{total} items", heartbeat=time.time())
            last_write[0] = time.monotonic()
            if done < total and writer.cancel_requested():
                raise _FillStopped  # the loop's first check then ends the run as cancelled

    started = time.perf_counter()
    computed = ctx.runner.computed
    try:
        report(0, len(per_item))
        ctx.runner.prefill(per_item, progress=report)
    except _FillStopped:
        pass
    computed = ctx.runner.computed - computed
    close_bar()
    if writer is not None:
        writer.update_status(phase=None)
    return {"items": len(per_item), "sequences_computed": computed, "seconds": round(time.perf_counter() - started, 1)}
