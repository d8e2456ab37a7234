"""Top-label confidences and the bin table behind ECE, MCE and reliability diagrams.

`top_label` is the update stage of every top-label metric: (probs, labels) ->
(confidence, correct). `bin_confidences` groups those pairs into a `BinTable`, which
the ECE family reduces to a number and the studio draws as a reliability diagram.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from calm_core.calibration.metrics._checks import check_positive_int, check_probs_labels, check_scores, fail

STRATEGIES = ("uniform", "quantile")


@dataclass(frozen=True, eq=False)  # eq=False: field-wise == on arrays has no truth value
class BinTable:
    """Per-bin statistics of (confidence, correct) pairs; arrays are read-only.

    edges (B+1,): bin boundaries; bin i is (edges[i], edges[i+1]], the first bin also
        holds confidence == edges[0].
    counts (B,): items per bin.  mean_confidence, accuracy (B,): bin means, nan if empty.
    strategy: "uniform" (equal width on [0, 1]) or "quantile" (equal mass).
    """

    edges: np.ndarray
    counts: np.ndarray
    mean_confidence: np.ndarray
    accuracy: np.ndarray
    strategy: str

    def __post_init__(self) -> None:
        for arr in (self.edges, self.counts, self.mean_confidence, self.accuracy):
            arr.setflags(write=False)

    @property
    def n_bins(self) -> int:
        """Number of bins B."""
        return len(self.counts)

    @property
    def gap(self) -> np.ndarray:
        """mean_confidence - accuracy (B,): positive = over-confident, nan if empty."""
        return np.asarray(self.mean_confidence - self.accuracy)

    def to_records(self) -> list[dict[str, Any]]:
        """One JSON-ready dict per bin: lower, upper, count, mean_confidence, accuracy,
        gap (= mean_confidence - accuracy); the last three are None for an empty bin."""

        def num(x: float) -> float | None:
            return None if np.isnan(x) else float(x)

        return [
            {
                "lower": float(self.edges[i]),
                "upper": float(self.edges[i + 1]),
                "count": int(self.counts[i]),
                "mean_confidence": num(self.mean_confidence[i]),
                "accuracy": num(self.accuracy[i]),
                "gap": num(self.gap[i]),
            }
            for i in range(self.n_bins)
        ]


def top_label(probs: object, labels: object) -> tuple[np.ndarray, np.ndarray]:
    """Confidence c_i = max_k p_ik and correctness a_i = 1[argmax_k p_ik = y_i].

    probs (N, K) rows summing to 1, labels (N,) ints in [0, K). Returns two float64
    arrays (N,). Ties go to the first maximal column (numpy argmax).
    Example: probs [[0.7, 0.3], [0.4, 0.6]], labels [0, 0] -> ([0.7, 0.6], [1.0, 0.0]).
    """
    return _top_label_update(*check_probs_labels(probs, labels))


def _top_label_update(p: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pred = p.argmax(axis=1)  # (N,), first index on ties
    return p[np.arange(len(y)), pred], (pred == y).astype(np.float64)


def bin_confidences(confidence: object, correct: object, n_bins: int = 15, strategy: str = "uniform") -> BinTable:
    """Group (confidence, correct) pairs into B = n_bins bins.

    Bin i holds c in (e_i, e_{i+1}]; c == e_0 goes into the first bin, so with the
    "uniform" edges e_i = i / B a confidence of exactly 0.0 lands in bin 0
    and exactly 1.0 in bin B-1 (it counts; it is not dropped or given a bin of its own).
    "quantile" edges are the empirical quantiles of c at linspace(0, 1, B+1) (linear
    interpolation), giving equal-mass bins whose counts differ by at most 1 when the
    confidences are distinct. Empty bins have nan means.
    confidence, correct: (N,) values in [0, 1] (correct is usually 0/1).
    Example: c = [0.2, 0.4, 0.6, 1.0], a = [0, 1, 1, 0], B = 2 -> counts [2, 2],
    mean_confidence [0.3, 0.8], accuracy [0.5, 0.5].
    """
    n_bins = check_positive_int(n_bins, "n_bins")
    if strategy not in STRATEGIES:
        raise fail("strategy", f"to be one of {STRATEGIES}", repr(strategy))
    c, a = check_scores(confidence, correct)
    return _bin_table(c, a, n_bins, strategy)


def _bin_index(c: np.ndarray, n_bins: int, strategy: str) -> tuple[np.ndarray, np.ndarray]:
    """(edges (B+1,), each confidence's bin (N,)): the binning alone, so a bootstrap that
    redraws only the correctness (reliability.noise_ece) bins the confidences once."""
    if strategy == "uniform":
        edges = np.arange(n_bins + 1) / n_bins  # i / B correctly rounded: 0.3 is an edge exactly
    else:
        edges = np.quantile(c, np.linspace(0.0, 1.0, n_bins + 1))
    # searchsorted(side="left") returns i+1 for c in (e_i, e_{i+1}]; clip puts e_0 in bin 0
    return edges, np.clip(np.searchsorted(edges, c, side="left") - 1, 0, n_bins - 1)


def _bin_table(c: np.ndarray, a: np.ndarray, n_bins: int, strategy: str) -> BinTable:
    edges, idx = _bin_index(c, n_bins, strategy)  # (B+1,), (N,)
    counts = np.bincount(idx, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):  # empty bins -> nan
        conf = np.bincount(idx, weights=c, minlength=n_bins) / counts
        acc = np.bincount(idx, weights=a, minlength=n_bins) / counts
    return BinTable(edges, counts, conf, acc, strategy)
