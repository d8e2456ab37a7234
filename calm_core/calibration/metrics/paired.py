"""Paired bootstrap of per-item score differences: is one variant's score lower than
another's for sure, on these items, or inside the noise?

    table = paired_bootstrap({"base": item_nll(p_base, y), "ts": item_nll(p_ts, y)})
    table["ts"]["base"]       # PairedDifference: mean of ts - base per item, its 90% interval, n
    table["ts"]["base"].lower_for_sure

Two variants scored on the same items are compared item by item: the difference d_i of
their per-item scores (NLL, Brier) is resampled, items drawn with replacement, so what
varies with the items (a hard item is hard for both) cancels and the interval is the
uncertainty of the difference itself, far narrower than two unpaired intervals. Every
variant of one call is resampled with the same items (one seeded draw), so the table is
consistent: the (b, a) entry is the (a, b) one negated.

The settings are declared here once (PAIRED_LEVEL, PAIRED_RESAMPLES, PAIRED_SEED,
MIN_PAIRED_ITEMS); the S_V recommendation (calibration/recommend.py) and the verdict
row's ties (results/verdict.py, through each result row's `paired`) read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from calm_core.calibration.metrics._checks import check_positive_int, fail

PAIRED_LEVEL = 0.90  # the interval's coverage, said with every interval ("90% interval")
PAIRED_RESAMPLES = 2000  # resamples of the items; percentiles at 5% / 95% need a few thousand
PAIRED_SEED = 0  # one fixed seed: the same items give the same interval, in every run and page
# Below this many items the percentile bootstrap sees so few distinct values that its
# interval is too narrow to trust (three items that all favour one side give an interval
# wholly on that side), so no difference is called at all.
MIN_PAIRED_ITEMS = 10
_CHUNK_CELLS = 1_000_000  # resampled indices held at once (8 MB of int64), however many items


@dataclass(frozen=True)
class PairedDifference:
    """The mean per-item difference a - b on n items and its percentile bootstrap interval
    [lo, hi] at `level`. For a score where lower is better, a negative difference favours a."""

    mean: float
    lo: float
    hi: float
    n: int
    level: float = PAIRED_LEVEL

    @property
    def lower_for_sure(self) -> bool:
        """a's score is lower than b's beyond the noise: the whole interval is below zero,
        on enough items to call a difference (MIN_PAIRED_ITEMS)."""
        return self.n >= MIN_PAIRED_ITEMS and self.hi < 0.0

    @property
    def higher_for_sure(self) -> bool:
        """b's score is lower than a's beyond the noise (the mirror of `lower_for_sure`)."""
        return self.n >= MIN_PAIRED_ITEMS and self.lo > 0.0

    @property
    def undecided(self) -> bool:
        """The interval includes no difference (or there are too few items): a tie."""
        return not (self.lower_for_sure or self.higher_for_sure)

    def to_dict(self) -> dict[str, Any]:
        """What results.json records: mean, lo, hi, n, level."""
        return {"mean": self.mean, "lo": self.lo, "hi": self.hi, "n": self.n, "level": self.level}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PairedDifference:
        return cls(float(data["mean"]), float(data["lo"]), float(data["hi"]), int(data["n"]), float(data["level"]))


def paired_bootstrap(
    per_item: Mapping[str, Any],
    level: float = PAIRED_LEVEL,
    n_boot: int = PAIRED_RESAMPLES,
    seed: int = PAIRED_SEED,
) -> dict[str, dict[str, PairedDifference]]:
    """a -> b -> PairedDifference of a - b, for every ordered pair of `per_item`'s variants
    (name -> per-item scores (N,), the same N items in the same order for every variant).

    Draws n_boot index sets of size N with replacement (numpy default_rng(seed).integers(0,
    N, (n_boot, N)), in row chunks of the same stream), takes each variant's mean over each
    index set, and for each pair the (1 - level)/2 and (1 + level)/2 percentiles of the
    difference of those means (= the mean of the resampled per-item differences).
    Example: {"a": [1, 2, 3], "b": [1, 2, 3]} -> a vs b: mean 0, interval [0, 0].
    """
    names, values = _stack(per_item)
    n_boot = check_positive_int(n_boot, "n_boot")
    if not 0.0 < level < 1.0:
        raise fail("level", "to be in (0, 1)", level)
    means = _resampled_means(values, n_boot, seed)  # (V, n_boot)
    alpha = 100.0 * (1.0 - level) / 2.0
    n = values.shape[1]
    table: dict[str, dict[str, PairedDifference]] = {name: {} for name in names}
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if i == j:
                continue
            lo, hi = np.percentile(means[i] - means[j], [alpha, 100.0 - alpha])
            table[a][b] = PairedDifference(float(np.mean(values[i] - values[j])), float(lo), float(hi), n, level)
    return table


def paired_difference(a: Any, b: Any, **options: Any) -> PairedDifference:
    """`paired_bootstrap` of two variants: the difference a - b."""
    return paired_bootstrap({"a": a, "b": b}, **options)["a"]["b"]


def _stack(per_item: Mapping[str, Any]) -> tuple[list[str], np.ndarray]:
    """Names and the (V, N) float64 matrix of per-item scores; one length, finite, N >= 1."""
    names = list(per_item)
    if not names:
        raise fail("per_item", "to name at least one variant", "{}")
    rows = [np.asarray(per_item[name], dtype=np.float64).reshape(-1) for name in names]
    lengths = {len(r) for r in rows}
    if len(lengths) != 1 or 0 in lengths:
        raise fail("per_item", "to hold the same non-zero number of items per variant", sorted(lengths))
    values = np.stack(rows)  # (V, N)
    if not np.all(np.isfinite(values)):
        raise fail("per_item", "to be finite", values[~np.isfinite(values)][0])
    return names, values


def _resampled_means(values: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """(V, n_boot): each variant's mean over each resample, drawing the indices in chunks
    of rows so memory stays bounded on large sets."""
    n = values.shape[1]
    rng = np.random.default_rng(seed)
    rows = max(1, _CHUNK_CELLS // n)
    parts = []
    for start in range(0, n_boot, rows):
        idx = rng.integers(0, n, size=(min(rows, n_boot - start), n))  # (chunk, N)
        parts.append(values[:, idx].mean(axis=2))  # (V, chunk)
    return np.concatenate(parts, axis=1)


def paired_records(per_item: Mapping[str, Any], score: str) -> dict[str, dict[str, Any]]:
    """variant -> the `paired` record of its result row, from one `paired_bootstrap` of
    every variant of a set: {"score": what was compared, "n", "level", "against": {other:
    [mean, lo, hi]}}, the difference being this variant's per-item score minus the other's.
    The verdict row reads it to tell a real difference from a tie (results/verdict.py)."""
    table = paired_bootstrap(per_item)
    return {
        name: {
            "score": score,
            "n": len(np.asarray(per_item[name]).reshape(-1)),
            "level": PAIRED_LEVEL,
            "against": {other: [d.mean, d.lo, d.hi] for other, d in row.items()},
        }
        for name, row in table.items()
    }
