"""What a threshold and a set rule do on items they were not chosen on: the answered
fraction, the error among answered items, the error among all items (answered and wrong),
the LAC sets' coverage and mean size, each with a 90% interval.

Proportions get Wilson score intervals (they stay inside [0, 1] and are not empty at 0 or
n successes, unlike the normal approximation on a small set); the mean set size, which is
not a proportion, gets a percentile bootstrap over items.

Example: 10 items, 4 answered, 1 of them wrong -> answered 0.4, error among answered 0.25
(its Wilson interval over 4 items is wide: about 0.06 to 0.64), error among all 0.1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from calm_core.calibration.selective import prediction_sets

LEVEL = 0.9  # every interval of a selective summary (the project's results tables use 90% too)
N_BOOT = 1000  # bootstrap resamples of the mean set size
SEED = 0


@dataclass(frozen=True)
class Estimate:
    """A rate or mean with its interval; `n` is the count it was measured on (its denominator)."""

    value: float
    low: float
    high: float
    n: int

    def to_dict(self) -> dict[str, float | int | None]:
        """JSON-ready: nothing measured (nan) is None."""
        return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in self.__dict__.items()}


def wilson(successes: int, n: int, level: float = LEVEL) -> Estimate:
    """The Wilson score interval of successes / n: center (p + z^2/2n) / (1 + z^2/n), half
    width z / (1 + z^2/n) * sqrt(p(1 - p)/n + z^2/4n^2). n = 0 gives nan (nothing measured)."""
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    if not 0 <= successes <= n:
        raise ValueError(f"Expected `successes` in [0, {n}], but got {successes}")
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    p, z2 = successes / n, z * z
    center = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return Estimate(p, max(0.0, center - half), min(1.0, center + half), n)


def bootstrap_mean(values: np.ndarray, level: float = LEVEL, n_boot: int = N_BOOT, seed: int = SEED) -> Estimate:
    """The mean of `values` with its percentile bootstrap interval (items resampled)."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if len(v) == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    idx = np.random.default_rng(seed).integers(0, len(v), size=(n_boot, len(v)))  # (n_boot, N)
    means = v[idx].mean(axis=1)  # (n_boot,)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return Estimate(float(v.mean()), float(low), float(high), len(v))


@dataclass(frozen=True)
class SelectiveSummary:
    """One variant on one set under a threshold (and LAC's qhat when sets were asked for)."""

    n: int
    answered: Estimate  # answered / n
    error_answered: Estimate  # wrong / answered (nan when nothing is answered)
    error_all: Estimate  # answered and wrong / n: what `crc` controls
    coverage: Estimate | None  # gold in set / n
    set_size: Estimate | None  # mean options per set

    def to_dict(self) -> dict[str, object]:
        return {key: value.to_dict() if isinstance(value, Estimate) else value for key, value in self.__dict__.items()}


def top_label(probs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(confidence (N,), correct (N,)) of the most probable option; NaN options never win."""
    p = np.where(np.isnan(probs), -np.inf, probs)
    return p.max(axis=1), (p.argmax(axis=1) == np.asarray(labels)).astype(np.float64)


def summarize_selective(probs: object, labels: object, threshold: float, qhat: float | None = None) -> SelectiveSummary:
    """The summary of `threshold` (answer when confidence >= it) and, with `qhat`, of the
    LAC sets {k : 1 - p_k <= qhat}, on items with option probabilities `probs` (N, K; NaN
    for a missing option) and gold `labels` (N,)."""
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels).reshape(-1).astype(int)
    confidence, correct = top_label(p, y)
    answered = confidence >= threshold
    n, n_answered = len(y), int(answered.sum())
    wrong = int((answered & (correct == 0.0)).sum())
    coverage = set_size = None
    if qhat is not None:
        sets = prediction_sets(p, qhat)  # (N, K)
        coverage = wilson(int(sets[np.arange(n), y].sum()), n)
        set_size = bootstrap_mean(sets.sum(axis=1))
    return SelectiveSummary(n, wilson(n_answered, n), wilson(wrong, n_answered), wilson(wrong, n), coverage, set_size)
