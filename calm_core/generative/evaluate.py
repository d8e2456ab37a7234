"""`calm eval --task openqa`: a model's open answers on datasets, base and the post-hoc
calibrators that apply to generation (calibration.posthoc, tasks "openqa": TS).

    calibrators = fit_token_calibrators(model, tokenizer, fit_items, prompt="fewshot")  # {"ts": ...}
    rows, frames = evaluate_open(model, tokenizer, {"triviaqa/...": items}, cfg, calibrators)

Every variant generates greedy and sampled answers through the same
`generate_answers`; a calibrator transforms every step's logits (TS divides them by its
temperature). Rows carry the keys of `judge.summarize_open` plus dataset, variant and
task; the open-answer table's columns are metrics.columns' "openqa".
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch

from calm_core.calibration.posthoc import PosthocCalibrator, fit_defaults
from calm_core.data.schema import OpenItem
from calm_core.generative.judge import judge, summarize_open
from calm_core.generative.objectives import answer_logits, gold_requests
from calm_core.generative.sampling import GenerationConfig, generate_answers
from calm_core.generative.semantic import grouping_for
from calm_core.scoring.adapters import evaluating
from calm_core.scoring.fast_paths import fast_paths
from calm_core.scoring.progress import ProgressFn


def token_fit_data(
    model: Any, tokenizer: Any, items: Sequence[OpenItem], prompt: str, batch_size: int = 16
) -> tuple[np.ndarray, np.ndarray]:
    """What a post-hoc calibrator for generation is fitted on: the base model's (adapter
    off) vocabulary logits at every gold-answer token of `items`, (T, V) float64, and
    the gold token ids (T,)."""
    requests = gold_requests(items, tokenizer, prompt)
    logits, targets = [], []
    with torch.no_grad(), evaluating(model, adapter=False):
        fast_paths(model)  # measured once per model (cached), before `answer_logits` reads the verdict
        for start in range(0, len(requests), batch_size):
            z, t = answer_logits(model, requests[start : start + batch_size], tokenizer.pad_token_id)
            logits.append(z.double().cpu().numpy())
            targets.append(t.cpu().numpy())
    return np.concatenate(logits), np.concatenate(targets)


def fit_token_calibrators(
    model: Any, tokenizer: Any, items: Sequence[OpenItem], prompt: str, batch_size: int = 16
) -> dict[str, PosthocCalibrator]:
    """Every default calibrator for generation (TS: one temperature, NLL to convergence)
    fitted on `token_fit_data`: {name: calibrator}."""
    return fit_defaults(*token_fit_data(model, tokenizer, items, prompt, batch_size), task="openqa")


def evaluate_open(
    model: Any,
    tokenizer: Any,
    datasets: Mapping[str, Sequence[OpenItem]],
    cfg: GenerationConfig,
    calibrators: dict[str, PosthocCalibrator] | None = None,
    progress: bool | ProgressFn = False,
) -> tuple[list[dict[str, Any]], dict[tuple[str, str], Any]]:
    """Rows (one per dataset x variant: `base`, then each of `calibrators`, by name) and
    the per-item frames keyed by (variant, dataset)."""
    grouping = grouping_for(cfg.grouping, cfg.grouping_threshold)
    variants = [("base", None)] + [(name, c.token_transform()) for name, c in (calibrators or {}).items()]
    rows: list[dict[str, Any]] = []
    frames: dict[tuple[str, str], Any] = {}  # pandas frames
    for name, items in datasets.items():
        for variant, transform in variants:
            answers = generate_answers(model, tokenizer, items, cfg, transform=transform, progress=progress)
            frame = judge(items, answers, grouping)
            rows.append({"dataset": name, "variant": variant, "task": "openqa", **summarize_open(frame)})
            frames[(variant, name)] = frame
    return rows, frames
