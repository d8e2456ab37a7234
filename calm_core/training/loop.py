"""The one training loop every method shares, writing the run directory as it goes.

    result = train(TrainConfig.preset("quick"), run=RunDir.new(cfg.to_dict()))

Per step: a deterministic training batch (and S_V batch), the method's step, a metrics
record (`train/*`, `bome/*`, `alpha/*`), a heartbeat; every `eval_every` steps the
accuracy, ECE and entropy on S_V and each evaluation set (`eval/<dataset>/<metric>`);
every `checkpoint_every` steps a checkpoint (adapter, head, optimizer, RNG). A cancel
file stops the loop after the current step with a checkpoint and state `cancelled`.
Resuming loads the newest checkpoint that reads whole (a damaged one is skipped, and
said) and continues the same curves. `faults.fault_point` marks where tests kill the job.
"""

from __future__ import annotations

import dataclasses
import random
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from calm_core.training import distributed

from calm_core.calibration import metrics
from calm_core.training.adapters import attach_lora, evaluating, lora_parameters, quantization_choice
from calm_core.training.bilevel import BOME_LOG_KEYS
from calm_core.data.schema import DataError, MCItem
from calm_core.scoring.evaluate import load_report
from calm_core.faults import fault_point
from calm_core.calibration.head import CalibrationHead
from calm_core.training.methods import get_method
from calm_core.training.methods.base import StepContext
from calm_core.scoring.prompts import ScoringConfig
from calm_core.runs.rundir import RunDir
from calm_core.training.config import TrainConfig

OPTIMIZER_FILE = "optimizer.pt"
PHASE_EVERY_S = 5.0  # seconds between progress writes to status.json during the cache fill
RNG_FILE = "rng.pt"
INNER_FILE = "inner_iterate.safetensors"  # a persistent BOME theta~ (bilevel.BilevelState), when there is one


@dataclass
class TrainResult:
    state: str  # finished | cancelled
    step: int
    run_dir: Path | None
    last_metrics: dict[str, Any] = field(default_factory=dict)
    prefill: dict[str, Any] | None = None  # the frozen-prefix fill before the first step (prefill_frozen_layers)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def batch_indices(n: int, batch_size: int, step: int, seed: int) -> list[int]:
    """Items of step `step`: consecutive slices of a per-epoch permutation, so the batch
    sequence depends only on (seed, step) and a resumed run sees the same batches."""
    per_epoch = max(1, n // batch_size)
    epoch, offset = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return order[offset * batch_size: offset * batch_size + batch_size].tolist()


@dataclass
class Data:
    train: list[Any]  # MCItem (task mcqa) or OpenItem (task openqa)
    heldout: list[Any]
    evals: dict[str, list[Any]]
    dropped: dict[str, int] = field(default_factory=dict)  # set -> items removed as training questions
    rejected: dict[str, dict[str, Any]] = field(default_factory=dict)  # set -> rows its loader rejected (first 20)


def question_key(question: str) -> str:
    """Questions that differ only in case, punctuation, articles or spacing are the same."""
    from calm_core.generative.answers import normalize_answer

    return normalize_answer(question)


def without_training_questions(items: list[Any], train_keys: set[str]) -> list[Any]:
    """`items` minus those whose question is a training question (TriviaQA's two splits
    share 268): a held-out or evaluation number must not be measured on training data."""
    return [it for it in items if question_key(it.question) not in train_keys]


def load_data(cfg: TrainConfig) -> Data:
    """S_T, S_V and the evaluation sets; S_V and evaluation items that repeat a training
    question are dropped before `limit` counts, and how many is recorded."""
    kind = "open" if cfg.task == "openqa" else "mc"
    rejected: dict[str, dict[str, Any]] = {}

    def load(name: str, limit: int | None) -> list[Any]:
        """The set's items; its rejected rows are said on stderr (stdout.log for a job)
        and kept for status.json, never dropped without a word."""
        report = load_report(name, kind, limit, cfg.seed)
        if report.n_rejected:
            rejected[name] = report.rejected_record(20)
            head, *reasons = report.rejection_lines()
            print(f"calm: note: {head}:", *(f"  {line}" for line in reasons), sep="\n", file=sys.stderr, flush=True)
        return list(report.items)

    train_items = load(cfg.train_data, cfg.train_limit)
    keys = {question_key(it.question) for it in train_items}
    dropped: dict[str, int] = {}

    def load_clean(name: str, limit: int | None) -> list[Any]:
        items = load(name, None)
        kept = without_training_questions(items, keys)
        if len(kept) < len(items):
            dropped[name] = len(items) - len(kept)
        return kept[:limit]

    evals = {name: load_clean(name, cfg.eval_limit) for name in cfg.eval_data}
    heldout = load_clean(cfg.heldout_data, cfg.heldout_limit)
    if not train_items or not heldout:
        which = "training set" if not train_items else "held-out set S_V (after removing training questions)"
        raise DataError(f"Expected items in the {which}, but it is empty: choose another set or slice")
    return Data(train_items, heldout, evals, dropped, rejected)


def build_context(cfg: TrainConfig, lm: Any, k_max: int) -> tuple[StepContext, dict[str, Any]]:
    """LoRA-wrapped model, head and optimizer; returns the context and a record of choices."""
    use_4bit, why = quantization_choice(cfg.load_in_4bit, lm.device)
    model, lora_record = attach_lora(lm.model, cfg.lora, quantized=use_4bit and lm.spec.load_in_4bit)
    model.train()
    method = get_method(cfg.method)
    head = None
    if method.USES_HEAD:
        scope = cfg.effective_scope
        size = {"vocab": model.config.vocab_size, "options": k_max, "scalar": None}[scope]
        head = CalibrationHead(scope, size=size).to(lm.device)
    theta = lora_parameters(model)
    alpha = list(head.parameters()) if head is not None else []
    optimizer = make_optimizer(cfg, theta, alpha)
    scoring = ScoringConfig(rule=cfg.scoring, chat_template=cfg.chat_template)
    runner, prefix_record = _frozen_prefix_runner(cfg, model)
    ctx = StepContext(model, lm.tokenizer, scoring, optimizer, theta, alpha, head, cfg, runner=runner)
    record = {"quantization": {"four_bit": use_4bit and lm.spec.load_in_4bit, "reason": why}, "lora": lora_record,
              "frozen_prefix": prefix_record}
    return ctx, record


def make_optimizer(cfg: TrainConfig, theta: list[torch.nn.Parameter],
                   alpha: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
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
    """A FrozenPrefixModel when it applies, and a record of why or why not (config.json)."""
    from calm_core.scoring.frozen_prefix import FrozenPrefixModel, frozen_prefix_split

    if not cfg.frozen_prefix:
        return None, {"used": False, "reason": "off (frozen_prefix = false)"}
    split = frozen_prefix_split(model, cfg.lora.layers)
    if split is None:
        why = "LoRA adapts every layer" if cfg.lora.layers is None else "model is not Llama-shaped or k >= layers"
        return None, {"used": False, "reason": why}
    from calm_core.paths import cache_dir

    store = cache_dir() / "frozen_prefix" if cfg.frozen_prefix_store else None
    runner = FrozenPrefixModel(model, split, store_root=store)
    return runner, {"used": True, "split_layer": split, "store": str(runner.store.path) if runner.store else None,
                    "reason": f"LoRA on the top {cfg.lora.layers} layers only"}


def evaluate_now(ctx: StepContext, data: Data, batch_size: int,
                 caches: dict[str, dict[tuple[bool, bool], Any]] | None = None) -> dict[str, float]:
    """`eval/<set>/{acc,ece,entropy,confidence,auroc,aurc}` on S_V and every evaluation set. With
    `caches` (set name -> `_scores_for` cache), the scores stay there for a final
    evaluation at the same parameters, which then does not compute them again."""
    if ctx.task == "openqa":
        from calm_core.generative import task

        return task.evaluate_now(ctx, data, batch_size)
    record: dict[str, float] = {}
    for name, items in {"heldout": data.heldout, **data.evals}.items():
        if not items:
            continue
        cache = caches.setdefault(name, {}) if caches is not None else {}
        probs = metrics.softmax(_scores_for(ctx, items, batch_size, True, True, cache).logits)
        gold = np.array([it.answer for it in items])
        summary = metrics.summarize(probs, gold)
        for key in ("acc", "ece", "entropy", "confidence", "auroc", "aurc"):
            record[f"eval/{name}/{key}"] = summary[key]
    return record


def alpha_record(ctx: StepContext) -> dict[str, Any]:
    """`alpha/*` summary statistics and, for the options scope, the vectors themselves."""
    if ctx.head is None:
        return {}
    record: dict[str, Any] = {f"alpha/{k}": v for k, v in ctx.head.summary().items()}
    if ctx.head.scope in ("options", "scalar"):
        record["alpha/tau"] = ctx.head.tau.detach().cpu().tolist()
        if ctx.head.shift is not None:
            record["alpha/l"] = ctx.head.shift.detach().cpu().tolist()
    return record


def save_checkpoint(ctx: StepContext, run: RunDir, step: int) -> Path:
    """Adapter, head, optimizer, persistent theta~ and RNG of `step`, written as a whole
    (`RunDir.writing_checkpoint`: a kill leaves the previous checkpoint, never half of this one)."""
    with run.writing_checkpoint(step) as directory:
        ctx.model.save_pretrained(directory)  # PEFT: adapter weights + adapter_config.json
        fault_point("checkpoint_files")
        if ctx.head is not None:
            ctx.head.save(directory)
        torch.save(ctx.optimizer.state_dict(), directory / OPTIMIZER_FILE)
        inner = ctx.state.get("bilevel")
        if inner is not None and inner.tilde is not None:
            from safetensors.torch import save_file

            save_file(inner.tensors(), str(directory / INNER_FILE))
        # Batches depend only on (seed, step); torch's RNG drives dropout, so it is all we keep.
        torch.save({"torch": torch.get_rng_state()}, directory / RNG_FILE)
    fault_point("checkpoint_done")
    run.prune_checkpoints(keep=2)
    return run.checkpoint_dir(step)


@dataclass(frozen=True)
class Checkpoint:
    """Everything a checkpoint holds, read into memory: a damaged file fails here, before
    the trainer or the run directory is touched (`RunDir.prepare_resume`)."""

    adapter: dict[str, torch.Tensor]
    head: CalibrationHead | None
    optimizer: dict[str, Any]
    inner: dict[str, torch.Tensor] | None
    rng: torch.Tensor


def read_checkpoint(directory: Path, with_head: bool) -> Checkpoint:
    """Read our own checkpoint (safetensors, weights_only torch loads); raises with the
    file's name when one is missing or unreadable."""
    from safetensors.torch import load_file

    def read(name: str, load: Callable[[Path], Any]) -> Any:
        path = directory / name
        if not path.is_file():
            raise FileNotFoundError(f"{name} is missing")
        try:
            return load(path)
        except Exception as error:  # noqa: BLE001 - safetensors, pickle and zip errors alike
            raise ValueError(f"{name} is unreadable ({str(error).splitlines()[0][:120] if str(error) else type(error).__name__})") from error

    from calm_core.calibration.head import HEAD_FILENAME

    rng = read(RNG_FILE, lambda p: torch.load(p, weights_only=True))
    if not isinstance(rng, dict) or not isinstance(rng.get("torch"), torch.Tensor):
        raise ValueError(f"{RNG_FILE} does not hold a torch RNG state")
    optimizer = read(OPTIMIZER_FILE, lambda p: torch.load(p, weights_only=True))
    if not isinstance(optimizer, dict) or "state" not in optimizer:
        raise ValueError(f"{OPTIMIZER_FILE} does not hold an optimizer state")
    return Checkpoint(
        adapter=read("adapter_model.safetensors", lambda p: load_file(str(p))),
        head=read(HEAD_FILENAME, CalibrationHead.load) if with_head else None,
        optimizer=optimizer,
        inner=read(INNER_FILE, lambda p: load_file(str(p))) if (directory / INNER_FILE).exists() else None,
        rng=rng["torch"])


def apply_checkpoint(ctx: StepContext, checkpoint: Checkpoint) -> None:
    """Put a read checkpoint's state into the model, head, optimizer and RNG."""
    from peft import set_peft_model_state_dict

    set_peft_model_state_dict(ctx.model, checkpoint.adapter)
    if ctx.head is not None and checkpoint.head is not None:
        ctx.head.load_state_dict(checkpoint.head.state_dict())
    ctx.optimizer.load_state_dict(checkpoint.optimizer)
    if checkpoint.inner is not None:
        from calm_core.training.bilevel import BilevelState

        ctx.state.setdefault("bilevel", BilevelState()).load(checkpoint.inner)
    torch.set_rng_state(checkpoint.rng)


def resume_point(ctx: StepContext, run: RunDir, writer: RunDir | None) -> tuple[int, float]:
    """(step to continue after, elapsed seconds before it) for a (re)starting run, its
    checkpoint applied. Rank 0 chooses the newest checkpoint it can read whole (a damaged
    one is skipped and named in status.json and stdout; `fresh_start` in the status, set
    by `calm resume --fresh`, ignores every checkpoint); the other ranks follow its choice."""
    def read(directory: Path) -> Checkpoint:
        return read_checkpoint(directory, with_head=ctx.head is not None)

    point = None
    if writer is not None:
        fresh = bool(run.status.get("fresh_start"))
        point = run.prepare_resume(read, fresh=fresh)
        if point.skipped or point.path is not None or fresh:
            note = f"resuming after step {point.step} from {point.path.name if point.path else 'the start'}"
            if point.skipped:
                note += " (skipped as damaged: " + "; ".join(point.skipped) + ")"
            print(f"calm: {note}", flush=True)
        run.update_status(resumed_from=point.path.name if point.path else None,
                          skipped_checkpoints=list(point.skipped), fresh_start=False)
    step = int(distributed.broadcast_text(str(point.step) if point is not None else None) or 0)
    if step == 0:
        return 0, 0.0
    checkpoint = point.data if point is not None else read(run.checkpoint_dir(step))
    apply_checkpoint(ctx, checkpoint)
    previous = run.read_metrics()
    return step, previous[-1]["elapsed"] if previous else 0.0


def _step_record(step: int, elapsed: float, log: dict[str, float]) -> dict[str, Any]:
    bome_keys = set(BOME_LOG_KEYS)
    record: dict[str, Any] = {"step": step, "elapsed": elapsed}
    for key, value in log.items():
        section = "bome" if key in bome_keys else "train"
        record[f"{section}/{key}"] = value
    return record


def train(cfg: TrainConfig, run: RunDir | None = None, lm: Any = None,
          progress: Callable[[int, int, dict[str, Any]], None] | None = None) -> TrainResult:
    """Run (or resume) training; the run directory, if given, receives everything.

    Under torchrun (WORLD_SIZE > 1) every rank calls this with the same run: each trains
    on its shard of every batch with gradients averaged (calm_core.training.distributed), and
    only rank 0 writes the run directory and evaluates.
    """
    from calm_core.scoring.models import ModelSpec, load_model

    seed_everything(cfg.seed)
    data = load_data(cfg)
    if lm is None:
        use_4bit, _ = quantization_choice(cfg.load_in_4bit, torch.device("cuda" if torch.cuda.is_available() else "cpu"))
        with run.keepalive("loading the model") if run is not None and distributed.is_main() else nullcontext():
            lm = load_model(ModelSpec(name=cfg.model, device=cfg.device, load_in_4bit=use_4bit))
    distributed.init_from_env(lm.device)
    every_item = data.train + data.heldout + [i for v in data.evals.values() for i in v]
    k_max = max(getattr(it, "n_choices", 1) for it in every_item)
    ctx, record = build_context(cfg, lm, k_max)
    method = get_method(cfg.method)
    start_step, elapsed_before = 0, 0.0
    writer = run if distributed.is_main() else None  # rank 0 alone writes
    fault_point("model_loaded")
    cut = items_cut_to_context(ctx, data) if ctx.task == "mcqa" else {}
    if run is not None:
        if writer is not None:
            run.update_status(choices={**record, "world_size": distributed.world_size(),
                                       "dropped_training_questions": data.dropped, "rejected_rows": data.rejected},
                              model=lm.info,
                              items_cut_to_context=cut)
        start_step, elapsed_before = resume_point(ctx, run, writer)
        if writer is not None:
            run.write_status("running", step=start_step, total_steps=cfg.steps)
    prefilled = None
    if ctx.runner is not None and ctx.task == "mcqa":
        prefilled = prefill_frozen_layers(ctx, data, cfg, start_step, writer, show=progress is not None)
        if writer is not None:
            writer.update_status(prefill=prefilled)
    result = _loop(cfg, ctx, method, data, writer, start_step, elapsed_before, progress)
    return dataclasses.replace(result, prefill=prefilled)


def items_cut_to_context(ctx: StepContext, data: Data) -> dict[str, int]:
    """{set: items cut from the left to fit the model's context} for every set of the run,
    checked before the first step (tokenizing only): an item that cannot fit at all fails
    here (DataError) rather than at the step that draws it, and a cut is said once per set."""
    from calm_core.scoring.options import context_limit, truncated_item_ids, warn_truncated

    limit = context_limit(ctx.net, ctx.tokenizer)
    counts: dict[str, int] = {}
    for name, items in {"train": data.train, "heldout": data.heldout, **data.evals}.items():
        cut = truncated_item_ids(items, ctx.scoring, ctx.tokenizer, limit)
        warn_truncated(cut, len(items), limit, name)
        if cut:
            counts[name] = len(cut)
    return counts


class _FillStopped(Exception):
    """A cancel asked for during the cache fill: stop filling (every batch so far is kept)."""


def scheduled_items(cfg: TrainConfig, data: Data, start_step: int) -> list[Any]:
    """Every item whose frozen layers the rest of the run reads on this rank: its share of
    the training items that steps start_step.. will draw (batch_indices is deterministic),
    all of S_V (periodic evaluation and TS read it whole; the upper level draws from it)
    and, on the rank that evaluates, the evaluation sets."""
    drawn = {i for step in range(start_step, cfg.steps)
             for i in distributed.shard(batch_indices(len(data.train), cfg.batch_size, step, cfg.seed))}
    evals = [it for items in data.evals.values() for it in items] if distributed.is_main() else []
    return [data.train[i] for i in sorted(drawn)] + list(data.heldout) + evals


def prefill_frozen_layers(ctx: StepContext, data: Data, cfg: TrainConfig, start_step: int,
                          writer: RunDir | None, show: bool) -> dict[str, Any]:
    """Fill the frozen-prefix cache before the first step (FrozenPrefixModel.prefill says
    why it is cheaper than filling batch by batch); progress goes to the run's status
    phase and, in the foreground, a progress bar. Returns a record for status.json."""
    from calm_core.training.objectives import forward_sequences
    from calm_core.scoring.options import context_limit, progress_callback

    per_item = forward_sequences(ctx.tokenizer, scheduled_items(cfg, data, start_step), ctx.scoring,
                                 max_length=context_limit(ctx.net, ctx.tokenizer))  # cut as the steps cut them
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


def _loop(cfg: TrainConfig, ctx: StepContext, method: Any, data: Data, writer: RunDir | None, start_step: int,
          elapsed_before: float, progress: Callable[[int, int, dict[str, Any]], None] | None) -> TrainResult:
    started = time.perf_counter()
    record: dict[str, Any] = {}
    final_scores: dict[str, dict[tuple[bool, bool], Any]] = {}  # the last step's evaluation, reused at the end
    step = start_step
    while step < cfg.steps:  # `writer`: the run directory on rank 0, None on other ranks
        if _cancel_requested(writer):
            return _stop(ctx, writer, step, "cancelled", record)
        train_items = [data.train[i] for i in batch_indices(len(data.train), cfg.batch_size, step, cfg.seed)]
        heldout_items = [data.heldout[i] for i in batch_indices(len(data.heldout), cfg.heldout_batch_size, step, cfg.seed + 1)]
        log = distributed.mean_log(method.step(ctx, distributed.shard(train_items), distributed.shard(heldout_items)))
        step += 1
        record = _step_record(step, elapsed_before + time.perf_counter() - started, log)
        record.update(alpha_record(ctx))
        if distributed.is_main() and ((cfg.eval_every and step % cfg.eval_every == 0) or step == cfg.steps):
            with writer.keepalive("evaluating") if writer is not None else nullcontext():
                record.update(evaluate_now(ctx, data, cfg.eval_batch_size, final_scores if step == cfg.steps else None))
        if writer is not None:
            writer.append_metrics(record)
            fault_point("step_logged")
            writer.heartbeat(step, cfg.steps)
            if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and step < cfg.steps:
                save_checkpoint(ctx, writer, step)
        if progress is not None and distributed.is_main():
            progress(step, cfg.steps, record)
    return _stop(ctx, writer, step, "finished", record, data, final_scores)


def _cancel_requested(writer: RunDir | None) -> bool:
    """Rank 0 reads the cancel file; every rank learns its answer (they stop together)."""
    asked = writer is not None and writer.cancel_requested()
    return distributed.mean_value(1.0 if asked else 0.0) > 0.0


def _stop(ctx: StepContext, run: RunDir | None, step: int, state: str, record: dict[str, Any],
          data: Data | None = None, final_scores: dict[str, Any] | None = None) -> TrainResult:
    if run is not None:
        if step > 0:
            save_checkpoint(ctx, run, step)
        if state == "finished" and data is not None:
            with run.keepalive("final evaluation"):  # minutes without a step: keep the heartbeat
                if ctx.task == "openqa":
                    from calm_core.generative import task

                    task.final_evaluation(ctx, data, run)
                else:
                    final_evaluation(ctx, data, run, final_scores)
            fault_point("results_written")
        run.clear_cancel()
        run.write_status(state, step=step, phase=None)
    return TrainResult(state, step, run.path if run else None, record)


def _variant_scores(ctx: StepContext, items: list[MCItem], batch_size: int, use_head: bool,
                    use_adapter: bool) -> Any:
    """Option scores of the model being trained (adapter on or off, head or none) through
    the same prefix-shared, batched scorer as `calm eval`; no gradients."""
    from types import SimpleNamespace

    from calm_core.scoring.options import score_items

    lm = SimpleNamespace(model=ctx.net, tokenizer=ctx.tokenizer, device=next(ctx.model.parameters()).device, info={})
    with evaluating(ctx.model, use_adapter):
        return score_items(lm, items, ctx.scoring, batch_size=batch_size, progress=False,
                           head=ctx.head if use_head else None)


def _scores_for(ctx: StepContext, items: list[MCItem], bs: int, use_head: bool, use_adapter: bool,
                cache: dict[tuple[bool, bool], Any]) -> Any:
    """Scores of one variant, computing each (head, adapter) combination once; an options
    or scalar head is applied to the adapter's scores rather than scored again."""
    from calm_core.scoring.options import apply_option_head

    key = (use_head and ctx.head is not None, use_adapter)
    if key not in cache:
        if key[0] and ctx.head.scope != "vocab":
            raw = _scores_for(ctx, items, bs, False, use_adapter, cache)
            cache[key] = dataclasses.replace(raw, logits=apply_option_head(raw.logits, ctx.head))
        else:
            cache[key] = _variant_scores(ctx, items, bs, *key)
    return cache[key]


def final_evaluation(ctx: StepContext, data: Data, run: RunDir,
                     reuse: dict[str, dict[tuple[bool, bool], Any]] | None = None) -> list[dict[str, Any]]:
    """Every variant on every evaluation set -> eval/<variant>/<dataset>.parquet + results.json.

    Variants: `base` (adapter off, no head), `ts` (base + temperature fitted on S_V with
    its labels), `<method>` (the trained model: theta and alpha), and for methods with
    a head `<method>_theta_only` (theta alone), the design's ablation of the head.
    `reuse`: what the last step's evaluation computed at these same parameters.
    """
    from calm_core.scoring.evaluate import predictions_frame, result_row
    from calm_core.calibration.posthoc import MIN_FIT_ITEMS, TemperatureScaler
    from calm_core.io import atomic_write_json
    from calm_core.runs.rundir import write_predictions

    method = ctx.settings.method
    bs = ctx.settings.eval_batch_size
    ts, ts_note = None, None
    if not ctx.settings.eval_baselines:
        ts_note = "no `base` / `ts` variants: eval_baselines = false"
    elif len(data.heldout) >= MIN_FIT_ITEMS:
        heldout = _variant_scores(ctx, data.heldout, bs, use_head=False, use_adapter=False)
        ts = TemperatureScaler.fit(heldout.logits, heldout.gold)
    else:  # too few S_V labels for a meaningful temperature: say so rather than fake one
        ts_note = f"no `ts` variant: S_V has {len(data.heldout)} items, fewer than {MIN_FIT_ITEMS}"
    variants = [("base", False, False, None)] if ctx.settings.eval_baselines else []
    variants += [("ts", False, False, ts)] if ts else []
    variants.append((method, True, True, None))
    if ctx.head is not None:
        variants.append((f"{method}_theta_only", False, True, None))
    rows = []
    for name, items in data.evals.items():
        cache: dict[tuple[bool, bool], Any] = (reuse or {}).get(name, {})
        for variant, use_head, use_adapter, calibrator in variants:
            scores = _scores_for(ctx, items, bs, use_head, use_adapter, cache)
            rows.append(result_row(scores, name, variant, calibrator))
            write_predictions(run.path, variant, name, predictions_frame(scores, calibrator))
            fault_point("eval_written")
    ts_record = {"temperature": ts.temperature, "fit_on": ctx.settings.heldout_data} if ts else {"note": ts_note}
    atomic_write_json(run.path / "results.json", {"results": rows, "ts": ts_record})
    return rows
