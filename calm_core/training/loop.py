"""The one training loop every method and task shares, writing the run directory as it goes.

    cfg = TrainConfig.preset("quick")
    result = train(cfg, run=RunDir.new(run_config_record(cfg)))  # launch.py; launch_training queues a job

Per step: a deterministic training batch (and S_V batch), the method's step, a metrics
record (`train/*`, `bome/*`, `alpha/*`), a heartbeat; every `eval_every` steps the
accuracy, ECE and entropy on S_V and each evaluation set (`eval/<dataset>/<metric>`);
every `checkpoint_every` steps a checkpoint (adapter, head, optimizer, RNG). A cancel
file stops the loop after the current step with a checkpoint and state `cancelled`.
Resuming loads the newest checkpoint that reads whole (a damaged one is skipped, and
said) and continues the same curves (training/checkpoints.py). What the objectives and
evaluations are is the task's (training/tasks/); what a step does is the method's
(training/methods/). `faults.fault_point` marks where tests kill the job.

Here is the loop itself; what it is built with is training/run_context.py, what it carries
from step to step training/loop_state.py, what it writes training/loop_writes.py, and its
evaluation passes training/loop_evaluation.py.
"""

from __future__ import annotations

import dataclasses
import random
import time
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch

from calm_core.data.stream import max_choices
from calm_core.faults import fault_point
from calm_core.runs.events import tensorboard_choice
from calm_core.runs.rundir import RunDir
from calm_core.runs.state import RunState
from calm_core.scoring.adapters import quantization_choice
from calm_core.training import distributed
from calm_core.training.autocast import autocast_for, resolve_autocast
from calm_core.training.batches import batch_indices, load_data
from calm_core.training.checkpoints import resume_point
from calm_core.training.config import TrainConfig
from calm_core.training.loop_evaluation import final_pass, periodic_evaluation
from calm_core.training.loop_state import Loop, TrainResult
from calm_core.training.loop_writes import alpha_values, append_row, close_events, log_step, open_events, step_row
from calm_core.training.methods import get_method
from calm_core.training.run_context import build_context
from calm_core.training.scoring_choice import resolve_scoring
from calm_core.training.stopping import CalibratedStop
from calm_core.training.tasks import get_task
from calm_core.training.tasks.mcqa import fit_adaptive_projection
from calm_core.training.timings import PhaseTimes, RunSizes

if TYPE_CHECKING:  # loading models pulls in transformers; the loop imports it when it loads one
    from calm_core.scoring.models import LoadedModel


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train(
    cfg: TrainConfig,
    run: RunDir | None = None,
    lm: LoadedModel | None = None,
    progress: Callable[[int, int, dict[str, Any]], None] | None = None,
) -> TrainResult:
    """Run (or resume) training; the run directory, if given, receives everything.

    Under torchrun (WORLD_SIZE > 1) every rank calls this with the same run: each trains
    on its shard of every batch with gradients averaged (calm_core.training.distributed), and
    only rank 0 writes the run directory and evaluates.
    """
    from calm_core.scoring.models import ModelSpec, load_model

    times = PhaseTimes.start()  # status.json `timings`: what each part of the run took (training/timings.py)
    seed_everything(cfg.seed)
    data = load_data(cfg, get_task(cfg.task).ITEM_KIND)
    if lm is None:
        use_4bit, _ = quantization_choice(
            cfg.load_in_4bit, torch.device("cuda" if torch.cuda.is_available() else "cpu")
        )
        with run.keepalive("loading the model") if run is not None and distributed.is_main() else nullcontext():
            lm = load_model(ModelSpec(name=cfg.model, device=cfg.device, dtype=cfg.dtype, load_in_4bit=use_4bit))
    distributed.init_from_env(lm.device)
    cfg, scoring_choice = resolve_scoring(cfg, lm, data.heldout, run if distributed.is_main() else None)  # `auto`
    k_max = max(max_choices(items) for items in (data.train, data.heldout, *data.evals.values()))  # from the index
    method = get_method(cfg.method)
    ctx, choices = build_context(cfg, lm, k_max, method)
    fsdp = distributed.FsdpSettings.from_env()
    if fsdp.enabled and (cfg.task != "mcqa" or cfg.scoring != "letter" or ctx.runner is not None):
        raise ValueError(
            "Expected --scoring letter, task mcqa and no frozen prefix under FSDP, which needs every rank "
            "to run the same forward passes (cloze runs, generation and cache hits differ by batch)"
        )
    choices["fsdp"] = distributed.shard_frozen(ctx.model, [*ctx.theta, *ctx.alpha], fsdp)
    start_step, elapsed_before = 0, 0.0
    writer = run if distributed.is_main() else None  # rank 0 alone writes
    fault_point("model_loaded")
    cut = ctx.task.check_items(ctx, data)
    if ctx.head is not None and ctx.head.reads_features:  # a resumed run's checkpoint then replaces it
        choices["adaptive_head"] = fit_adaptive_projection(ctx, data)
    if writer is not None:
        choices["tensorboard"] = tensorboard_choice(cfg.tensorboard)
    if run is not None:
        if writer is not None:
            run.update_status(
                choices={
                    **choices,
                    "world_size": distributed.world_size(),
                    "autocast": resolve_autocast(cfg.autocast, lm.device),
                    "scoring": scoring_choice.to_dict(),
                    "dropped_training_questions": data.dropped,
                    "rejected_rows": data.rejected,
                },
                model=lm.info,
                items_cut_to_context=cut,
            )
        start_step, elapsed_before = resume_point(ctx, run, writer)
        if writer is not None:
            run.write_running(step=start_step, total_steps=cfg.steps)
    times.sizes = RunSizes.of(
        cfg,
        data,
        fills=ctx.runner is not None,
        uses_head=ctx.head is not None,
        selects=ctx.task.SELECTS,
        recommends=getattr(ctx.task, "RECOMMENDS", False),
    )
    times.load_s = times.since_start()  # data, model, adapter and checkpoint: everything before the fill
    with autocast_for(cfg.autocast, lm.device):
        with times.part("fill"):
            prefilled = ctx.task.prefill(ctx, data, start_step, writer, show=progress is not None)
        if writer is not None:
            writer.update_status(**({"prefill": prefilled} if prefilled is not None else {}), timings=times.to_dict())
        stop = CalibratedStop.start(cfg, ctx, writer, start_step)
        loop = Loop(cfg, ctx, method, data, writer, stop, times, progress, start_step, elapsed_before)
        loop.events = open_events(writer, start_step) if choices.get("tensorboard", {}).get("written") else None
        try:
            result = _loop(loop)
        finally:
            close_events(loop)
    return dataclasses.replace(result, prefill=prefilled)


def _loop(loop: Loop) -> TrainResult:
    cfg, ctx, data, writer = loop.cfg, loop.ctx, loop.data, loop.writer
    started = time.perf_counter()
    schedule = cfg.eval_schedule
    if loop.step == 0 and loop.stop.enabled:  # step 0: the untouched model, a candidate of the calibrated stop
        if _cancel_requested(writer):  # asked while the job loaded or filled: not after minutes of evaluation
            return _stop(loop, RunState.CANCELLED)
        loop.row = {"step": 0, "elapsed": 0.0, **alpha_values(ctx)}
        periodic_evaluation(loop, "full")
        if writer is not None:
            append_row(loop)
    while loop.step < cfg.steps:
        if _cancel_requested(writer):
            return _stop(loop, RunState.CANCELLED)
        began, evaluated_before = time.perf_counter(), loop.times.evaluation_seconds()
        step = loop.step
        train_items = [data.train[i] for i in batch_indices(len(data.train), cfg.batch_size, step, cfg.seed)]
        heldout_items = [
            data.heldout[i] for i in batch_indices(len(data.heldout), cfg.heldout_batch_size, step, cfg.seed + 1)
        ]
        log = distributed.mean_log(
            loop.method.step(ctx, distributed.shard(train_items), distributed.shard(heldout_items))
        )
        loop.step = step = step + 1
        loop.row = step_row(step, loop.elapsed_before + time.perf_counter() - started, log)
        loop.row.update(alpha_values(ctx))
        kind = schedule.kind(step)
        stopping = kind is not None and periodic_evaluation(loop, kind)
        stopping = distributed.mean_value(1.0 if stopping else 0.0) > 0.0  # rank 0 decides; every rank stops
        if writer is not None:
            log_step(loop, stopping)
        if loop.progress is not None and distributed.is_main():
            loop.progress(step, cfg.steps, loop.row)
        loop.times.add_step(time.perf_counter() - began - (loop.times.evaluation_seconds() - evaluated_before))
        if stopping:
            break
    return _stop(loop, RunState.FINISHED)


def _cancel_requested(writer: RunDir | None) -> bool:
    """Rank 0 reads the cancel file; every rank learns its answer (they stop together)."""
    asked = writer is not None and writer.cancel_requested()
    return distributed.mean_value(1.0 if asked else 0.0) > 0.0


def _stop(loop: Loop, state: str) -> TrainResult:
    """Checkpoint the last step (resume continues from it); when finished, put the
    selected step's adapter and head back and run the final evaluation on them (timed
    together as the `final` part)."""
    writer = loop.writer
    with loop.times.part("final"):
        final_pass(loop, state)
    loop.times.finish()
    if writer is not None:
        writer.clear_cancel()
        writer.write_status(state, step=loop.step, phase=None, timings=loop.times.to_dict())
    return TrainResult(state, loop.step, writer.path if writer else None, loop.row)
