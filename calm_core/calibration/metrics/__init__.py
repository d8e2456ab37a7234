"""calm_core.calibration.metrics: calibration and accuracy metrics over option probabilities (numpy).

Inputs everywhere: probs (N, K) float, rows summing to 1 (ragged option counts are
zero-probability padding columns), labels (N,) int gold indices in [0, K). Inputs are
converted and checked once at the boundary; errors read "Expected `x` ..., but got y".

    bins         top_label, bin_confidences -> BinTable (the bins behind ECE)
    reliability  prepare_reliability -> ReliabilityData (a diagram's bins, from the item count, with Wilson
                 intervals), wilson_interval, auto_bins, noise_ece (the ECE of noise alone at this size)
    calibration  ece, mce, rms_ce, adaptive_ece, classwise_ece (binned; 15 equal-width bins),
                 confidence_ece (one confidence per answer: open QA, Sem-ECE)
    smooth       smooth_ece (Błasiok & Nakkiran 2023, matches relplot.smECE)
    scores       softmax, entropy, mean_entropy, mean_confidence, accuracy, brier, nll, item_nll, auroc,
                 item_confidence_brier,
                 confidence_auroc, aurc, confidence_aurc (selective prediction)
    summary      summarize (every declared metric of a row), bootstrap_ci, intervals (each holding its point),
                 with_interval ("0.074 [0.012, 0.174]")
    paired       paired_bootstrap, paired_difference, paired_records: per-item score differences of variants on the
                 same items, with a 90% interval (PAIRED_LEVEL); is a difference beyond the noise
    columns      COLUMNS: every metric and table column declared once (compute, label, direction,
                 tables, Monitor curve, interval); table_columns, curve_names

Example:
    >>> from calm_core.calibration.metrics import summarize
    >>> summarize([[0.9, 0.1], [0.2, 0.8]], [0, 0], n_bins=10)["acc"]
    0.5
"""

from calm_core.calibration.metrics.bins import STRATEGIES, BinTable, bin_confidences, top_label
from calm_core.calibration.metrics.calibration import adaptive_ece, classwise_ece, confidence_ece, ece, mce, rms_ce
from calm_core.calibration.metrics.paired import (
    MIN_PAIRED_ITEMS,
    PAIRED_LEVEL,
    PairedDifference,
    paired_bootstrap,
    paired_difference,
    paired_records,
)
from calm_core.calibration.metrics.reliability import (
    NoiseECE,
    ReliabilityData,
    auto_bins,
    noise_ece,
    prepare_reliability,
    wilson_interval,
)
from calm_core.calibration.metrics.scores import (
    accuracy,
    aurc,
    auroc,
    brier,
    confidence_aurc,
    confidence_auroc,
    entropy,
    item_confidence_brier,
    item_nll,
    mean_confidence,
    mean_entropy,
    nll,
    softmax,
)
from calm_core.calibration.metrics.smooth import smooth_ece
from calm_core.calibration.metrics.summary import bootstrap_ci, intervals, summarize, with_interval

__all__ = [
    "MIN_PAIRED_ITEMS",
    "PAIRED_LEVEL",
    "PairedDifference",
    "STRATEGIES",
    "BinTable",
    "NoiseECE",
    "ReliabilityData",
    "accuracy",
    "adaptive_ece",
    "aurc",
    "auto_bins",
    "auroc",
    "bin_confidences",
    "bootstrap_ci",
    "brier",
    "classwise_ece",
    "confidence_aurc",
    "confidence_auroc",
    "confidence_ece",
    "ece",
    "entropy",
    "intervals",
    "item_confidence_brier",
    "item_nll",
    "mce",
    "rms_ce",
    "mean_confidence",
    "mean_entropy",
    "nll",
    "noise_ece",
    "paired_bootstrap",
    "paired_difference",
    "paired_records",
    "prepare_reliability",
    "smooth_ece",
    "softmax",
    "summarize",
    "top_label",
    "wilson_interval",
    "with_interval",
]
