"""The metric table of a result row (`summarize`, from the declared metrics in columns.py)
and percentile bootstrap intervals."""

from __future__ import annotations

from typing import Callable, Union

import numpy as np

from calm_core.calibration.metrics import columns
from calm_core.calibration.metrics._checks import check_positive_int, check_probs_labels, fail

Metric = Callable[[np.ndarray, np.ndarray], float]


def summarize(probs: object, labels: object, n_bins: int = 15) -> dict[str, float]:
    """Every declared metric (columns.COLUMNS with a `compute`) on one (probs, labels) set,
    for tables and the CLI.

    Keys: acc, ece, mce, adaptive_ece, classwise_ece, brier, nll, auroc, aurc (area
    under the risk-coverage curve), entropy (mean, nats), confidence (mean top-label),
    smooth_ece, n (items, int) and ece_bins (the n_bins used by the binned metrics, int).
    probs (N, K), labels (N,).
    Example: summarize([[1.0, 0.0]], [0]) -> acc 1.0, ece 0.0, brier 0.0, auroc nan,
    aurc 0.0, n 1.
    """
    n_bins = check_positive_int(n_bins, "n_bins")
    p, y = check_probs_labels(probs, labels)  # convert once; the metrics re-check cheaply
    out: dict[str, float] = {
        c.name: (c.metric()(p, y, n_bins) if c.binned else c.metric()(p, y)) for c in columns.computed()
    }
    out["n"] = int(len(y))
    out["ece_bins"] = n_bins
    return out


def bootstrap_ci(
    metric: Union[Metric, str], probs: object, labels: object, n_boot: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of metric(probs, labels), resampling items.

    Draws n_boot index sets of size N with replacement (one (n_boot, N) draw from
    numpy's default_rng(seed), so a seed fixes the result), evaluates the metric on each
    and returns the (1 - level)/2 and (1 + level)/2 percentiles; resamples where the
    metric is nan (AUROC with one class) are skipped, all nan gives (nan, nan).
    metric: a callable (probs, labels) -> float or a declared metric's name ("ece", "acc", ...).
    Example: probs [[1, 0], [0, 1]], labels [0, 0] -> acc resamples in {0, .5, 1};
    bootstrap_ci("acc", ...) = (0.0, 1.0).
    """
    fn = _resolve_metric(metric)
    n_boot = check_positive_int(n_boot, "n_boot")
    if not 0.0 < level < 1.0:
        raise fail("level", "to be in (0, 1)", level)
    p, y = check_probs_labels(probs, labels)
    idx = np.random.default_rng(seed).integers(0, len(y), size=(n_boot, len(y)))  # (n_boot, N)
    stats = np.array([fn(p[i], y[i]) for i in idx], dtype=np.float64)  # (n_boot,)
    if np.isnan(stats).all():
        return float("nan"), float("nan")
    alpha = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.nanpercentile(stats, [alpha, 100.0 - alpha])
    return float(lo), float(hi)


def intervals(
    probs: object,
    labels: object,
    names: tuple[str, ...] | None = None,
    level: float = 0.9,
    n_boot: int = 300,
    seed: int = 0,
) -> dict[str, list[float]]:
    """name -> [lo, hi], the percentile bootstrap interval (`bootstrap_ci`) of each metric,
    every metric on the same resamples (one seed). 90% and 300 resamples by default: the
    intervals of a results table, cheap enough for every row of a run's final evaluation.
    names: None for the declared ones (columns.interval_names()).
    Example: probs [[1, 0], [0, 1]], labels [0, 0] -> {"acc": [0.0, 1.0], ...}."""
    chosen = columns.interval_names() if names is None else names
    return {name: list(bootstrap_ci(name, probs, labels, n_boot=n_boot, level=level, seed=seed)) for name in chosen}


def _resolve_metric(metric: Union[Metric, str]) -> Metric:
    if callable(metric):
        return metric
    declared = {c.name: c.metric() for c in columns.computed()}
    if metric not in declared:
        raise fail("metric", f"to be a callable or one of {sorted(declared)}", repr(metric))
    return declared[metric]
