"""Open-QA generations -> per-item judgements -> metrics (Semantic ECE and friends).

    frame = judge(items, answer_sets, grouping)     # one row per question
    row = summarize_open(frame)                      # acc, ece, ece_10, auroc, ...

Per item (columns of `frame`, also the run's eval/<variant>/<dataset>.parquet):
    greedy, greedy_correct (normalised exact match), greedy_f1, seq_prob
    samples, clusters (one label per sample)
    sem_answer / sem_correct / sem_conf:    Sem1, the modal cluster over all samples
    sem2_answer / sem2_correct / sem2_conf: Sem2, first-half mode scored on the second half
    confidence, correct: the pair reliability diagrams use (= sem_conf, sem_correct;
                         seq_prob and greedy_correct when there are no samples)

Metrics (`summarize_open`), every ECE from `metrics.confidence_ece`:
    acc      greedy exact match            f1        greedy token F1
    sem_acc  modal answer exact match      ece / ece_10   Semantic ECE (Sem1), 15 / 10 bins
    auroc    Sem1 confidence vs modal correctness
    sem2_ece_10, sem2_auroc                Sem2
    seq_ece_10, seq_auroc                  greedy sequence probability vs greedy correctness
    confidence (mean Sem1), seq_confidence (mean seq_prob), entropy (mean greedy token entropy)
The published Sem-ECE uses 10 bins; 15 is the studio's default for every ECE.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from calm_core.calibration import metrics
from calm_core.data.schema import OpenItem
from calm_core.generative.answers import exact_match, token_f1
from calm_core.generative.sampling import AnswerSet
from calm_core.generative.semantic import Grouping, modal_confidence, split_half_confidence


def _semantic(samples: list[str], labels: list[int], aliases: Sequence[str]) -> dict[str, Any]:
    if len(samples) < 2:
        return {
            "sem_answer": None,
            "sem_correct": math.nan,
            "sem_conf": math.nan,
            "sem2_answer": None,
            "sem2_correct": math.nan,
            "sem2_conf": math.nan,
        }
    i1, c1 = modal_confidence(labels)
    i2, c2 = split_half_confidence(labels)
    return {
        "sem_answer": samples[i1],
        "sem_correct": float(exact_match(samples[i1], aliases)),
        "sem_conf": c1,
        "sem2_answer": samples[i2],
        "sem2_correct": float(exact_match(samples[i2], aliases)),
        "sem2_conf": c2,
    }


def judge(items: Sequence[OpenItem], answer_sets: Sequence[AnswerSet], grouping: Grouping) -> Any:
    """One row per item: correctness of the greedy and modal answers and their confidences."""
    import pandas as pd

    if len(items) != len(answer_sets):
        raise ValueError(f"Expected one answer set per item, but got {len(answer_sets)} for {len(items)} items")
    rows = []
    for item, answers in zip(items, answer_sets, strict=True):
        labels = grouping(answers.samples) if answers.samples else []
        row = {
            "id": item.id,
            "greedy": answers.greedy,
            "greedy_correct": float(exact_match(answers.greedy, item.answers)),
            "greedy_f1": token_f1(answers.greedy, item.answers),
            "seq_prob": math.exp(answers.greedy_logprob),
            "greedy_entropy": answers.greedy_entropy,
            "samples": list(answers.samples),
            "clusters": labels,
            **_semantic(list(answers.samples), labels, item.answers),
        }
        has_samples = not math.isnan(row["sem_conf"])
        row["confidence"] = row["sem_conf"] if has_samples else row["seq_prob"]
        row["correct"] = row["sem_correct"] if has_samples else row["greedy_correct"]
        rows.append(row)
    return pd.DataFrame(rows)


def _pair(frame: Any, confidence: str, correct: str) -> tuple[np.ndarray, np.ndarray] | None:
    c = frame[confidence].to_numpy(dtype=np.float64)
    a = frame[correct].to_numpy(dtype=np.float64)
    keep = ~(np.isnan(c) | np.isnan(a))
    return (np.clip(c[keep], 0.0, 1.0), a[keep]) if keep.any() else None


def _calibration(frame: Any, confidence: str, correct: str, prefix: str) -> dict[str, float]:
    pair = _pair(frame, confidence, correct)
    if pair is None:
        return {f"{prefix}ece_10": math.nan, f"{prefix}auroc": math.nan}
    return {
        f"{prefix}ece_10": metrics.confidence_ece(*pair, n_bins=10),
        f"{prefix}auroc": metrics.confidence_auroc(*pair),
    }


def summarize_open(frame: Any) -> dict[str, float]:
    """The metric row of one variant on one open-QA set (keys in the module docstring)."""
    sem = _pair(frame, "sem_conf", "sem_correct")
    out: dict[str, Any] = {
        "n": int(len(frame)),
        "acc": float(frame["greedy_correct"].mean()),
        "f1": float(frame["greedy_f1"].mean()),
        "sem_acc": float(np.nanmean(frame["sem_correct"])) if sem is not None else math.nan,
        "ece": metrics.confidence_ece(*sem, n_bins=15) if sem is not None else math.nan,
        "ece_10": metrics.confidence_ece(*sem, n_bins=10) if sem is not None else math.nan,
        "auroc": metrics.confidence_auroc(*sem) if sem is not None else math.nan,
        "confidence": float(sem[0].mean()) if sem is not None else math.nan,
        "seq_confidence": float(frame["seq_prob"].mean()),
        "entropy": float(frame["greedy_entropy"].mean()),
    }
    out.update(_calibration(frame, "sem2_conf", "sem2_correct", "sem2_"))
    out.update(_calibration(frame, "seq_prob", "greedy_correct", "seq_"))
    return out
