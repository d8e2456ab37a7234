"""Selective answering (calm_core/calibration/selective.py, selective_summary.py): each rule
against a brute-force reference, its refusal, and its guarantee checked by simulation on
a calibrated synthetic forecaster (P(right | confidence c) = c)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from calm_core.calibration import selective
from calm_core.calibration.selective import (
    NEVER,
    TooFewItems,
    binomial_cdf,
    crc_threshold,
    lac_prediction_sets,
    lac_quantile,
    ltt_threshold,
    risk_controlled_threshold,
)
from calm_core.calibration.selective_summary import bootstrap_mean, summarize_selective, wilson


def calibrated(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Confidences from a 4-option model's range and correctness drawn with P(right) = c."""
    c = rng.uniform(0.25, 1.0, size=n)
    return c, (rng.uniform(size=n) < c).astype(float)


# ------------------------------------------------------------------------------ references


def crc_reference(c: np.ndarray, a: np.ndarray, alpha: float) -> float:
    """The paper's rule read literally: every candidate, the smallest that passes."""
    n = len(c)
    for t in sorted(set(c.tolist())):
        risk = sum(1.0 for ci, ai in zip(c, a, strict=True) if ci >= t and ai == 0) / n
        if n / (n + 1) * risk + 1 / (n + 1) <= alpha + 1e-12:
            return t
    return math.inf


def binomial_reference(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


def ltt_reference(c: np.ndarray, a: np.ndarray, alpha: float, delta: float, answered: bool = False) -> float:
    """The fixed sequence written out: each grid threshold from 1 down, its binomial test."""
    chosen, least = math.inf, math.ceil(math.log(delta) / math.log(1 - alpha) - 1e-9)
    for t in np.linspace(1.0, 0.0, 1001):
        above = [ai for ci, ai in zip(c, a, strict=True) if ci >= t]
        tested = len(above) if answered else len(c)
        if tested < least:
            continue
        if binomial_reference(sum(1 for x in above if x == 0), tested, alpha) > delta:
            break
        chosen = float(t)
    return chosen


def lac_reference(p_cal: np.ndarray, y_cal: np.ndarray, p_test: np.ndarray, alpha: float) -> np.ndarray:
    """Full conformal p-values: option k is in the set when (1 + #{i: s_i >= s_k}) / (n + 1) > alpha."""
    scores = 1.0 - p_cal[np.arange(len(y_cal)), y_cal]
    out = np.zeros(p_test.shape, dtype=bool)
    for i, row in enumerate(p_test):
        for k, pk in enumerate(row):
            if not np.isnan(pk):
                out[i, k] = (1 + np.sum(scores >= 1.0 - pk)) / (len(scores) + 1) > alpha
    return out


# ------------------------------------------------------------------------------ crc


def test_crc_worked_example_from_the_docstring() -> None:
    c = np.repeat([0.9, 0.8, 0.7, 0.6], 5)
    a = (c > 0.6).astype(float)
    assert crc_threshold(c, a, 0.3).threshold == 0.6
    assert crc_threshold(c, a, 0.2).threshold == 0.7  # 0.6 would give 6/21 > 0.2


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.2, 0.35])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_crc_matches_the_literal_rule(alpha: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    c, a = calibrated(60, rng)
    c = np.round(c, 2)  # ties among confidences
    got = crc_threshold(c, a, alpha)
    assert got.threshold == crc_reference(c, a, alpha)
    answered = c >= got.threshold
    assert (got.heldout_answered, got.heldout_errors) == (answered.sum(), (answered & (a == 0)).sum())


def test_crc_refuses_too_few_items_with_the_count_it_needs() -> None:
    c, a = calibrated(18, np.random.default_rng(0))
    with pytest.raises(TooFewItems, match="at least 19 held-out items for a target error of 5% on average, but got 18") as caught:
        crc_threshold(c, a, 0.05)
    assert caught.value.needed == 19
    c, a = calibrated(19, np.random.default_rng(0))
    assert crc_threshold(np.ones(19), np.zeros(19), 0.05).threshold == NEVER  # all wrong: answer nothing
    assert crc_threshold(c, a, 0.05).n_heldout == 19


def test_crc_controls_the_expected_error_among_all_items() -> None:
    """E[P(answered and wrong)] <= alpha over held-out draws (a calibrated forecaster, so the
    realised risk of a threshold is known in closed form: int_t^1 (1 - c) dc / 0.75)."""
    rng, alpha = np.random.default_rng(0), 0.1
    risks = []
    for _ in range(2000):
        t = crc_threshold(*calibrated(40, rng), alpha).threshold
        t = min(t, 1.0)
        risks.append(((1 - t) ** 2 / 2) / 0.75)  # P(c >= t and wrong) for c ~ U(0.25, 1)
    mean, se = float(np.mean(risks)), float(np.std(risks) / np.sqrt(len(risks)))
    assert mean <= alpha + 3 * se
    assert mean > alpha - 0.03  # not trivially cautious either: the rule uses its budget


# ------------------------------------------------------------------------------ ltt


@pytest.mark.parametrize(("k", "n", "p"), [(0, 10, 0.1), (3, 20, 0.1), (7, 50, 0.2), (30, 30, 0.5), (1, 300, 0.05)])
def test_binomial_cdf_matches_the_sum_of_terms(k: int, n: int, p: float) -> None:
    assert binomial_cdf(k, n, p) == pytest.approx(binomial_reference(k, n, p), rel=1e-9)


@pytest.mark.parametrize(("alpha", "delta"), [(0.1, 0.1), (0.2, 0.05), (0.3, 0.2)])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("answered", [False, True])
def test_ltt_matches_the_fixed_sequence_written_out(alpha: float, delta: float, seed: int, answered: bool) -> None:
    c, a = calibrated(80, np.random.default_rng(seed))
    got = ltt_threshold(c, a, alpha, delta, answered=answered)
    assert got.threshold == ltt_reference(c, a, alpha, delta, answered)
    assert got.rule == ("ltt-answered" if answered else "ltt")


def test_ltt_refuses_too_few_items() -> None:
    assert selective.ltt_min_items(0.1, 0.1) == 22  # 0.9^22 = 0.098 <= 0.1 < 0.9^21
    with pytest.raises(TooFewItems, match="at least 22"):
        ltt_threshold(np.ones(21), np.ones(21), 0.1, 0.1)
    right = ltt_threshold(np.ones(22), np.ones(22), 0.1, 0.1)
    assert (right.threshold, right.heldout_answered) == (0.0, 22)  # never wrong: every null rejected
    assert ltt_threshold(np.ones(22), np.r_[0.0, np.ones(21)], 0.1, 0.1).threshold == NEVER


def test_ltt_bounds_the_error_among_all_with_probability_one_minus_delta() -> None:
    """P(answered and wrong) of a calibrated U(0.25, 1) forecaster above t is (1 - t)^2 / 1.5."""
    rng, alpha, delta = np.random.default_rng(2), 0.1, 0.1
    over, trials = 0, 1000
    for _ in range(trials):
        t = min(ltt_threshold(*calibrated(100, rng), alpha, delta).threshold, 1.0)
        over += (1 - t) ** 2 / 1.5 > alpha
    assert over / trials <= delta + 3 * math.sqrt(delta * (1 - delta) / trials)
    assert over > 0  # it spends its delta: the bound is not met by a needlessly high threshold


def test_ltt_bounds_the_error_among_answered_with_probability_one_minus_delta() -> None:
    """The selective error of a calibrated U(0.25, 1) forecaster above t is (1 - t) / 2."""
    rng, alpha, delta = np.random.default_rng(1), 0.1, 0.1
    over = answering = 0
    trials = 1000
    for _ in range(trials):
        t = ltt_threshold(*calibrated(400, rng), alpha, delta, answered=True).threshold
        over += (not math.isinf(t)) and (1 - t) / 2 > alpha
        answering += not math.isinf(t)
    assert over / trials <= delta + 3 * math.sqrt(delta * (1 - delta) / trials)
    assert answering / trials > 0.5  # it does answer: the bound is not met by abstaining


def test_risk_controlled_threshold_dispatches_on_delta() -> None:
    c, a = calibrated(50, np.random.default_rng(3))
    assert risk_controlled_threshold(c, a, 0.2).rule == "crc"
    assert risk_controlled_threshold(c, a, 0.2, delta=0.1) == ltt_threshold(c, a, 0.2, 0.1)
    answered = selective.choose_threshold(c, a, 0.2, "ltt-answered", 0.1)
    assert answered == ltt_threshold(c, a, 0.2, 0.1, answered=True)
    with pytest.raises(ValueError, match="Expected `rule` to be one of crc, ltt, ltt-answered"):
        selective.choose_threshold(c, a, 0.2, "magic", 0.1)
    with pytest.raises(ValueError, match=r"Expected `target_error` to be in \(0, 1\), but got 1.5"):
        crc_threshold(c, a, 1.5)


# ------------------------------------------------------------------------------ LAC


def random_probs(n: int, k: int, rng: np.random.Generator, ragged: bool = False) -> tuple[np.ndarray, np.ndarray]:
    z = rng.normal(0, 2, size=(n, k))
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    y = np.array([rng.choice(k, p=row) for row in p])
    if ragged:  # the last option missing for every third item (NaN), its probability spread
        for i in range(0, n, 3):
            p[i, :-1] += p[i, -1] / (k - 1)
            p[i, -1] = np.nan
            y[i] = min(y[i], k - 2)
    return p, y


@pytest.mark.parametrize("coverage", [0.8, 0.9, 0.95])
@pytest.mark.parametrize("ragged", [False, True])
def test_lac_sets_match_full_conformal_p_values(coverage: float, ragged: bool) -> None:
    rng = np.random.default_rng(int(coverage * 100) + ragged)
    p_cal, y_cal = random_probs(50, 4, rng, ragged)
    p_test, _ = random_probs(40, 4, rng, ragged)
    got = lac_prediction_sets(p_cal, y_cal, p_test, coverage)
    np.testing.assert_array_equal(got, lac_reference(p_cal, y_cal, p_test, 1 - coverage))
    assert not got[np.isnan(p_test)].any()


def test_lac_covers_the_gold_option_at_the_asked_rate() -> None:
    rng, hits, total = np.random.default_rng(5), 0, 0
    for _ in range(300):
        p, y = random_probs(60, 4, rng)
        sets = lac_prediction_sets(p[:30], y[:30], p[30:], 0.8)
        hits += int(sets[np.arange(30), y[30:]].sum())
        total += 30
    assert hits / total >= 0.8 - 3 * math.sqrt(0.16 / total)


def test_lac_refuses_too_few_items_and_bad_labels() -> None:
    p, y = random_probs(18, 4, np.random.default_rng(0))
    with pytest.raises(TooFewItems, match="at least 19"):
        lac_quantile(p, y, 0.95)
    with pytest.raises(ValueError, match="Expected `labels_heldout`"):
        lac_quantile(p, y + 4, 0.8)


# ------------------------------------------------------------------------------ summary


def test_wilson_by_hand_and_against_scipy() -> None:
    got = wilson(1, 4)
    assert (got.value, round(got.low, 2), round(got.high, 2)) == (0.25, 0.06, 0.64)
    assert math.isnan(wilson(0, 0).value)
    stats = pytest.importorskip("scipy.stats")
    for k, n in [(0, 10), (3, 14), (50, 100), (14, 14)]:
        ref = stats.binomtest(k, n).proportion_ci(confidence_level=0.9, method="wilson")
        assert (wilson(k, n).low, wilson(k, n).high) == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_bootstrap_mean_is_seeded_and_brackets_the_mean() -> None:
    values = np.random.default_rng(0).integers(1, 5, size=50)
    first, second = bootstrap_mean(values), bootstrap_mean(values)
    assert first == second and first.low <= first.value <= first.high and first.low < first.high


def test_summary_worked_example() -> None:
    """10 items: 4 at confidence 0.9 (one wrong), 6 at 0.5 -> with t = 0.8, 4 answered."""
    probs = np.array([[0.9, 0.1]] * 4 + [[0.5, 0.5]] * 6)
    labels = np.array([0, 0, 0, 1] + [0] * 6)
    got = summarize_selective(probs, labels, 0.8, qhat=0.5)
    assert (got.answered.value, got.error_answered.value, got.error_all.value) == (0.4, 0.25, 0.1)
    assert got.error_answered.n == 4 and got.answered.n == 10
    # sets {k : 1 - p_k <= 0.5}: the 0.9 items hold option 0 alone, the 0.5 items both options
    assert got.set_size.value == pytest.approx((4 * 1 + 6 * 2) / 10)
    assert got.coverage.value == 0.9  # the fourth item's gold (option 1, p = 0.1) is left out
