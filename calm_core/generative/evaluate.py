"""`calm eval --task openqa`: a model's open answers on datasets, base and post-hoc TS.

    ts = fit_token_temperature(model, tokenizer, fit_items, prompt="fewshot")
    rows, frames = evaluate_open(model, tokenizer, {"triviaqa/...": items}, cfg, {"ts": ts})

Every variant generates greedy and sampled answers through the same
`generate_answers`; TS divides every step's logits by its temperature. Rows carry the
keys of `judge.summarize_open` plus dataset, variant and task.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from calm_core.training.adapters import evaluating
from calm_core.data.schema import OpenItem
from calm_core.generative.judge import judge, summarize_open
from calm_core.generative.objectives import answer_logits, gold_requests
from calm_core.generative.sampling import GenerationConfig, generate_answers, temperature_transform
from calm_core.generative.semantic import grouping_for
from calm_core.scoring.options import ProgressFn


def fit_token_temperature(model: Any, tokenizer: Any, items: Sequence[OpenItem], prompt: str,
                          batch_size: int = 16) -> Any:
    """Post-hoc TS for generation: one temperature fitted (TemperatureScaler, NLL to
    convergence) on the logits at every gold-answer token of `items`, adapter off."""
    from calm_core.calibration.posthoc import TemperatureScaler

    requests = gold_requests(items, tokenizer, prompt)
    logits, targets = [], []
    with torch.no_grad(), evaluating(model, adapter=False):
        for start in range(0, len(requests), batch_size):
            z, t = answer_logits(model, requests[start:start + batch_size], tokenizer.pad_token_id)
            logits.append(z.double().cpu().numpy())
            targets.append(t.cpu().numpy())
    return TemperatureScaler.fit(np.concatenate(logits), np.concatenate(targets))


def evaluate_open(model: Any, tokenizer: Any, datasets: dict[str, Sequence[OpenItem]], cfg: GenerationConfig,
                  scalers: dict[str, Any] | None = None, progress: bool | ProgressFn = False) -> tuple[list[dict], dict]:
    """Rows (one per dataset x variant: `base`, then each of `scalers`) and the per-item
    frames keyed by (variant, dataset)."""
    grouping = grouping_for(cfg.grouping, cfg.grouping_threshold)
    variants = [("base", None)] + [(name, temperature_transform(s.temperature)) for name, s in (scalers or {}).items()]
    rows, frames = [], {}
    for name, items in datasets.items():
        for variant, transform in variants:
            answers = generate_answers(model, tokenizer, items, cfg, transform=transform, progress=progress)
            frame = judge(items, answers, grouping)
            rows.append({"dataset": name, "variant": variant, "task": "openqa", **summarize_open(frame)})
            frames[(variant, name)] = frame
    return rows, frames


OPEN_TABLE_COLUMNS = ("dataset", "variant", "n", "acc", "sem_acc", "ece", "ece_10", "sem2_ece_10", "seq_ece_10",
                      "auroc", "confidence")
