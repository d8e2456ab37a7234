"""Model variant x dataset -> metrics and per-item predictions.

One pipeline for the CLI, the studio and training-time evaluation:

    scores = score_dataset(lm, "arc/easy_test", ScoringConfig(), limit=300)
    ts = TemperatureScaler.fit(fit_scores.logits, fit_scores.gold)
    rows = [result_row(scores, "base"), result_row(scores, "ts", ts)]

A *variant* is a way of turning option scores into probabilities: `base` (softmax of
the raw scores) or a post-hoc calibrator (`ts`, `vs`). Training methods add their own
variants by scoring with their own model (see calm_core.training.methods).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from calm_core.calibration import metrics
from calm_core.data.catalog import load_dataset
from calm_core.data.schema import DataError, LoadReport, MCItem
from calm_core.scoring.prompts import ScoringConfig
from calm_core.scoring.options import OptionScores, ProgressFn, score_items

TABLE_COLUMNS = ("dataset", "variant", "n", "acc", "ece", "mce", "brier", "nll", "auroc", "confidence")


class Calibrator(Protocol):
    def probs(self, logits: np.ndarray) -> np.ndarray: ...


def load_report(name: str, kind: str, limit: int | None = None, seed: int = 0, mapping: Any = None) -> LoadReport:
    """The LoadReport of a dataset of `kind` ("mc" or "open") by catalog name or file path:
    its items and its rejected rows, which every caller should show (`rejection_lines`).

    `mapping` (a ColumnMapping or its string form) applies to files; a dataset of the
    other kind raises DataError.
    """
    report = load_dataset(name, limit=limit, seed=seed, mapping=mapping)
    if report.kind != kind:
        wanted = {"mc": "a multiple-choice", "open": "an open-answer"}[kind]
        raise DataError(f"Expected {wanted} dataset for `{name}`, but it holds {report.kind!r} items")
    return report


def load_items(name: str, kind: str, limit: int | None = None, seed: int = 0, mapping: Any = None) -> list[Any]:
    """`load_report(...).items`: for callers that have already shown the rejected rows
    (or show none: the studio's scoring cache). Prefer `load_report` at a boundary."""
    return list(load_report(name, kind, limit, seed, mapping).items)


def load_mc_items(name: str, limit: int | None = None, seed: int = 0, mapping: Any = None) -> list[MCItem]:
    """`load_items(name, "mc", ...)`: the multiple-choice items a scorer needs."""
    return load_items(name, "mc", limit, seed, mapping)


def score_dataset(lm: Any, name: str, cfg: ScoringConfig, limit: int | None = None, seed: int = 0,
                  batch_size: int = 32, progress: bool | ProgressFn = True) -> OptionScores:
    return score_items(lm, load_mc_items(name, limit, seed), cfg, batch_size=batch_size, progress=progress,
                       dataset=name)


def variant_probs(scores: OptionScores, calibrator: Calibrator | None = None) -> np.ndarray:
    return scores.probs() if calibrator is None else calibrator.probs(scores.logits)


def result_row(scores: OptionScores, dataset: str, variant: str, calibrator: Calibrator | None = None,
               n_bins: int = 15, extra_bins: tuple[int, ...] = (10,)) -> dict[str, Any]:
    """One row of `calm eval --json`: the summary metrics, bins and the scoring rule.

    `extra_bins` adds `ece_<b>` keys (the paper reports 10 bins; our default is 15).
    """
    probs = variant_probs(scores, calibrator)
    row: dict[str, Any] = {"dataset": dataset, "variant": variant, "scoring": _rule_name(scores.scoring)}
    row.update(metrics.summarize(probs, scores.gold, n_bins=n_bins))
    for b in extra_bins:
        row[f"ece_{b}"] = metrics.ece(probs, scores.gold, n_bins=b)
    confidence, correct = metrics.top_label(probs, scores.gold)
    row["bins"] = metrics.bin_confidences(confidence, correct, n_bins=n_bins).to_records()
    row["scoring_config"] = scores.scoring
    row["truncated"] = scores.truncated  # items cut from the left to fit the model's context (scoring.fit_cloze_item)
    return row


def predictions_frame(scores: OptionScores, calibrator: Calibrator | None = None) -> Any:
    """Per-item predictions under a variant: the raw logits plus that variant's probs."""
    frame = scores.to_frame()
    probs = variant_probs(scores, calibrator)
    frame["probs"] = [p[: int(k)].tolist() for p, k in zip(probs, scores.n_choices)]
    frame["prediction"] = probs.argmax(axis=1)
    frame["confidence"] = probs.max(axis=1)
    return frame


def _rule_name(scoring: dict[str, Any]) -> str:
    return scoring["rule"] + ("+chat" if scoring.get("chat_template") else "")


def format_table(rows: list[dict[str, Any]], columns: tuple[str, ...] = TABLE_COLUMNS) -> str:
    """A fixed-width text table of result rows (floats to 4 decimals)."""
    def cell(value: Any) -> str:
        return f"{value:.4f}" if isinstance(value, float) else str(value)

    cells = [[cell(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def wide_table(rows: list[dict[str, Any]], metric_names: tuple[str, ...] = ("acc", "ece", "ece_10"),
               ood_mean: bool = False) -> str:
    """A Markdown table in the paper's shape: one line per variant, and per dataset (in
    first-seen order, so the in-domain set that a run lists first comes first) one
    column per metric. A variant missing on a dataset shows `-`. `ood_mean` adds, per
    metric, the mean over every dataset but the first (the out-of-domain average)."""
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    values = {(r["dataset"], r["variant"]): r for r in rows}
    header = ["variant"] + [f"{d} {m}" for d in datasets for m in metric_names]
    if ood_mean:
        header += [f"OOD mean {m}" for m in metric_names]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for variant in variants:
        cells = [variant]
        for dataset in datasets:
            row = values.get((dataset, variant))
            cells += [f"{row[m]:.3f}" if row is not None and m in row else "-" for m in metric_names]
        if ood_mean:
            ood = [values.get((d, variant)) for d in datasets[1:]]
            cells += [f"{sum(r[m] for r in ood) / len(ood):.3f}" if ood and all(r is not None for r in ood) else "-"
                      for m in metric_names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
