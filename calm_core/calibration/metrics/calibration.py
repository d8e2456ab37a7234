"""Binned calibration errors: ECE, MCE, RMS calibration error, adaptive (equal-mass) ECE and classwise ECE.

Each public function chains the stages: validate (probs, labels, n_bins) -> update
(confidences and correctness) -> bin (`BinTable`) -> compute (one number).
"""

from __future__ import annotations

import numpy as np

from calm_core.calibration.metrics._checks import check_positive_int, check_probs_labels, check_scores
from calm_core.calibration.metrics.bins import BinTable, _bin_table, _top_label_update


def _ece_compute(table: BinTable) -> float:
    """sum_b (n_b / N) |conf_b - acc_b| over the non-empty bins."""
    weights = table.counts / table.counts.sum()  # (B,)
    return float(np.nansum(weights * np.abs(table.gap)))


def _rms_compute(table: BinTable) -> float:
    """sqrt(sum_b (n_b / N) (conf_b - acc_b)^2) over the non-empty bins."""
    weights = table.counts / table.counts.sum()  # (B,)
    return float(np.sqrt(np.nansum(weights * np.square(table.gap))))


def _mce_compute(table: BinTable) -> float:
    """max_b |conf_b - acc_b| over the non-empty bins (N >= 1, so one exists)."""
    return float(np.nanmax(np.abs(table.gap)))


def _top_label_table(probs: object, labels: object, n_bins: int, strategy: str) -> BinTable:
    n_bins = check_positive_int(n_bins, "n_bins")
    conf, correct = _top_label_update(*check_probs_labels(probs, labels))
    return _bin_table(conf, correct, n_bins, strategy)


def ece(probs: object, labels: object, n_bins: int = 15) -> float:
    """Expected calibration error of the top label (Guo et al. 2017), L1, equal-width bins.

    ECE = sum_b (n_b / N) |conf_b - acc_b|, where bin b of [0, 1] (width 1/B, B = n_bins)
    holds n_b items whose top-label confidence max_k p_ik lies in it, conf_b is their
    mean confidence and acc_b the fraction whose argmax is the gold label. Bins are
    (lo, hi]; confidence 1.0 counts in the last bin (see `bin_confidences`).
    probs (N, K) rows summing to 1, labels (N,) in [0, K).
    Example (B = 4, edges 0, .25, .5, .75, 1): probs [[.6, .4], [.3, .7], [.8, .2],
    [.1, .9]], labels [0, 0, 1, 1] give confidences .6, .7, .8, .9 with correct 1, 0, 0, 1.
    Bin (.5, .75]: conf .65, acc .5; bin (.75, 1]: conf .85, acc .5
    -> ECE = .5 * .15 + .5 * .35 = 0.25.
    """
    return _ece_compute(_top_label_table(probs, labels, n_bins, "uniform"))


def confidence_ece(confidence: object, correct: object, n_bins: int = 15) -> float:
    """`ece` for answers that come with one confidence each, not a distribution.

    Open-ended answers (calm_core.generative) have a confidence c_i (a semantic-cluster
    share, a sequence probability) and a correctness a_i, nothing to take a max over:
    ECE = sum_b (n_b / N) |mean c_b - mean a_b| over the same equal-width bins. A
    confidence below 0.5 stays below 0.5 (unlike `ece`, which bins max_k p_ik).
    Semantic ECE is this with the modal-cluster share (n_bins = 10 as published).
    Example (B = 2): c = [0.2, 0.4, 0.6, 1.0], a = [0, 1, 1, 0] -> bins (0.3, 0.5) and
    (0.8, 0.5) -> ECE = 0.5 * 0.2 + 0.5 * 0.3 = 0.25.
    """
    n_bins = check_positive_int(n_bins, "n_bins")
    return _ece_compute(_bin_table(*check_scores(confidence, correct), n_bins, "uniform"))


def mce(probs: object, labels: object, n_bins: int = 15) -> float:
    """Maximum calibration error: MCE = max_b |conf_b - acc_b| over non-empty bins.

    Same equal-width bins and symbols as `ece`. probs (N, K), labels (N,).
    Example: the B = 4 case in `ece` has gaps .15 and .35 -> MCE = 0.35.
    """
    return _mce_compute(_top_label_table(probs, labels, n_bins, "uniform"))


def rms_ce(probs: object, labels: object, n_bins: int = 15) -> float:
    """RMS calibration error of the top label (Hendrycks et al. 2019, "Using Pre-Training
    Can Improve Model Robustness and Uncertainty"; the l2 calibration error of Kumar et
    al. 2019 with the plug-in binned estimate), over the same equal-width bins as `ece`.

    RMS-CE = sqrt(sum_b (n_b / N) (conf_b - acc_b)^2): the root of the bin-weighted mean
    of squared gaps. Symbols as in `ece`; RMS-CE >= ECE (Jensen), equal when every
    non-empty bin has the same gap. probs (N, K), labels (N,).
    Example: the B = 4 case in `ece` has gaps .15 and .35, each bin half the items
    -> sqrt(.5 * .0225 + .5 * .1225) = sqrt(.0725) = 0.26926.
    """
    return _rms_compute(_top_label_table(probs, labels, n_bins, "uniform"))


def adaptive_ece(probs: object, labels: object, n_bins: int = 15) -> float:
    """Adaptive ECE (Nixon et al. 2019): `ece` with equal-mass bins.

    Edges are the quantiles of the top-label confidences at linspace(0, 1, B+1), so each
    bin holds about N/B items; ECE_ad = sum_b (n_b / N) |conf_b - acc_b|.
    probs (N, K), labels (N,).
    Example (B = 2): confidences [.6, .7, .8, .9] with correct [1, 0, 0, 1]: bins
    {.6, .7} (conf .65, acc .5) and {.8, .9} (conf .85, acc .5) -> .5*.15 + .5*.35 = .25.
    """
    return _ece_compute(_top_label_table(probs, labels, n_bins, "quantile"))


def classwise_ece(probs: object, labels: object, n_bins: int = 15) -> float:
    """Classwise ECE (Kull et al. 2019): mean over the K columns of a per-class ECE.

    cwECE = (1/K) sum_k sum_b (n_kb / N) |conf_kb - acc_kb|, where for class k every item
    contributes the pair (p_ik, 1[y_i = k]) to the equal-width bins b (not only items
    predicted as k). K is the number of columns: a ragged padding column counts, its
    zeros sitting in the first bin with "correct" 0 (never gold).
    probs (N, K), labels (N,).
    Example (B = 1): probs [[.8, .2], [.6, .4]], labels [0, 1]: class 0 pairs (.8, 1),
    (.6, 0): |.7 - .5| = .2; class 1 pairs (.2, 0), (.4, 1): |.3 - .5| = .2 -> 0.2.
    """
    n_bins = check_positive_int(n_bins, "n_bins")
    p, y = check_probs_labels(probs, labels)
    per_class = [
        _ece_compute(_bin_table(p[:, k], (y == k).astype(np.float64), n_bins, "uniform")) for k in range(p.shape[1])
    ]
    return float(np.mean(per_class))
