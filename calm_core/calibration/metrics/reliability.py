"""Reliability diagrams that say how sure they are: bins from the item count, a Wilson
interval on each bin's accuracy, and the ECE that noise alone gives at the same size.

    data = prepare_reliability(confidence, correct)   # equal-mass bins, B from N
    data.to_records()                                  # one dict per bin, for a chart
    noise = noise_ece(confidence)                      # a perfectly calibrated forecaster's ECE
    noise.line()                                       # "ECE from noise alone at 40 items: ..."

Why: 14 items in 15 equal-width bins are mostly one-item bins, each drawn at accuracy 0 or
1 as if it were certain, and an ECE of 0.15 on 40 items can be noise alone (a perfectly
calibrated model shows about that much). `prepare_reliability` computes and the charts
(app/widgets/charts.py, results/report_svg.py) only draw, relplot's split.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from calm_core.calibration.metrics._checks import check_positive_int, check_scores, fail
from calm_core.calibration.metrics.bins import STRATEGIES, _bin_index, _bin_table

LEVEL = 0.9  # the intervals' coverage, as the project's other intervals (metrics.summary, paired)
MIN_BINS, MAX_BINS = 3, 15  # sqrt(N) bins, clamped: 15 is the project's ECE bins, 3 still shows a slope
NOISE_DRAWS = 2000  # forecasts redrawn by noise_ece: enough that its line hardly moves with the seed (tested)
ECE_BINS = 15  # noise_ece's default: the ECE the pages, the tables and results.json report


def auto_bins(n_items: int) -> int:
    """How many equal-mass bins N items get: round(sqrt(N)) within [3, 15], never more
    than N. sqrt(N) bins of sqrt(N) items each balance a bin's noise against the
    diagram's resolution; under about 100 items that is fewer than 10.
    Example: 14 -> 4, 40 -> 6, 100 -> 10, 500 -> 15, 2 -> 2.
    """
    n_items = check_positive_int(n_items, "n_items")
    return min(n_items, max(MIN_BINS, min(MAX_BINS, round(math.sqrt(n_items)))))


def wilson_interval(k: object, n: object, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval of a proportion k / n, elementwise: (lower, upper).

    With p = k / n and z the normal quantile at (1 + level) / 2:
        centre = (p + z^2 / 2n) / (1 + z^2 / n)
        half   = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / 4n^2)
    Unlike p +- z sqrt(p (1 - p) / n), it does not collapse to a point at k = 0 or k = n,
    so a one-item bin at accuracy 1 is drawn as the wide interval it is. n = 0 gives nan.
    Example (level 0.9, z = 1.645): k = 1, n = 1 -> (0.270, 1.0); k = 0, n = 1 -> (0.0, 0.730).
    """
    if not 0.0 < level < 1.0:
        raise fail("level", "in (0, 1)", level)
    k_arr, n_arr = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    z2 = NormalDist().inv_cdf((1.0 + level) / 2) ** 2
    with np.errstate(invalid="ignore", divide="ignore"):  # n = 0 -> nan
        p = k_arr / n_arr
        centre = (p + z2 / (2 * n_arr)) / (1 + z2 / n_arr)
        half = math.sqrt(z2) / (1 + z2 / n_arr) * np.sqrt(p * (1 - p) / n_arr + z2 / (4 * n_arr**2))
    lower = np.where(k_arr == 0, 0.0, np.clip(centre - half, 0.0, 1.0))  # exact ends, not 1e-17 off
    upper = np.where(k_arr == n_arr, 1.0, np.clip(centre + half, 0.0, 1.0))
    empty = n_arr == 0
    return np.where(empty, np.nan, lower), np.where(empty, np.nan, upper)


@dataclass(frozen=True, eq=False)  # eq=False: field-wise == on arrays has no truth value
class ReliabilityData:
    """What a reliability diagram draws, per bin b (arrays (B,), read-only).

    lower, upper: the bin's edges (equal-mass bins span their items' confidences).
    count: items; mean_confidence, accuracy: their means (nan in an empty bin).
    acc_low, acc_high: the Wilson interval of the accuracy at `level` (nan when empty).
    hollow: one-item bins, drawn hollow: their accuracy is 0 or 1 whatever the model.
    strategy: "quantile" (equal mass) or "uniform" (equal width); n_items: N.
    """

    lower: np.ndarray
    upper: np.ndarray
    count: np.ndarray
    mean_confidence: np.ndarray
    accuracy: np.ndarray
    acc_low: np.ndarray
    acc_high: np.ndarray
    strategy: str
    level: float

    def __post_init__(self) -> None:
        for arr in (
            self.lower,
            self.upper,
            self.count,
            self.mean_confidence,
            self.accuracy,
            self.acc_low,
            self.acc_high,
        ):
            arr.setflags(write=False)

    @property
    def n_bins(self) -> int:
        """Number of bins B drawn."""
        return len(self.count)

    @property
    def n_items(self) -> int:
        """Number of items N."""
        return int(self.count.sum())

    @property
    def hollow(self) -> np.ndarray:
        """(B,) bool: the bin holds exactly one item."""
        return self.count == 1

    def to_records(self) -> list[dict[str, Any]]:
        """One JSON-ready dict per bin: lower, upper, count, mean_confidence, accuracy, gap
        (mean_confidence - accuracy), acc_low, acc_high, hollow; None for an empty bin's means."""

        def num(x: float) -> float | None:
            return None if np.isnan(x) else float(x)

        return [
            {
                "lower": float(self.lower[b]),
                "upper": float(self.upper[b]),
                "count": int(self.count[b]),
                "mean_confidence": num(self.mean_confidence[b]),
                "accuracy": num(self.accuracy[b]),
                "gap": num(self.mean_confidence[b] - self.accuracy[b]),
                "acc_low": num(self.acc_low[b]),
                "acc_high": num(self.acc_high[b]),
                "hollow": bool(self.count[b] == 1),
            }
            for b in range(self.n_bins)
        ]


def prepare_reliability(
    confidence: object, correct: object, n_bins: int | None = None, strategy: str = "quantile", level: float = LEVEL
) -> ReliabilityData:
    """The bins of a reliability diagram with an interval on each bin's accuracy.

    confidence, correct: (N,) in [0, 1] (correct 0/1). n_bins: B, by default `auto_bins(N)`.
    strategy: "quantile" (default: equal-mass bins, so no bin is left with one item by
    chance of where the confidences fall) or "uniform" (the ECE's equal-width bins, empty
    ones kept so the chart can mark them). Equal-mass bins that tied confidences leave
    empty are dropped. Each bin: mean confidence, accuracy k / n, count n, Wilson interval.
    Example: 14 items -> 4 equal-mass bins of 3 or 4 items; the same 14 in 15 uniform bins
    -> mostly one-item bins, flagged `hollow`.
    """
    c, a = check_scores(confidence, correct)
    if strategy not in STRATEGIES:
        raise fail("strategy", f"to be one of {STRATEGIES}", repr(strategy))
    n_bins = auto_bins(len(c)) if n_bins is None else check_positive_int(n_bins, "n_bins")
    table = _bin_table(c, a, n_bins, strategy)
    keep = np.ones(n_bins, dtype=bool) if strategy == "uniform" else table.counts > 0  # (B,)
    counts = table.counts[keep]
    low, high = wilson_interval(table.accuracy[keep] * counts, counts, level)
    return ReliabilityData(
        lower=table.edges[:-1][keep].copy(),
        upper=table.edges[1:][keep].copy(),
        count=counts.copy(),
        mean_confidence=table.mean_confidence[keep].copy(),
        accuracy=table.accuracy[keep].copy(),
        acc_low=low,
        acc_high=high,
        strategy=strategy,
        level=level,
    )


@dataclass(frozen=True)
class NoiseECE:
    """The ECE a perfectly calibrated forecaster shows at given confidences: its median
    over `n_draws` redraws and `upper`, the value `level` of the draws stay at or under."""

    median: float
    upper: float
    n_items: int
    n_bins: int
    strategy: str
    n_draws: int
    level: float

    def line(self) -> str:
        """The sentence under a diagram: the pages and the report say it in these words."""
        return (
            f"ECE from noise alone at {self.n_items} items: median {self.median:.3f} "
            f"({self.level:.0%} of draws up to {self.upper:.3f})"
        )

    def sentence(self, ece: float) -> str:
        """The line and where an observed ECE stands against it (the pages' and the report's words)."""
        return f"{self.line()}; this ECE, {ece:.3f}, is {'within' if self.within(ece) else 'beyond'} that"

    def within(self, ece: float) -> bool:
        """Whether an observed ECE is one that noise alone gives `level` of the time."""
        return ece <= self.upper


def noise_ece(
    confidence: object,
    n_bins: int = ECE_BINS,
    strategy: str = "uniform",
    n_draws: int = NOISE_DRAWS,
    seed: int = 0,
    level: float = LEVEL,
) -> NoiseECE:
    """The ECE that sampling noise alone gives at these confidences and this size.

    A perfectly calibrated forecaster is right with probability c_i on item i: draw
    a_i ~ Bernoulli(c_i) for every item, compute the ECE of (c, a) with the same bins as
    the reported ECE (default: 15 equal-width, `ece`), repeat `n_draws` times. An observed
    ECE at or under `upper` is one that a calibrated model shows `level` of the time.
    Cached by its inputs: a page redrawn with the same confidences does not redraw.
    confidence: (N,) in [0, 1]. Example: 40 confidences of 0.8 give a median near
    E|k/40 - 0.8| for k ~ Binomial(40, 0.8), about 0.05.
    """
    c, _ = check_scores(
        confidence, np.zeros(np.shape(np.asarray(confidence, dtype=object)))
    )  # correctness is what gets drawn
    n_bins, n_draws = check_positive_int(n_bins, "n_bins"), check_positive_int(n_draws, "n_draws")
    if strategy not in STRATEGIES:
        raise fail("strategy", f"to be one of {STRATEGIES}", repr(strategy))
    if not 0.0 < level < 1.0:
        raise fail("level", "in (0, 1)", level)
    return _noise_ece_cached(c.tobytes(), n_bins, strategy, n_draws, int(seed), float(level))


@functools.lru_cache(maxsize=256)
def _noise_ece_cached(c_bytes: bytes, n_bins: int, strategy: str, n_draws: int, seed: int, level: float) -> NoiseECE:
    c = np.frombuffer(c_bytes, dtype=np.float64)  # (N,)
    eces = _noise_draws(c, n_bins, strategy, n_draws, seed)  # (D,)
    median, upper = np.quantile(eces, [0.5, level])
    return NoiseECE(float(median), float(upper), len(c), n_bins, strategy, n_draws, level)


def _noise_draws(c: np.ndarray, n_bins: int, strategy: str, n_draws: int, seed: int) -> np.ndarray:
    """ECE of each redraw (D,): the bins depend on c alone, so they are fixed once and
    each draw's ECE is sum_b |sum_{i in b} c_i - sum_{i in b} a_i| / N."""
    _, idx = _bin_index(c, n_bins, strategy)  # (N,)
    onehot = np.zeros((len(c), n_bins))
    onehot[np.arange(len(c)), idx] = 1.0  # (N, B)
    conf_sums = c @ onehot  # (B,)
    rng = np.random.default_rng(seed)
    chunk = max(1, 2_000_000 // len(c))  # draws per block: a (chunk, N) block stays under ~16 MB
    out = []
    for start in range(0, n_draws, chunk):
        draws = (rng.random((min(chunk, n_draws - start), len(c))) < c).astype(np.float64)  # (D', N)
        out.append(np.abs(conf_sums[None, :] - draws @ onehot).sum(axis=1) / len(c))  # (D',)
    return np.concatenate(out)
