"""Open-ended QA as a training task (`TrainConfig.task = "openqa"`): answer tokens.

The loop, run directory and methods are shared with `mcqa`; what differs is here:
- `lower` / `upper`: the closures a method's step calls (generative.objectives);
- `evaluate_now`: periodic greedy-only evaluation (acc, ECE of the greedy answer's
  sequence probability, mean token entropy, mean confidence), the same
  `eval/<set>/<metric>` keys as MCQA so the Monitor page needs no branch;
- `final_evaluation`: base, the post-hoc calibrators for generation (ts), the trained
  model and its theta-only ablation, each
  generating greedy and sampled answers on every evaluation set, judged and grouped
  (generative.judge), written as eval/<variant>/<dataset>.parquet and results.json.

Post-hoc TS for generation: one temperature over the vocabulary logits, fitted by
NLL of the gold answer tokens of S_V (its labels: the baseline is allowed them)
under the base model, then applied at every generation step.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from calm_core.scoring.adapters import evaluating
from calm_core.data.schema import OpenItem
from calm_core.generative.evaluate import token_fit_data
from calm_core.generative.judge import judge, summarize_open
from calm_core.generative.objectives import (
    answer_logits, gold_requests, heldout_requests, mean_token_entropy, token_cross_entropy,
)
from calm_core.generative.sampling import GenerationConfig, generate_answers
from calm_core.generative.semantic import grouping_for
from calm_core.training.context import StepContext

NAME = "openqa"
ITEM_KIND = "open"
METHODS = ("calm", "scalar", "sft", "iterate")  # built on the lower / upper closures alone
SELECTS = False  # no calibrated stop yet: Semantic ECE on S_V's gold answers is the score to build it on
DEFAULTS = {"train_data": "builtin/capitals_open/train", "heldout_data": "builtin/capitals_open/validation",
            "eval_data": ["builtin/capitals_open/test"]}  # what `--task openqa` starts from (TrainConfig.from_dict)
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


def prefill(ctx: StepContext, data: Any, start_step: int, writer: Any, show: bool) -> None:
    """No frozen-prefix prefill: held-out continuations are generated as the run goes."""
    return None


def evaluate_now(ctx: StepContext, data: Any, batch_size: int, caches: dict | None = None,
                 heldout_only: bool = False) -> dict[str, float]:
    """Greedy answers of the model being trained on S_V and every evaluation set (S_V
    alone with `heldout_only`; `caches` is MCQA's reuse of scores: generation has
    nothing to reuse)."""
    import dataclasses

    cfg = dataclasses.replace(ctx.settings.generation, n_samples=0, batch_size=batch_size)
    record: dict[str, float] = {}
    for name, items in {"heldout": data.heldout, **({} if heldout_only else data.evals)}.items():
        if not items:
            continue
        summary = summarize_open(judge(items, _answers(ctx, items, cfg, ctx.head, True), grouping_for("string")))
        record[f"eval/{name}/acc"] = summary["acc"]
        record[f"eval/{name}/ece"] = summary["seq_ece_10"]
        record[f"eval/{name}/entropy"] = summary["entropy"]
        record[f"eval/{name}/confidence"] = summary["seq_confidence"]
    return record


def variants(method: str, has_head: bool, calibrators: Sequence[str],
             baselines: bool = True) -> list[tuple[str, bool, Any]]:
    """(name, adapter on, logits transform key) of every variant the final evaluation runs;
    `calibrators`: the names of the fitted post-hoc calibrators, each its own key."""
    out: list[tuple[str, bool, Any]] = [("base", False, None)] if baselines else []
    out += [(name, False, name) for name in calibrators]
    out.append((method, True, "head" if has_head else None))
    if has_head:
        out.append((f"{method}_theta_only", True, None))
    return out


def selection_candidate(ctx: StepContext, data: Any, step: int, record: dict, caches: dict) -> None:
    """Open answers have no calibrated stop yet (SELECTS = False): the run hands back its last step."""
    return None


def final_evaluation(ctx: StepContext, data: Any, run: Any, reuse: dict | None = None,
                     extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every variant on every open-QA evaluation set -> Parquet per item + results.json."""
    from calm_core.io import atomic_write_json
    from calm_core.runs.rundir import write_predictions
    from calm_core.scoring.evaluate import baseline_records, fit_baselines

    settings = ctx.settings
    cfg = settings.generation
    grouping = grouping_for(cfg.grouping, cfg.grouping_threshold)
    fitted, notes = fit_baselines(
        len(data.heldout), lambda: token_fit_data(ctx.model, ctx.tokenizer, data.heldout, cfg.prompt,
                                                  settings.eval_batch_size), NAME, settings.eval_baselines)
    transforms = {None: None, "head": ctx.head, **{name: c.token_transform() for name, c in fitted.items()}}
    rows = []
    for name, items in data.evals.items():
        for variant, adapter, key in variants(settings.method, ctx.head is not None, list(fitted), settings.eval_baselines):
            frame = judge(items, _answers(ctx, items, cfg, transforms[key], adapter), grouping)
            rows.append({"dataset": name, "variant": variant, "task": "openqa", **summarize_open(frame)})
            write_predictions(run.path, variant, name, frame)
    records = baseline_records(fitted, notes, fit_on=settings.heldout_data, fit="gold answer tokens")
    atomic_write_json(run.path / "results.json", {"results": rows, **records, "task": "openqa",
                                                  "generation": cfg.to_dict(), **(extra or {})})
    return rows
