"""Open-ended QA as a training task (`TrainConfig.task = "openqa"`): answer tokens.

The loop, run directory and methods are shared with `mcqa`; what differs is here:
- `lower` / `upper`: the closures a method's step calls (generative.objectives);
- `evaluate_now`: periodic greedy-only evaluation (acc, ECE of the greedy answer's
  sequence probability, mean token entropy, mean confidence), the same
  `eval/<set>/<metric>` keys as MCQA so the Monitor page needs no branch; S_V also
  with sampled answers, for the calibrated stop;
- `selection_candidate`: what the calibrated stop (training/selection.py) judges: the
  Brier score of S_V's semantic confidence against its gold answers, per item (a proper
  score: Semantic ECE, the paper's open-answer measure, is not one, and a flat
  forecast at the base rate scores 0 on it), with Semantic ECE as the tie-break, and
  the S_T token cross-entropy of theta alone (adapter on, no head) on the probe items;
- `final_evaluation`: base, the post-hoc calibrators for generation (ts), the trained
  model and its theta-only ablation, each
  generating greedy and sampled answers on every evaluation set, judged and grouped
  (generative.judge), written as eval/<variant>/<dataset>.parquet and results.json;
- `added_evaluation`: the same on more sets after training, with the run's saved
  temperature (`calm eval --run`, results/added.py).

Post-hoc TS for generation: one temperature over the vocabulary logits, fitted by
NLL of the gold answer tokens of S_V (its labels: the baseline is allowed them)
under the base model, then applied at every generation step.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch

from calm_core.calibration import metrics
from calm_core.data.schema import OpenItem
from calm_core.generative.evaluate import token_fit_data
from calm_core.generative.judge import judge, summarize_open
from calm_core.generative.objectives import (
    answer_logits,
    gold_requests,
    heldout_requests,
    mean_token_entropy,
    token_cross_entropy,
)
from calm_core.generative.sampling import GenerationConfig, generate_answers
from calm_core.generative.semantic import grouping_for
from calm_core.runs.layout import write_predictions
from calm_core.runs.records import ResultRow, RunResults
from calm_core.runs.selection_record import recorded_selection
from calm_core.scoring.adapters import evaluating
from calm_core.training.batches import lower_probe
from calm_core.training.context import StepContext, Variant, final_variants
from calm_core.training.selection import Candidate

NAME = "openqa"
ITEM_KIND = "open"
METHODS = ("calm", "scalar", "sft", "iterate")  # built on the lower / upper closures alone
SELECTS = True  # the calibrated stop judges S_V's semantic confidence (selection_candidate)
SELECTION_SCORE = "Brier score of the semantic confidence"  # per item, against S_V's gold answers
SELECTION_TIE_BREAK = "Semantic ECE"
DEFAULTS = {
    "train_data": "builtin/capitals_open/train",
    "heldout_data": "builtin/capitals_open/validation",
    "eval_data": ["builtin/capitals_open/test"],
}  # what `--task openqa` starts from (TrainConfig.from_dict)
PRESETS = {"quick": {"generation": {"n_samples": 5}}}  # minutes on a CPU: 1 greedy + 5 sampled answers per question
HELDOUT_CACHE = "openqa_heldout"  # ctx.state key: held-out item id -> (prompt ids, continuation ids)


def _pad_id(ctx: StepContext) -> int:
    return ctx.tokenizer.pad_token_id


def lower(ctx: StepContext, items: Sequence[OpenItem]) -> Callable[[], torch.Tensor]:
    """L_tr closure: token cross-entropy of the gold answers under the head."""
    requests = gold_requests(items, ctx.tokenizer, ctx.settings.generation.prompt)
    return lambda: token_cross_entropy(*answer_logits(ctx.net, requests, _pad_id(ctx), ctx.head))


def upper(ctx: StepContext, items: Sequence[OpenItem]) -> Callable[[], torch.Tensor]:
    """F closure: minus the mean token entropy over the base model's held-out continuations."""
    cache = ctx.state.setdefault(HELDOUT_CACHE, {})
    requests = heldout_requests(ctx.model, ctx.tokenizer, items, ctx.settings.generation, cache)
    return lambda: -mean_token_entropy(answer_logits(ctx.net, requests, _pad_id(ctx), ctx.head)[0])


def _answers(ctx: StepContext, items: Sequence[OpenItem], cfg: GenerationConfig, transform: Any, adapter: bool) -> list:
    with evaluating(ctx.model, adapter):
        return generate_answers(ctx.model, ctx.tokenizer, items, cfg, transform=transform)


def check_items(ctx: StepContext, data: Any) -> dict[str, int]:
    """Nothing to check before step 1: prompts are short and answers are generated."""
    return {}


def evaluation_cost(cfg: Any) -> float:
    """An evaluation item's cost in multiple-choice items, for the time estimate before
    the first open-answer run on a model: a greedy answer and n sampled ones, each at
    least a prompt's forward pass. A floor, not a measurement: the first run's record
    (status.json `timings`) replaces it."""
    return 1.0 + cfg.generation.n_samples


def prefill(ctx: StepContext, data: Any, start_step: int, writer: Any, show: bool) -> None:
    """No frozen-prefix prefill: held-out continuations are generated as the run goes."""
    return None


def evaluate_now(
    ctx: StepContext, data: Any, batch_size: int, caches: dict | None = None, heldout_only: bool = False
) -> dict[str, float]:
    """Greedy answers of the model being trained on S_V and every evaluation set (S_V
    alone with `heldout_only`). With `caches` (the loop's, for the calibrated stop), S_V
    also gets the run's sampled answers, judged into `caches["heldout"]["frame"]` and
    `eval/heldout/sem_ece`: the semantic confidence `selection_candidate` scores."""
    greedy = dataclasses.replace(ctx.settings.generation, n_samples=0, batch_size=batch_size)
    record: dict[str, float] = {}
    for name, items in {"heldout": data.heldout, **({} if heldout_only else data.evals)}.items():
        if not items:
            continue
        sampled = caches is not None and name == "heldout" and ctx.settings.generation.n_samples > 1
        cfg = dataclasses.replace(greedy, n_samples=ctx.settings.generation.n_samples) if sampled else greedy
        grouping = grouping_for(cfg.grouping, cfg.grouping_threshold) if sampled else grouping_for("string")
        frame = judge(items, _answers(ctx, items, cfg, ctx.head, True), grouping)
        summary = summarize_open(frame)
        record[f"eval/{name}/acc"] = summary["acc"]
        record[f"eval/{name}/ece"] = summary["seq_ece_10"]
        record[f"eval/{name}/entropy"] = summary["entropy"]
        record[f"eval/{name}/confidence"] = summary["seq_confidence"]
        if caches is not None and name == "heldout":
            caches["heldout"] = {"frame": frame}
            if sampled:
                record["eval/heldout/sem_ece"] = summary["ece_10"]
    return record


def selection_candidate(ctx: StepContext, data: Any, step: int, record: dict, caches: dict) -> Candidate | None:
    """S_V's per-item Brier score of the semantic confidence (the modal cluster's share
    of the sampled answers, right when that answer matches a gold alias; the greedy
    answer's sequence probability when the run samples nothing), its Semantic ECE (10
    bins), greedy accuracy, and the S_T token cross-entropy of theta alone on the probe
    items. None without S_V."""
    frame = caches.get("heldout", {}).get("frame")
    if frame is None or not len(frame):
        return None
    confidence = frame["confidence"].clip(0.0, 1.0).to_numpy(dtype=float)
    correct = frame["correct"].to_numpy(dtype=float)
    losses = metrics.item_confidence_brier(confidence, correct)
    probe = lower_probe(ctx.settings, data.train)
    return Candidate(
        step=step,
        score=float(losses.mean()),
        ece=metrics.confidence_ece(confidence, correct, n_bins=10),
        acc=record["eval/heldout/acc"],
        n=len(losses),
        lower=_theta_cross_entropy(ctx, probe) if probe else None,
        losses=losses.tolist(),
    )


def _theta_cross_entropy(ctx: StepContext, items: Sequence[OpenItem]) -> float:
    """Token cross-entropy of the gold answers under theta alone (adapter on, no head):
    the lower level's training fit, which the calibrated stop requires to hold."""
    requests = gold_requests(items, ctx.tokenizer, ctx.settings.generation.prompt)
    total, count = 0.0, 0
    with evaluating(ctx.model, True), torch.no_grad():
        for start in range(0, len(requests), ctx.settings.eval_batch_size):
            logits, targets = answer_logits(
                ctx.net, requests[start : start + ctx.settings.eval_batch_size], _pad_id(ctx)
            )
            total += float(token_cross_entropy(logits, targets)) * len(targets)
            count += len(targets)
    return total / max(count, 1)


def final_evaluation(
    ctx: StepContext,
    data: Any,
    run: Any,
    reuse: dict | None = None,
    extra: dict[str, Any] | None = None,
    times: Any = None,
) -> list[dict[str, Any]]:
    """Every variant on every open-QA evaluation set -> Parquet per item + results.json
    (`times`: unused, there is no cross-fitting to time: the fits are counted in `final`)."""
    from calm_core.scoring.evaluate import baseline_records, fit_baselines

    settings = ctx.settings
    cfg = settings.generation
    fitted, notes = fit_baselines(
        len(data.heldout),
        lambda: token_fit_data(ctx.model, ctx.tokenizer, data.heldout, cfg.prompt, settings.eval_batch_size),
        NAME,
        settings.eval_baselines,
    )
    rows = _evaluate_sets(ctx, data.evals, fitted, run.path)
    records = baseline_records(fitted, notes, fit_on=settings.heldout_data, fit="gold answer tokens")
    run.write_results(
        RunResults(
            rows=tuple(ResultRow.from_json(row) for row in rows),
            selection=recorded_selection(extra),
            task="openqa",
            generation=cfg.to_dict(),
            calibrators=records,
        )
    )
    return rows


def added_evaluation(
    ctx: StepContext, evals: dict[str, list[OpenItem]], calibrators: dict[str, Any], root: Any
) -> list[dict[str, Any]]:
    """The final evaluation's variants on more open-QA sets, after training
    (results/added.py), with the run's model at its selected step and the calibrators
    it fitted on S_V, as saved. Predictions go under `root`; returns the rows."""
    return _evaluate_sets(ctx, evals, calibrators, root)


def _token_transform(ctx: StepContext, variant: Variant) -> Any:
    """What maps the next-token logits of a variant's answers: the run's head, the
    calibrator's token transform, or nothing."""
    if variant.use_head:
        return ctx.head
    return variant.calibrator.token_transform() if variant.calibrator is not None else None


def _evaluate_sets(ctx: StepContext, evals: dict[str, Any], fitted: dict[str, Any], root: Any) -> list[dict[str, Any]]:
    """One row per (set, variant), its judged answers at <root>/eval/<variant>/<set>.parquet."""
    settings, cfg = ctx.settings, ctx.settings.generation
    grouping = grouping_for(cfg.grouping, cfg.grouping_threshold)
    variants = final_variants(settings.method, ctx.head is not None, fitted, settings.eval_baselines)
    transforms = {v.name: _token_transform(ctx, v) for v in variants}
    rows = []
    for name, items in evals.items():
        for variant in variants:
            frame = judge(items, _answers(ctx, items, cfg, transforms[variant.name], variant.use_adapter), grouping)
            rows.append({"dataset": name, "variant": variant.name, "task": "openqa", **summarize_open(frame)})
            write_predictions(root, variant.name, name, frame)
    return rows
