"""Open-ended QA as a training task (`TrainConfig.task = "openqa"`): the trainer's hooks.

The trainer, run directory and methods are MCQA's; what differs is here:
- `lower` / `upper`: the closures a method's step calls (generative.objectives);
- `evaluate_now`: periodic greedy-only evaluation (acc, ECE of the greedy answer's
  sequence probability, mean token entropy, mean confidence), the same
  `eval/<set>/<metric>` keys as MCQA so the Monitor page needs no branch;
- `final_evaluation`: base, ts, the trained model and its theta-only ablation, each
  generating greedy and sampled answers on every evaluation set, judged and grouped
  (generative.judge), written as eval/<variant>/<dataset>.parquet and results.json.

Post-hoc TS for generation: one temperature over the vocabulary logits, fitted by
NLL of the gold answer tokens of S_V (its labels: the baseline is allowed them)
under the base model, then applied at every generation step.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from calm_core.training.adapters import evaluating
from calm_core.data.schema import OpenItem
from calm_core.generative.evaluate import fit_token_temperature
from calm_core.generative.judge import judge, summarize_open
from calm_core.generative.objectives import (
    answer_logits, gold_requests, heldout_requests, mean_token_entropy, token_cross_entropy,
)
from calm_core.generative.sampling import GenerationConfig, generate_answers, temperature_transform
from calm_core.generative.semantic import grouping_for

HELDOUT_CACHE = "openqa_heldout"  # ctx.state key: held-out item id -> (prompt ids, continuation ids)


def _pad_id(ctx: Any) -> int:
    return ctx.tokenizer.pad_token_id


def lower(ctx: Any, items: Sequence[OpenItem]) -> Callable[[], torch.Tensor]:
    """L_tr closure: token cross-entropy of the gold answers under the head."""
    requests = gold_requests(items, ctx.tokenizer, ctx.settings.generation.prompt)
    return lambda: token_cross_entropy(*answer_logits(ctx.net, requests, _pad_id(ctx), ctx.head))


def upper(ctx: Any, items: Sequence[OpenItem]) -> Callable[[], torch.Tensor]:
    """F closure: minus the mean token entropy over the base model's held-out continuations."""
    cache = ctx.state.setdefault(HELDOUT_CACHE, {})
    requests = heldout_requests(ctx.model, ctx.tokenizer, items, ctx.settings.generation, cache)
    return lambda: -mean_token_entropy(answer_logits(ctx.net, requests, _pad_id(ctx), ctx.head)[0])


def _answers(ctx: Any, items: Sequence[OpenItem], cfg: GenerationConfig, transform: Any, adapter: bool) -> list:
    with evaluating(ctx.model, adapter):
        return generate_answers(ctx.model, ctx.tokenizer, items, cfg, transform=transform)


def evaluate_now(ctx: Any, data: Any, batch_size: int) -> dict[str, float]:
    """Greedy answers of the model being trained on S_V and every evaluation set."""
    import dataclasses

    cfg = dataclasses.replace(ctx.settings.generation, n_samples=0, batch_size=batch_size)
    record: dict[str, float] = {}
    for name, items in {"heldout": data.heldout, **data.evals}.items():
        if not items:
            continue
        summary = summarize_open(judge(items, _answers(ctx, items, cfg, ctx.head, True), grouping_for("string")))
        record[f"eval/{name}/acc"] = summary["acc"]
        record[f"eval/{name}/ece"] = summary["seq_ece_10"]
        record[f"eval/{name}/entropy"] = summary["entropy"]
        record[f"eval/{name}/confidence"] = summary["seq_confidence"]
    return record


def variants(method: str, has_head: bool, ts: Any, baselines: bool = True) -> list[tuple[str, bool, Any]]:
    """(name, adapter on, logits transform key) of every variant the final evaluation runs."""
    out: list[tuple[str, bool, Any]] = [("base", False, None)] if baselines else []
    if ts is not None:
        out.append(("ts", False, "ts"))
    out.append((method, True, "head" if has_head else None))
    if has_head:
        out.append((f"{method}_theta_only", True, None))
    return out


def final_evaluation(ctx: Any, data: Any, run: Any) -> list[dict[str, Any]]:
    """Every variant on every open-QA evaluation set -> Parquet per item + results.json."""
    from calm_core.calibration.posthoc import MIN_FIT_ITEMS
    from calm_core.io import atomic_write_json
    from calm_core.runs.rundir import write_predictions

    settings = ctx.settings
    cfg = settings.generation
    grouping = grouping_for(cfg.grouping, cfg.grouping_threshold)
    ts, ts_note = None, None
    if not settings.eval_baselines:
        ts_note = "no `base` / `ts` variants: eval_baselines = false"
    elif len(data.heldout) >= MIN_FIT_ITEMS:
        ts = fit_token_temperature(ctx.model, ctx.tokenizer, data.heldout, cfg.prompt, settings.eval_batch_size)
    else:
        ts_note = f"no `ts` variant: S_V has {len(data.heldout)} items, fewer than {MIN_FIT_ITEMS}"
    transforms = {None: None, "head": ctx.head, "ts": temperature_transform(ts.temperature) if ts else None}
    rows = []
    for name, items in data.evals.items():
        for variant, adapter, key in variants(settings.method, ctx.head is not None, ts, settings.eval_baselines):
            frame = judge(items, _answers(ctx, items, cfg, transforms[key], adapter), grouping)
            rows.append({"dataset": name, "variant": variant, "task": "openqa", **summarize_open(frame)})
            write_predictions(run.path, variant, name, frame)
    ts_record = {"temperature": ts.temperature, "fit_on": settings.heldout_data, "fit": "gold answer tokens"} if ts \
        else {"note": ts_note}
    atomic_write_json(run.path / "results.json", {"results": rows, "ts": ts_record, "task": "openqa",
                                                  "generation": cfg.to_dict()})
    return rows
