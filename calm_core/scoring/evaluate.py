"""Model variant x dataset -> metrics and per-item predictions.

One pipeline for the CLI, the studio and training-time evaluation:

    scores = Scorer.of(lm).score(load_mc_items("arc/easy_test", 300), ScoringConfig())   # scoring.scorer
    fits = fit_posthoc({"commonsenseqa/dev": fit_scores})      # every default calibrator: [ts]
    rows = [result_row(scores, name, "base")] + [result_row(scores, name, f.variant, f.calibrator) for f in fits]
    print(format_table(rows))                                  # `calm eval`'s columns (metrics.columns)

A *variant* is a way of turning option scores into probabilities: `base` (softmax of
the raw scores) or a post-hoc calibrator (calibration.posthoc's registry: `ts`, and
whatever module is added there). Training methods add their own variants by scoring
with their own model (see calm_core.training.methods).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from calm_core.calibration import metrics
from calm_core.calibration.metrics.columns import cell, interval_names, table_columns
from calm_core.calibration.metrics.columns import metric_names as table_metrics
from calm_core.calibration.posthoc import PosthocCalibrator, calibrated_probs, fit_calibrator, for_task
from calm_core.data.catalog import load_dataset
from calm_core.data.schema import DataError, LoadReport, MCItem
from calm_core.scoring.options import OptionScores


class Calibrator(Protocol):
    reads_features: bool

    def probs(self, logits: np.ndarray) -> np.ndarray: ...


@dataclass
class PosthocFit:
    """One fitted post-hoc variant of `calm eval`: its name (`ts`, or `ts:<fit set>` when
    several sets are fitted), the calibrator, and what `--json` records for it."""

    variant: str
    calibrator: PosthocCalibrator
    record: dict[str, Any]


def fit_posthoc(fit_sets: dict[str, OptionScores], task: str = "mcqa") -> list[PosthocFit]:
    """Every default calibrator of `task` fitted on each scored fit set, calibrator by
    calibrator (calibration.posthoc.for_task: adding a calibrator module adds its rows).
    One that reads features (ats) is fitted where the fit set's scores carry them and
    have its `min_items`; elsewhere it is left out (`calm eval` says why)."""
    fits = []
    for name, cls in for_task(task, with_features=True).items():
        for dataset, scores in fit_sets.items():
            if _missing_for(cls, len(scores), scores.features is not None):
                continue
            calibrator = fit_calibrator(cls, scores.logits, scores.gold, scores.features)
            variant = name if len(fit_sets) == 1 else f"{name}:{dataset}"
            record = {"dataset": dataset, "n": len(scores), **calibrator.params(), **calibrator.fit_stats()}
            fits.append(PosthocFit(variant, calibrator, record))
    return fits


def _missing_for(cls: type[PosthocCalibrator], n_items: int, has_features: bool) -> str | None:
    """Why `cls` cannot be fitted on this fit set (None: it can): too few items, or no
    hidden-state features for one that reads them."""
    if n_items < cls.min_items:
        return f"no `{cls.name}` variant: S_V has {n_items} items, fewer than {cls.min_items}"
    if cls.reads_features and not has_features:
        return f"no `{cls.name}` variant: the S_V scores carry no hidden-state features"
    return None


FitData = tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, np.ndarray | None]


def fit_baselines(
    n_items: int,
    fit_data: Callable[[], FitData],
    task: str,
    enabled: bool = True,
    defaults_only: bool = True,
) -> tuple[dict[str, PosthocCalibrator], dict[str, str]]:
    """A final evaluation's post-hoc baselines: every calibrator of `task` (by default only
    those fitted by default) fitted on S_V's labelled logits (`fit_data()`: (N, K) logits,
    (N,) gold and, where captured, (N, H) features; computed only when a fit happens), or,
    per calibrator, the note saying why its variant is missing (too few S_V items for it,
    or no features for one that reads them). Returns ({name: calibrator}, {name: note})."""
    names = for_task(task, defaults_only, with_features=True)
    if not enabled:
        return {}, {name: f"no `base` / `{name}` variants: eval_baselines = false" for name in names}
    fitted: dict[str, PosthocCalibrator] = {}
    notes: dict[str, str] = {}
    data: FitData | None = None
    for name, cls in names.items():
        if n_items < cls.min_items:
            notes[name] = str(_missing_for(cls, n_items, True))
            continue
        data = data if data is not None else fit_data()
        logits, labels, features = (*data, None)[:3]
        why = _missing_for(cls, n_items, features is not None)
        if why:
            notes[name] = why
            continue
        fitted[name] = fit_calibrator(cls, logits, labels, features)
    return fitted, notes


def baseline_records(fitted: dict[str, PosthocCalibrator], notes: dict[str, str], **fit_on: Any) -> dict[str, Any]:
    """results.json's entry per calibrator (keyed by its name, `ts`): its parameters and
    where it was fitted (`fit_on`), or the note saying why it is missing."""
    return {
        **{name: {**c.params(), **fit_on} for name, c in fitted.items()},
        **{name: {"note": note} for name, note in notes.items()},
    }


def load_report(
    name: str, kind: str, limit: int | None = None, seed: int = 0, mapping: Any = None, encoding: str | None = None
) -> LoadReport:
    """The LoadReport of a dataset of `kind` ("mc" or "open") by catalog name or file path:
    its items and its rejected rows, which every caller should show (`rejection_lines`).

    `mapping` (a ColumnMapping or its string form) and `encoding` (a file's text encoding,
    UTF-8 by default) apply to files; a dataset of the other kind raises DataError.
    """
    report = load_dataset(name, limit=limit, seed=seed, mapping=mapping, encoding=encoding)
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


def variant_probs(scores: OptionScores, calibrator: Calibrator | None = None) -> np.ndarray:
    if calibrator is None:
        return scores.probs()
    return calibrated_probs(calibrator, scores.logits, scores.features)  # type: ignore[arg-type]


def result_row(
    scores: OptionScores,
    dataset: str,
    variant: str,
    calibrator: Calibrator | None = None,
    n_bins: int = 15,
    extra_bins: tuple[int, ...] = (10,),
) -> dict[str, Any]:
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
    row["chance"] = float(np.mean(1.0 / scores.n_choices))  # a uniform forecast's mean confidence (mean 1/K)
    row["ci90"] = metrics.intervals(probs, scores.gold, n_bins=n_bins)  # 90%: acc, ece, auroc, confidence
    row["scoring_config"] = scores.scoring
    row["truncated"] = scores.truncated  # items cut from the left to fit the model's context (truncation.py)
    return row


def predictions_frame(scores: OptionScores, calibrator: Calibrator | None = None, items: Sequence[MCItem] = ()) -> Any:
    """Per-item predictions under a variant: the raw logits plus that variant's probs; with
    the scored `items`, each row's subject too when any item has one. Compare's figures by
    subject read it from here, so a column mapped to the group when the set was evaluated
    (`--mapping subject=region`) holds without the mapping being given again."""
    frame = scores.to_frame()
    probs = variant_probs(scores, calibrator)
    frame["probs"] = [p[: int(k)].tolist() for p, k in zip(probs, scores.n_choices, strict=True)]
    frame["prediction"] = probs.argmax(axis=1)
    frame["confidence"] = probs.max(axis=1)
    subjects = {str(item.id): item.subject for item in items}
    if any(subjects.values()):
        frame["subject"] = [subjects.get(str(item_id)) for item_id in frame["id"]]
    return frame


def _rule_name(scoring: dict[str, Any]) -> str:
    rule: str = scoring["rule"]
    return rule + ("+chat" if scoring.get("chat_template") else "")


def format_table(rows: list[dict[str, Any]], columns: tuple[str, ...] | None = None) -> str:
    """A fixed-width text table of result rows (floats in their column's format, 4
    decimals); `columns` defaults to what `calm eval` prints (metrics.columns)."""
    columns = columns or table_columns("mcqa_eval")
    cells = [[cell(c, r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def interval_table(rows: list[dict[str, Any]]) -> str:
    """The rows' 90% intervals as `calm eval` prints them under its table: each interval
    metric as "value [lo, hi]", the cell Compare's evidence table shows."""
    names = tuple(n for n in interval_names() if any(n in r for r in rows))
    shown = [{**r, **{n: metrics.with_interval(r.get(n), (r.get("ci90") or {}).get(n)) for n in names}} for r in rows]
    return format_table(shown, ("dataset", "variant", *names))


def wide_table(
    rows: list[dict[str, Any]], metric_names: tuple[str, ...] = table_metrics("paper_mcqa"), ood_mean: bool = False
) -> str:
    """A Markdown table in the paper's shape: one line per variant, and per dataset (in
    first-seen order, so the in-domain set that a run lists first comes first) one
    column per metric (default: metrics.columns' "paper_mcqa"; 3 decimals, the paper's).
    A variant missing on a dataset shows `-`. `ood_mean` adds, per
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
            found = [r for r in ood if r is not None]
            cells += [
                f"{sum(r[m] for r in found) / len(found):.3f}" if ood and len(found) == len(ood) else "-"
                for m in metric_names
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
