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
"""

from __future__ import annotations

import dataclasses
import random
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch

from calm_core.calibration.head import CalibrationHead, acts_on_for, make_head, shifts_allowed
from calm_core.data.stream import max_choices
from calm_core.faults import fault_point
from calm_core.paths import cache_dir
from calm_core.runs.events import TENSORBOARD, EventLog, final_counts, final_scalars, hparams_of, tensorboard_choice
from calm_core.runs.rundir import RunDir
from calm_core.runs.state import FINAL_PHASE, RunState
from calm_core.scoring.adapters import attach_lora, lora_parameters, quantization_choice
from calm_core.scoring.prompts import ScoringConfig
from calm_core.training import distributed
from calm_core.training.batches import Data, batch_indices, load_data
from calm_core.training.bilevel import BOME_LOG_KEYS
from calm_core.training.checkpoints import resume_point, save_checkpoint
from calm_core.training.config import TrainConfig
from calm_core.training.context import Method, StepContext
from calm_core.training.methods import get_method
from calm_core.training.scoring_choice import resolve_scoring
from calm_core.training.stopping import CalibratedStop
from calm_core.training.tasks import get_task
from calm_core.training.tasks.mcqa import fit_adaptive_projection
from calm_core.training.timings import PhaseTimes, RunSizes

if TYPE_CHECKING:  # loading models pulls in transformers; the loop imports it when it loads one
    from calm_core.scoring.models import LoadedModel


@dataclass
class TrainResult:
    state: str  # finished | cancelled
    step: int
    run_dir: Path | None
    last_metrics: dict[str, Any] = field(default_factory=dict)
    prefill: dict[str, Any] | None = None  # the frozen-prefix fill before the first step (the task's prefill)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_context(cfg: TrainConfig, lm: LoadedModel, k_max: int, method: Method) -> tuple[StepContext, dict[str, Any]]:
    """LoRA-wrapped model, head and optimizer; returns the context and the choices it made (status.json `choices`)."""
    use_4bit, why = quantization_choice(cfg.load_in_4bit, lm.device)
    model, lora_record = attach_lora(lm.model, cfg.lora, quantized=use_4bit and lm.spec.load_in_4bit)
    model.train()
    head = None
    if method.USES_HEAD:
        scope = cfg.effective_scope
        size = {"vocab": model.config.vocab_size, "options": k_max}.get(scope)
        width = model.config.get_text_config().hidden_size  # a multimodal model's LM part
        shifts = k_max if scope == "adaptive" and shifts_allowed(cfg.scoring, cfg.task) else 0  # l(h): letter
        head = make_head(scope, size=size, width=width, acts_on=acts_on_for(scope, cfg.task), shifts=shifts)
        head = head.to(lm.device)
    theta = lora_parameters(model)
    alpha = list(head.parameters()) if head is not None else []
    optimizer = make_optimizer(cfg, theta, alpha)
    scoring = ScoringConfig(rule=cfg.scoring, chat_template=cfg.chat_template)
    runner, prefix_record = _frozen_prefix_runner(cfg, model)
    ctx = StepContext(
        model=model,
        tokenizer=lm.tokenizer,
        scoring=scoring,
        optimizer=optimizer,
        theta=theta,
        alpha=alpha,
        head=head,
        settings=cfg,
        task=get_task(cfg.task),
        runner=runner,
    )
    choices = {
        "quantization": {"four_bit": use_4bit and lm.spec.load_in_4bit, "reason": why},
        "lora": lora_record,
        "frozen_prefix": prefix_record,
        "fast_paths": _fast_path_record(model, prefix_record),
        "precision": lm.info.get("precision"),  # the body's dtype and why (scoring/precision.py)
    }
    return ctx, choices


def _fast_path_record(model: Any, prefix_record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each fast path the run uses or not, and why (`scoring.fast_paths`): the measured
    scoring paths and the frozen prefix as `_frozen_prefix_runner` decided it."""
    from calm_core.scoring.fast_paths import fast_path_choices

    frozen = {"on": bool(prefix_record["used"]), "reason": prefix_record["reason"], "gap": prefix_record.get("gap")}
    return {**fast_path_choices(model), "frozen_prefix": frozen}


def restored_context(cfg: TrainConfig, lm: LoadedModel, directory: Path, k_max: int) -> StepContext:
    """The context of a finished run's model for evaluation: LoRA and head built as the run
    built them (`build_context`), then the adapter and head of `directory` (its `selected/`
    or a checkpoint) put in, so scores go through the same path as its final evaluation.
    An options head keeps its saved size: items with more than that many options are refused."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    from calm_core.calibration.head_base import HEAD_FILENAME

    saved = CalibrationHead.load(directory, cfg.task) if (directory / HEAD_FILENAME).is_file() else None
    if saved is not None and saved.scope == "options":
        if k_max > saved.size:
            raise ValueError(
                f"Expected items with at most {saved.size} options (the run's options head has "
                f"{saved.size} positions), but got items with {k_max}"
            )
        k_max = saved.size
    ctx, _ = build_context(cfg, lm, k_max, get_method(cfg.method))
    loaded = set_peft_model_state_dict(ctx.model, load_file(str(directory / "adapter_model.safetensors")))
    if loaded.unexpected_keys:  # an adapter of another shape would leave this one at its random start
        raise ValueError(
            f"Expected the adapter in {directory} to fit the run's LoRA settings, but "
            f"{len(loaded.unexpected_keys)} of its tensors do not (first: {loaded.unexpected_keys[0]})"
        )
    if (ctx.head is None) != (saved is None):
        raise ValueError(
            f"Expected {'a' if ctx.head is not None else 'no'} calibration head in {directory} "
            f"(method {cfg.method}), but found {'none' if saved is None else 'one'}"
        )
    if ctx.head is not None:
        ctx.head.load_state_dict(saved.state_dict())
    ctx.model.eval()
    return ctx


def make_optimizer(
    cfg: TrainConfig, theta: list[torch.nn.Parameter], alpha: list[torch.nn.Parameter]
) -> torch.optim.Optimizer:
    """`sgd`: a plain step u <- u - lr g per block (no momentum, no weight decay), which
    keeps BOME's descent guarantee (bilevel.plain_step_sizes); `adamw`: AdamW, weight
    decay on theta only."""
    if cfg.optimizer == "sgd":
        groups = [{"params": theta, "lr": cfg.lr_theta}] + ([{"params": alpha, "lr": cfg.lr_alpha}] if alpha else [])
        return torch.optim.SGD(groups, momentum=0.0)
    groups = [{"params": theta, "lr": cfg.lr_theta, "weight_decay": cfg.weight_decay}]
    if alpha:
        groups.append({"params": alpha, "lr": cfg.lr_alpha, "weight_decay": 0.0})
    return torch.optim.AdamW(groups)


def _frozen_prefix_runner(cfg: TrainConfig, model: Any) -> tuple[Any, dict[str, Any]]:
    """A FrozenPrefixModel when it applies and proves equal to the model's own forward
    (`fast_paths.frozen_prefix_check`, measured once per model and split), and a
    record of why or why not (config.json)."""
    from calm_core.scoring.fast_paths import frozen_prefix_check
    from calm_core.scoring.frozen_prefix import FrozenPrefixModel, frozen_prefix_split

    if not cfg.frozen_prefix:
        return None, {"used": False, "reason": "off (frozen_prefix = false)"}
    split = frozen_prefix_split(model, cfg.lora.layers)
    if split is None:
        why = "LoRA adapts every layer" if cfg.lora.layers is None else "no decoder layers to cache or k >= layers"
        return None, {"used": False, "reason": why}
    check = frozen_prefix_check(model, split)
    if not check.on:
        return None, {"used": False, "split_layer": split, "reason": check.reason, "gap": check.gap}

    store = cache_dir() / "frozen_prefix" if cfg.frozen_prefix_store else None
    runner = FrozenPrefixModel(model, split, store_root=store)
    runner.share_top = check.share_top  # off where only the top layers' prefix sharing failed the probe
    return runner, {
        "used": True,
        "split_layer": split,
        "share_top": check.share_top,
        "store": str(runner.store.path) if runner.store else None,
        "reason": f"LoRA on the top {cfg.lora.layers} layers only; {check.reason}",
        "gap": check.gap,
    }


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


def _step_row(step: int, elapsed: float, log: dict[str, float]) -> dict[str, Any]:
    bome_keys = set(BOME_LOG_KEYS)
    row: dict[str, Any] = {"step": step, "elapsed": elapsed}
    for key, value in log.items():
        section = "bome" if key in bome_keys else "train"
        row[f"{section}/{key}"] = value
    return row


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
            run.write_status(RunState.RUNNING, step=start_step, total_steps=cfg.steps)
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
        loop.events = _open_events(writer, start_step) if choices.get("tensorboard", {}).get("written") else None
        try:
            result = _loop(loop)
        finally:
            _close_events(loop)
    return dataclasses.replace(result, prefill=prefilled)


def resolve_autocast(setting: str, device: torch.device) -> str:
    """`auto` -> bf16 on a CUDA GPU that has it, none elsewhere. On the GPU the QLoRA
    model keeps its norms, embeddings and LM head in fp32 (prepare_model_for_kbit_training)
    and PEFT keeps LoRA weights in fp32, so without autocast those matmuls run in fp32;
    on the CPU bf16 matmuls are slower than fp32, so nothing is gained there."""
    if setting != "auto":
        return setting
    return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "none"


def autocast_for(setting: str, device: torch.device) -> AbstractContextManager[Any]:
    """torch.autocast in bf16 (thread-local: it covers everything the block runs), or nothing."""
    if resolve_autocast(setting, device) == "none":
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


@dataclass
class Loop:
    """What the loop carries from step to step, so its parts take the loop and what varies.

    `writer` is the run directory on rank 0 and None on other ranks (and without a run):
    only rank 0 writes. `step` is the last step taken, `row` its metrics record."""

    cfg: TrainConfig
    ctx: StepContext
    method: Method
    data: Data
    writer: RunDir | None
    stop: CalibratedStop
    times: PhaseTimes
    progress: Callable[[int, int, dict[str, Any]], None] | None = None
    step: int = 0
    elapsed_before: float = 0.0  # training time of the run's earlier processes (a resumed run)
    row: dict[str, Any] = field(default_factory=dict)
    events: EventLog | None = None  # TensorBoard event files beside metrics.jsonl (runs/events.py)


def _loop(loop: Loop) -> TrainResult:
    cfg, ctx, data, writer = loop.cfg, loop.ctx, loop.data, loop.writer
    started = time.perf_counter()
    schedule = cfg.eval_schedule
    if loop.step == 0 and loop.stop.enabled:  # step 0: the untouched model, a candidate of the calibrated stop
        loop.row = {"step": 0, "elapsed": 0.0, **alpha_values(ctx)}
        _evaluate(loop, "full")
        if writer is not None:
            _append_row(loop)
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
        loop.row = _step_row(step, loop.elapsed_before + time.perf_counter() - started, log)
        loop.row.update(alpha_values(ctx))
        kind = schedule.kind(step)
        stopping = kind is not None and _evaluate(loop, kind)
        stopping = distributed.mean_value(1.0 if stopping else 0.0) > 0.0  # rank 0 decides; every rank stops
        if writer is not None:
            _log_step(loop, stopping)
        if loop.progress is not None and distributed.is_main():
            loop.progress(step, cfg.steps, loop.row)
        loop.times.add_step(time.perf_counter() - began - (loop.times.evaluation_seconds() - evaluated_before))
        if stopping:
            break
    return _stop(loop, RunState.FINISHED)


def _log_step(loop: Loop, stopping: bool) -> None:
    """Rank 0's writes after a step: the metrics record, the heartbeat, and on schedule a
    checkpoint with the calibrated stop's selection beside it."""
    writer, step, cfg = loop.writer, loop.step, loop.cfg
    assert writer is not None
    _append_row(loop)
    fault_point("step_logged")
    writer.heartbeat(step, cfg.steps)
    if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and step < cfg.steps and not stopping:
        save_checkpoint(loop.ctx, writer, step, loop.stop.record())
        loop.stop.write_selected(loop.ctx, writer)


def _append_row(loop: Loop) -> None:
    """The one place a step's record leaves the loop: its metrics.jsonl line and, beside
    it, its scalars in the event files (where they are written)."""
    assert loop.writer is not None
    loop.writer.append_metrics(loop.row)
    if loop.events is not None:
        loop.events.add(loop.row)


def _open_events(writer: RunDir | None, start_step: int) -> EventLog | None:
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


def _close_events(loop: Loop) -> None:
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


def _evaluate(loop: Loop, kind: str) -> bool:
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
        _final(loop, state)
    loop.times.finish()
    if writer is not None:
        writer.clear_cancel()
        writer.write_status(state, step=loop.step, phase=None, timings=loop.times.to_dict())
    return TrainResult(state, loop.step, writer.path if writer else None, loop.row)


def _final(loop: Loop, state: str) -> None:
    """`_stop`'s checkpoint and, for a finished run, its final evaluation."""
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
