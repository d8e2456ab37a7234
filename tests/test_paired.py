"""The paired bootstrap of per-item score differences (calm_core/calibration/metrics/paired.py):
the same numbers as a direct numpy computation at a fixed seed, no difference for identical
inputs, a consistent table, and no call on too few items."""

from __future__ import annotations

import numpy as np
import pytest

from calm_core.calibration import metrics
from calm_core.calibration.metrics.paired import (
    MIN_PAIRED_ITEMS,
    PAIRED_LEVEL,
    PAIRED_RESAMPLES,
    PAIRED_SEED,
    PairedDifference,
    paired_bootstrap,
    paired_difference,
    paired_records,
)


def _direct(a: np.ndarray, b: np.ndarray, level: float = PAIRED_LEVEL, n_boot: int = PAIRED_RESAMPLES,
            seed: int = PAIRED_SEED) -> tuple[float, float, float]:
    """The textbook paired percentile bootstrap, written out in numpy."""
    d = a - b
    idx = np.random.default_rng(seed).integers(0, len(d), size=(n_boot, len(d)))
    lo, hi = np.percentile(d[idx].mean(axis=1), [50 * (1 - level), 50 * (1 + level)])
    return float(d.mean()), float(lo), float(hi)


@pytest.mark.parametrize("n", [24, 1500])  # 1500: the indices are drawn in several chunks
def test_it_is_the_direct_numpy_computation_at_a_fixed_seed(n: int) -> None:
    rng = np.random.default_rng(7)
    a, b = rng.exponential(1.0, n), rng.exponential(1.1, n)
    got = paired_difference(a, b)
    assert (got.n, got.level) == (n, PAIRED_LEVEL)
    np.testing.assert_allclose((got.mean, got.lo, got.hi), _direct(a, b), rtol=0, atol=1e-12)
    np.testing.assert_allclose(_direct(a, b, 0.8, 500, 3)[1:],
                               (lambda d: (d.lo, d.hi))(paired_difference(a, b, level=0.8, n_boot=500, seed=3)),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_identical_inputs_give_an_interval_containing_zero(seed: int) -> None:
    a = np.random.default_rng(seed).exponential(1.0, 30)
    same = paired_difference(a, a.copy())
    assert same.lo <= 0.0 <= same.hi and same.mean == 0.0
    assert same.undecided and not same.lower_for_sure and not same.higher_for_sure


def test_the_table_is_consistent_and_the_pair_shares_its_resamples() -> None:
    rng = np.random.default_rng(1)
    scores = {"base": rng.exponential(1.0, 50), "ts": rng.exponential(0.8, 50), "calm": rng.exponential(0.9, 50)}
    table = paired_bootstrap(scores)
    for a in scores:
        assert set(table[a]) == set(scores) - {a}
        for b in table[a]:
            ab, ba = table[a][b], table[b][a]
            np.testing.assert_allclose((ab.mean, ab.lo, ab.hi), (-ba.mean, -ba.hi, -ba.lo), atol=1e-12)
    # one draw for the whole table: a pair in it is the pair on its own
    alone = paired_difference(scores["ts"], scores["base"])
    np.testing.assert_allclose((alone.lo, alone.hi), (table["ts"]["base"].lo, table["ts"]["base"].hi), atol=1e-12)


def test_a_clear_difference_is_called_and_too_few_items_never_are() -> None:
    rng = np.random.default_rng(2)
    base = rng.exponential(1.0, 200)
    better = paired_difference(base - 0.3, base + rng.normal(0, 0.1, 200))
    assert better.lower_for_sure and better.hi < 0 and not better.undecided
    few = MIN_PAIRED_ITEMS - 1
    small = paired_difference(np.zeros(few), np.ones(few))  # every item favours a, by 1
    assert small.hi < 0 and not small.lower_for_sure and small.undecided


def test_records_and_round_trip() -> None:
    scores = {"a": [0.1, 0.2, 0.3], "b": [0.2, 0.2, 0.2]}
    records = paired_records(scores, "top-label Brier")
    assert records["a"]["score"] == "top-label Brier" and records["a"]["n"] == 3
    mean, lo, hi = records["a"]["against"]["b"]
    assert mean == pytest.approx(0.0) and lo <= hi
    d = paired_difference(*scores.values())
    assert PairedDifference.from_dict(d.to_dict()) == d


def test_bad_inputs_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="same non-zero number of items"):
        paired_difference([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="to be finite"):
        paired_difference([1.0, np.inf], [1.0, 2.0])
    with pytest.raises(ValueError, match="level"):
        paired_difference([1.0], [1.0], level=1.0)
    assert metrics.paired_difference is paired_difference  # exported where the metrics are
