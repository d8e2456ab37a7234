"""The metric table of a result row (`summarize`, from the declared metrics in columns.py)
and bootstrap intervals that hold the value they are about."""

from __future__ import annotations

import functools
import math
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
    metric: Union[Metric, str],
    probs: object,
    labels: object,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    n_bins: int = 15,
) -> tuple[float, float]:
    """Bootstrap interval of metric(probs, labels), resampling items, shifted by the
    bootstrap's median bias so that it always holds the metric's own value.

    Draws n_boot index sets of size N with replacement (one (n_boot, N) draw from
    numpy's default_rng(seed), so a seed fixes the result) and evaluates the metric on
    each (resamples where it is nan, AUROC with one class, are skipped; all nan gives
    (nan, nan)). With q_a the a-th percentile of those values and m their median, the
    interval is

        [point - (m - q_lo), point + (q_hi - m)],   lo, hi = (1 - level)/2, (1 + level)/2

    the percentile interval [q_lo, q_hi] moved by the bias m - point. Why: a binned ECE
    resampled is biased upwards on small sets (a resample repeats items, so its bins hold
    fewer distinct items and their gaps average out less), and the plain percentile
    interval can then lie wholly above the figure it is shown beside. Since
    q_lo <= m <= q_hi, the point is inside by construction; a metric with declared
    `bounds` (columns.py) keeps its interval within them. A mean (accuracy) has m close to
    its point, so its interval barely moves.
    metric: a callable (probs, labels) -> float or a declared metric's name ("ece", "acc",
    ...); n_bins: the bins of a named binned metric (the row's own, so the interval is
    about the ECE shown).
    Example: probs [[1, 0], [0, 1]], labels [0, 0] -> acc 0.5, resamples in {0, .5, 1}
    with median .5; bootstrap_ci("acc", ...) = (0.0, 1.0).
    """
    fn, (floor, ceiling) = _resolve_metric(metric, check_positive_int(n_bins, "n_bins"))
    n_boot = check_positive_int(n_boot, "n_boot")
    if not 0.0 < level < 1.0:
        raise fail("level", "to be in (0, 1)", level)
    p, y = check_probs_labels(probs, labels)
    idx = np.random.default_rng(seed).integers(0, len(y), size=(n_boot, len(y)))  # (n_boot, N)
    stats = np.array([fn(p[i], y[i]) for i in idx], dtype=np.float64)  # (n_boot,)
    point = float(fn(p, y))
    if np.isnan(stats).all() or math.isnan(point):
        return float("nan"), float("nan")
    alpha = 100.0 * (1.0 - level) / 2.0
    lo, median, hi = np.nanpercentile(stats, [alpha, 50.0, 100.0 - alpha])
    return float(max(floor, point - (median - lo))), float(min(ceiling, point + (hi - median)))


def intervals(
    probs: object,
    labels: object,
    names: tuple[str, ...] | None = None,
    level: float = 0.9,
    n_boot: int = 300,
    seed: int = 0,
    n_bins: int = 15,
) -> dict[str, list[float]]:
    """name -> [lo, hi], the bias-shifted bootstrap interval (`bootstrap_ci`) of each
    metric, every metric on the same resamples (one seed), binned ones on `n_bins` (the
    row's). 90% and 300 resamples by default: the intervals of a results table, cheap
    enough for every row of a run's final evaluation.
    names: None for the declared ones (columns.interval_names()).
    Example: probs [[1, 0], [0, 1]], labels [0, 0] -> {"acc": [0.0, 1.0], ...}."""
    chosen = columns.interval_names() if names is None else names
    return {
        name: list(bootstrap_ci(name, probs, labels, n_boot=n_boot, level=level, seed=seed, n_bins=n_bins))
        for name in chosen
    }


def with_interval(value: object, bounds: object) -> str:
    """ "0.074 [0.012, 0.174]": a figure beside its interval, as every table of the studio
    shows one; the figure alone without an interval, "-" without a figure."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    if isinstance(bounds, (list, tuple)) and len(bounds) == 2 and all(isinstance(b, (int, float)) for b in bounds):
        return f"{value:.3f} [{bounds[0]:.3f}, {bounds[1]:.3f}]"
    return f"{value:.3f}"


def _resolve_metric(metric: Union[Metric, str], n_bins: int) -> tuple[Metric, tuple[float, float]]:
    """(metric(probs, labels), the values it can take): a callable as it is, unbounded; a
    declared name's compute, on `n_bins` when it is binned, with its declared bounds."""
    if callable(metric):
        return metric, (-math.inf, math.inf)
    declared = {c.name: c for c in columns.computed()}
    if metric not in declared:
        raise fail("metric", f"to be a callable or one of {sorted(declared)}", repr(metric))
    column = declared[metric]
    compute = column.metric()
    fn = functools.partial(compute, n_bins=n_bins) if column.binned else compute
    return fn, column.bounds
