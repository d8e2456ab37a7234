"""Tests for calm_core.calibration.metrics: each metric against an independent reference
(torchmetrics, scikit-learn, scipy, relplot, naive Python loops) over shared seeded
fixtures, hand-worked cases, named edge cases and the validation messages.

Run: .venv/bin/python -m pytest tests/test_metrics.py -q
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import relplot
import scipy.special
import scipy.stats
import torch
from sklearn.metrics import accuracy_score, brier_score_loss, log_loss, roc_auc_score
from torchmetrics.functional.classification import (
    binary_calibration_error,
    multiclass_calibration_error,
)

from calm_core.calibration.metrics.columns import by_name
from calm_core.calibration.metrics import (
    BinTable,
    accuracy,
    adaptive_ece,
    aurc,
    auroc,
    bin_confidences,
    bootstrap_ci,
    brier,
    classwise_ece,
    confidence_aurc,
    ece,
    entropy,
    mce,
    mean_confidence,
    mean_entropy,
    nll,
    rms_ce,
    smooth_ece,
    softmax,
    summarize,
    top_label,
)
from calm_core.calibration.metrics.smooth import _smece_at

N_BINS = [1, 10, 15]


# --------------------------------------------------------------------------- fixtures
def make_case(n: int, k: int, seed: int, ragged: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Dirichlet probs (n, k) and labels drawn from a flatter distribution, so the model
    is over-confident but informative. ragged: random rows keep only their first 2..k-1
    options, the rest are zero-probability padding (never gold)."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(k, 0.7), size=n)
    if ragged:
        n_opts = rng.integers(2, k + 1, size=n)  # (n,)
        p = np.where(np.arange(k)[None, :] < n_opts[:, None], p, 0.0)
        p /= p.sum(axis=1, keepdims=True)
    q = p**0.6
    q /= q.sum(axis=1, keepdims=True)
    y = np.array([rng.choice(k, p=row) for row in q])
    return p, y


CASES = {
    "n40-k2": (40, 2, 0, False),
    "n300-k4": (300, 4, 1, False),
    "n1000-k10": (1000, 10, 2, False),
    "n200-k5-ragged": (200, 5, 3, True),
}


@pytest.fixture(params=list(CASES), scope="module")
def case(request) -> tuple[np.ndarray, np.ndarray]:
    return make_case(*CASES[request.param])


@pytest.fixture(params=N_BINS, ids=lambda b: f"bins{b}")
def n_bins(request) -> int:
    return request.param


# ------------------------------------------------------------------------ references
def naive_binned(conf, correct, lowers, uppers):
    """Python-loop bins (lo, hi], the first also holding conf == its lower edge.
    Returns (ECE, MCE) over the non-empty bins."""
    n, total, worst = len(conf), 0.0, 0.0
    for b, (lo, hi) in enumerate(zip(lowers, uppers)):
        members = [i for i in range(n) if lo < conf[i] <= hi or (b == 0 and conf[i] == lo)]
        if members:
            gap = abs(sum(conf[i] for i in members) / len(members)
                      - sum(correct[i] for i in members) / len(members))
            total += len(members) / n * gap
            worst = max(worst, gap)
    return total, worst


def naive_uniform(conf, correct, n_bins):
    return naive_binned(conf, correct, [b / n_bins for b in range(n_bins)],
                        [(b + 1) / n_bins for b in range(n_bins)])


def naive_quantile_edges(conf, n_bins):
    """Order statistics interpolated by hand at positions j (N-1) / B."""
    s = sorted(conf)
    edges = []
    for j in range(n_bins + 1):
        pos = j * (len(s) - 1) / n_bins
        lo = int(math.floor(pos))
        hi = min(lo + 1, len(s) - 1)
        edges.append(s[lo] + (pos - lo) * (s[hi] - s[lo]))
    return edges


def naive_top_label(p, y):
    conf, correct = [], []
    for row, gold in zip(p.tolist(), y.tolist()):
        best = max(range(len(row)), key=lambda k: (row[k], -k))  # first index on ties
        conf.append(row[best])
        correct.append(1.0 if best == gold else 0.0)
    return conf, correct


def naive_aurc(conf, correct):
    """Risk-coverage loop: position k (sorted by confidence, highest first) keeps every
    item at least as confident as the k-th one, so a tie group is always kept whole."""
    n, total = len(conf), 0.0
    for t in sorted(conf, reverse=True):
        kept = [i for i in range(n) if conf[i] >= t]
        total += sum(1.0 - correct[i] for i in kept) / len(kept)
    return total / n


# ------------------------------------------------------------- against references
def test_top_label_matches_loop(case):
    p, y = case
    conf, correct = top_label(p, y)
    ref_conf, ref_correct = naive_top_label(p, y)
    np.testing.assert_allclose(conf, ref_conf, rtol=0, atol=0)
    np.testing.assert_array_equal(correct, ref_correct)


def float32_sum_noise(n: int) -> float:
    """How far torchmetrics' calibration error can lie from ours: it casts the confidences
    to float32 and sums each bin's (n in all, each <= 1). A float32 sum of n_b terms is off
    by about sqrt(n_b) (eps32 / 2) of its total (independent roundings add like a random
    walk), so a bin's mean confidence by about sqrt(n_b) eps32 / 2, and ECE (the bins
    weighed by n_b / n) and MCE (the worst bin) by at most sqrt(n) eps32 / 2; eps32 rather
    than eps32 / 2 covers the cast and the division. 3.8e-6 for n = 1000, where a fixed
    1e-6 was below the rounding (seen: 1.5e-7)."""
    return math.sqrt(n) * torch.finfo(torch.float32).eps


def test_ece_matches_torchmetrics(case, n_bins):
    p, y = case
    ref = multiclass_calibration_error(torch.tensor(p), torch.tensor(y), num_classes=p.shape[1],
                                       n_bins=n_bins, norm="l1").item()
    assert ece(p, y, n_bins) == pytest.approx(ref, abs=float32_sum_noise(len(y)))  # torchmetrics works in float32


def test_mce_matches_torchmetrics(case, n_bins):
    p, y = case
    ref = multiclass_calibration_error(torch.tensor(p), torch.tensor(y), num_classes=p.shape[1],
                                       n_bins=n_bins, norm="max").item()
    assert mce(p, y, n_bins) == pytest.approx(ref, abs=float32_sum_noise(len(y)))


def test_ece_and_mce_match_naive_loop(case, n_bins):
    p, y = case
    ref_ece, ref_mce = naive_uniform(*naive_top_label(p, y), n_bins)
    assert ece(p, y, n_bins) == pytest.approx(ref_ece, abs=1e-12)
    assert mce(p, y, n_bins) == pytest.approx(ref_mce, abs=1e-12)


def naive_rms(conf, correct, n_bins):
    """RMS calibration error by hand: for each equal-width bin (lo, hi] (the first also
    holding conf == 0), the squared gap between mean confidence and accuracy, weighted
    by the bin's share of the items; the root of that sum."""
    n, total = len(conf), 0.0
    for b in range(n_bins):
        lo, hi = b / n_bins, (b + 1) / n_bins
        members = [i for i in range(n) if lo < conf[i] <= hi or (b == 0 and conf[i] == lo)]
        if members:
            gap = sum(conf[i] for i in members) / len(members) - sum(correct[i] for i in members) / len(members)
            total += len(members) / n * gap * gap
    return math.sqrt(total)


def test_rms_ce_matches_naive_loop(case, n_bins):
    p, y = case
    assert rms_ce(p, y, n_bins) == pytest.approx(naive_rms(*naive_top_label(p, y), n_bins), abs=1e-12)


def test_rms_ce_matches_torchmetrics_l2(case, n_bins):
    """torchmetrics' norm="l2" is the published definition: sqrt(sum_b (n_b/N) (acc_b - conf_b)^2)."""
    p, y = case
    ref = multiclass_calibration_error(torch.tensor(p), torch.tensor(y), num_classes=p.shape[1],
                                       n_bins=n_bins, norm="l2").item()
    assert rms_ce(p, y, n_bins) == pytest.approx(ref, abs=float32_sum_noise(len(y)))


def test_rms_ce_is_at_least_ece_and_at_most_mce(case, n_bins):
    p, y = case
    assert ece(p, y, n_bins) - 1e-12 <= rms_ce(p, y, n_bins) <= mce(p, y, n_bins) + 1e-12


def test_adaptive_ece_matches_naive_quantile_loop(case, n_bins):
    p, y = case
    conf, correct = naive_top_label(p, y)
    edges = naive_quantile_edges(conf, n_bins)
    ref, _ = naive_binned(conf, correct, edges[:-1], edges[1:])
    assert adaptive_ece(p, y, n_bins) == pytest.approx(ref, abs=1e-12)


def test_quantile_bins_have_equal_mass(case, n_bins):
    conf, correct = top_label(*case)  # Dirichlet confidences are distinct
    table = bin_confidences(conf, correct, n_bins, strategy="quantile")
    assert table.counts.sum() == len(conf)
    assert table.counts.max() - table.counts.min() <= 1


def test_classwise_ece_matches_torchmetrics_binary(case, n_bins):
    p, y = case
    per_class = [binary_calibration_error(torch.tensor(p[:, k]), torch.tensor((y == k).astype(int)),
                                          n_bins=n_bins, norm="l1").item()
                 for k in range(p.shape[1])]
    assert classwise_ece(p, y, n_bins) == pytest.approx(np.mean(per_class), abs=1e-6)


def test_brier_matches_sklearn(case):
    p, y = case
    # multiclass Brier sums over k; scale_by_half=False stops sklearn halving it when K = 2
    ref = brier_score_loss(y, p, labels=list(range(p.shape[1])), scale_by_half=False)
    assert brier(p, y) == pytest.approx(ref, abs=1e-12)


def test_nll_matches_sklearn(case):
    p, y = case
    assert nll(p, y) == pytest.approx(log_loss(y, p, labels=list(range(p.shape[1]))), abs=1e-9)


def test_accuracy_matches_sklearn(case):
    p, y = case
    assert accuracy(p, y) == pytest.approx(accuracy_score(y, p.argmax(axis=1)), abs=0)


def test_auroc_matches_sklearn(case):
    p, y = case
    conf, correct = top_label(p, y)
    assert auroc(p, y) == pytest.approx(roc_auc_score(correct, conf), abs=1e-12)


def test_auroc_matches_sklearn_with_many_ties():
    rng = np.random.default_rng(7)
    conf = rng.choice([0.5, 0.6, 0.8], size=200)  # heavy ties in the score
    p = np.stack([conf, 1 - conf], axis=1)
    y = rng.integers(0, 2, size=200)
    _, correct = top_label(p, y)
    assert auroc(p, y) == pytest.approx(roc_auc_score(correct, conf), abs=1e-12)


def test_aurc_matches_naive_loop(case):
    p, y = case
    assert aurc(p, y) == pytest.approx(naive_aurc(*naive_top_label(p, y)), abs=1e-12)


@pytest.mark.parametrize("n", [1, 7, 60, 400])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_confidence_aurc_matches_naive_loop_with_many_ties(seed, n):
    rng = np.random.default_rng(seed)
    conf = np.round(rng.random(n), 1)  # 11 distinct values: heavy ties once n > 11
    correct = (rng.random(n) < conf).astype(float)
    assert confidence_aurc(conf, correct) == pytest.approx(naive_aurc(conf.tolist(), correct.tolist()),
                                                           abs=1e-12)
    # the same through probs: K = 2 rows [c, 1 - c] with c >= .5 have top-label confidence c
    c2 = np.round(0.5 + 0.5 * rng.random(n), 1)
    y = rng.integers(0, 2, size=n)
    p = np.stack([c2, 1.0 - c2], axis=1)
    assert aurc(p, y) == pytest.approx(naive_aurc(*naive_top_label(p, y)), abs=1e-12)


def test_entropy_matches_scipy(case):
    p, _ = case
    np.testing.assert_allclose(entropy(p), scipy.stats.entropy(p, axis=1), atol=1e-12)
    assert mean_entropy(p) == pytest.approx(scipy.stats.entropy(p, axis=1).mean(), abs=1e-12)


def test_mean_confidence_matches_loop(case):
    p, y = case
    assert mean_confidence(p) == pytest.approx(np.mean(naive_top_label(p, y)[0]), abs=1e-12)


def test_smooth_ece_matches_relplot(case):
    p, y = case
    f, a = relplot.multiclass_logits_to_confidences(p, y, probs=True)
    assert smooth_ece(p, y) == pytest.approx(relplot.smECE(f, a), abs=1e-6)


# sigma = 20/2002 and 20/4006 give an even kernel grid (m = 1002, 2004): the off-centre slice
@pytest.mark.parametrize("sigma", [20 / 2002, 20 / 4006, 0.003, 0.05, 0.2, 0.7])
def test_smooth_ece_at_fixed_sigma_matches_relplot(sigma):
    rng = np.random.default_rng(11)
    f = rng.random(300)
    a = (rng.random(300) < f**2).astype(float)  # over-confident
    assert _smece_at(f, f - a, sigma) == pytest.approx(relplot.smECE_sigma(f, a, sigma), abs=1e-9)


def test_softmax_matches_scipy():
    z = np.random.default_rng(5).normal(size=(6, 4)) * 5
    np.testing.assert_allclose(softmax(z), scipy.special.softmax(z, axis=-1), atol=1e-15)
    np.testing.assert_allclose(softmax(z, axis=0), scipy.special.softmax(z, axis=0), atol=1e-15)


# ----------------------------------------------------------------- hand-worked cases
# probs [[.6,.4],[.3,.7],[.8,.2],[.1,.9]], labels [0,0,1,1]:
# confidences .6 .7 .8 .9, correct 1 0 0 1.
HAND_P = np.array([[0.6, 0.4], [0.3, 0.7], [0.8, 0.2], [0.1, 0.9]])
HAND_Y = np.array([0, 0, 1, 1])


def test_ece_hand_4_items_4_bins():
    # bins (.5,.75]: {.6,.7} conf .65 acc .5 gap .15; (.75,1]: {.8,.9} conf .85 acc .5 gap .35
    # ECE = .5*.15 + .5*.35 = .25
    assert ece(HAND_P, HAND_Y, n_bins=4) == pytest.approx(0.25)


def test_ece_hand_4_items_1_bin():
    # one bin: conf mean .75, accuracy .5 -> .25 (the same here by coincidence of signs)
    # and 2 bins: all four in (.5, 1] -> .25 again; 10 bins: .6 .7 .8 .9 alone:
    # gaps .4 .7 .8 .1 -> mean .5
    assert ece(HAND_P, HAND_Y, n_bins=1) == pytest.approx(0.25)
    assert ece(HAND_P, HAND_Y, n_bins=10) == pytest.approx(0.5)


def test_mce_hand():
    # gaps .15 and .35 (4 bins); 10 bins: gaps .4 .7 .8 .1 -> .8
    assert mce(HAND_P, HAND_Y, n_bins=4) == pytest.approx(0.35)
    assert mce(HAND_P, HAND_Y, n_bins=10) == pytest.approx(0.8)


def test_rms_ce_hand():
    # gaps .15 and .35, half the items each (4 bins) -> sqrt(.5 * .0225 + .5 * .1225);
    # 10 bins: gaps .4 .7 .8 .1, a quarter each -> sqrt(1.3 / 4); 1 bin: |.75 - .5| = .25
    assert rms_ce(HAND_P, HAND_Y, n_bins=4) == pytest.approx(math.sqrt(0.0725))
    assert rms_ce(HAND_P, HAND_Y, n_bins=10) == pytest.approx(math.sqrt(1.3 / 4))
    assert rms_ce(HAND_P, HAND_Y, n_bins=1) == pytest.approx(0.25)


def test_adaptive_ece_hand_2_bins():
    # quantile edges .6, .75, .9: {.6,.7} conf .65 acc .5; {.8,.9} conf .85 acc .5
    # -> .5*.15 + .5*.35 = .25; with 4 bins each item alone: (.4 + .7 + .8 + .1)/4 = .5
    assert adaptive_ece(HAND_P, HAND_Y, n_bins=2) == pytest.approx(0.25)
    assert adaptive_ece(HAND_P, HAND_Y, n_bins=4) == pytest.approx(0.5)


def test_classwise_ece_hand_1_bin():
    # class 0 pairs (.8, 1), (.6, 0): |.7 - .5| = .2; class 1 (.2, 0), (.4, 1): |.3 - .5| = .2
    assert classwise_ece([[0.8, 0.2], [0.6, 0.4]], [0, 1], n_bins=1) == pytest.approx(0.2)


def test_brier_hand():
    # item 0: (.6-1)^2 + .4^2 = .32; item 1: (.3-1)^2 + .7^2 = .98; item 2: .8^2 + (.2-1)^2 = 1.28
    # item 3: .1^2 + (.9-1)^2 = .02 -> mean 2.6 / 4 = .65
    assert brier(HAND_P, HAND_Y) == pytest.approx(0.65)


def test_nll_hand():
    # -(log .6 + log .3 + log .2 + log .9) / 4
    expected = -(math.log(0.6) + math.log(0.3) + math.log(0.2) + math.log(0.9)) / 4
    assert nll(HAND_P, HAND_Y) == pytest.approx(expected)


def test_item_nll_is_per_item_and_averages_to_nll():
    from calm_core.calibration.metrics import item_nll

    expected = [-math.log(0.6), -math.log(0.3), -math.log(0.2), -math.log(0.9)]
    np.testing.assert_allclose(item_nll(HAND_P, HAND_Y), expected)
    assert float(np.mean(item_nll(HAND_P, HAND_Y))) == pytest.approx(nll(HAND_P, HAND_Y))


def test_item_confidence_brier_hand_and_binary_brier():
    from calm_core.calibration.metrics import item_confidence_brier

    np.testing.assert_allclose(item_confidence_brier([0.9, 0.6, 0.0], [1, 0, 0]), [0.01, 0.36, 0.0])
    # one confidence per answer is the binary Brier of (1 - c, c) against right / wrong, halved
    c, a = np.array([0.9, 0.6, 0.25]), np.array([1, 0, 1])
    binary = brier(np.stack([1 - c, c], axis=1), a)
    assert float(item_confidence_brier(c, a).mean()) == pytest.approx(binary / 2)
    with pytest.raises(ValueError, match="confidence"):
        item_confidence_brier([1.2], [1])


def test_nll_clips_zero_gold_probability():
    assert nll([[1.0, 0.0]], [1]) == pytest.approx(-math.log(1e-12))
    assert nll([[1.0, 0.0]], [1], eps=1e-3) == pytest.approx(-math.log(1e-3))


def test_perfect_predictions_give_plus_zero_not_minus_zero():
    # -log 1 and -0 log... are -0.0 in IEEE; tables and JSON should show 0.0
    assert math.copysign(1.0, nll([[1.0, 0.0]], [0])) == 1.0
    assert math.copysign(1.0, mean_entropy([[1.0, 0.0]])) == 1.0


def test_auroc_hand_with_tie():
    # confidences .9 .8 .8 .6, correct 1 1 0 0: pairs (.9,.8) 1, (.9,.6) 1, (.8,.8) .5,
    # (.8,.6) 1 -> 3.5 / 4 = .875
    p = [[0.9, 0.1], [0.8, 0.2], [0.2, 0.8], [0.6, 0.4]]
    assert auroc(p, [0, 0, 0, 1]) == pytest.approx(0.875)


def test_aurc_hand_distinct_confidences():
    # confidences .9 .8 .7, correct 1 0 1: risks 0, 1/2, 1/3 -> (0 + .5 + .3333) / 3 = .2778
    expected = (0.0 + 1 / 2 + 1 / 3) / 3
    assert confidence_aurc([0.9, 0.8, 0.7], [1, 0, 1]) == pytest.approx(expected)
    # same items as probs: rows [.9,.1] gold 0, [.2,.8] gold 1 -> wrong, [.7,.3] gold 0
    assert aurc([[0.9, 0.1], [0.2, 0.8], [0.7, 0.3]], [0, 0, 0]) == pytest.approx(expected)


def test_aurc_hand_with_tie_uses_risk_at_end_of_group():
    # confidences .9 .8 .8, correct 1 0 1: the .8 pair is kept whole -> risks 0, 1/3, 1/3
    # -> 2/9 (in input order 1 0 1 would give (0 + 1/2 + 1/3) / 3; 1 1 0 would give 1/9)
    assert confidence_aurc([0.9, 0.8, 0.8], [1, 0, 1]) == pytest.approx(2 / 9)
    assert confidence_aurc([0.9, 0.8, 0.8], [1, 1, 0]) == pytest.approx(2 / 9)
    # HAND_P: confidences .6 .7 .8 .9, correct 1 0 0 1 -> sorted correct 1 0 0 1:
    # risks 0, 1/2, 2/3, 2/4 -> (0 + .5 + .6667 + .5) / 4 = .4167
    assert aurc(HAND_P, HAND_Y) == pytest.approx((0 + 1 / 2 + 2 / 3 + 2 / 4) / 4)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_aurc_constant_confidence_is_error_rate_in_any_order(seed):
    rng = np.random.default_rng(seed)
    correct = (rng.random(50) < 0.7).astype(float)
    error_rate = 1.0 - correct.mean()
    for _ in range(5):
        assert confidence_aurc(np.full(50, 0.6), rng.permutation(correct)) == pytest.approx(error_rate,
                                                                                           abs=1e-12)
    # through probs: every row the same, labels shuffled
    y = rng.integers(0, 3, size=50)
    p = np.tile([0.5, 0.3, 0.2], (50, 1))
    assert aurc(p, y) == pytest.approx(np.mean(y != 0), abs=1e-12)
    assert aurc(p, rng.permutation(y)) == pytest.approx(np.mean(y != 0), abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_aurc_permutation_invariant_with_ties(seed):
    rng = np.random.default_rng(seed)
    conf = rng.choice([0.3, 0.5, 0.5, 0.8, 1.0], size=80)  # few distinct values
    correct = (rng.random(80) < 0.6).astype(float)
    ref = confidence_aurc(conf, correct)
    for _ in range(10):
        perm = rng.permutation(80)
        assert confidence_aurc(conf[perm], correct[perm]) == ref  # exact: 0/1 losses sum exactly
    p, y = make_case(60, 4, seed)
    p = np.round(p, 1)
    p /= p.sum(axis=1, keepdims=True)
    perm = rng.permutation(60)
    assert aurc(p[perm], y[perm]) == pytest.approx(aurc(p, y), abs=1e-15)


@pytest.mark.parametrize("n,n_correct", [(1, 0), (1, 1), (4, 2), (6, 1), (7, 4), (8, 8), (8, 0)])
def test_aurc_perfect_ranking_is_the_minimum_for_its_accuracy(n, n_correct):
    # distinct confidences 1 > ... ; every placement of the n_correct right answers
    conf = np.linspace(1.0, 0.1, n)
    values = []
    for right in itertools.combinations(range(n), n_correct):
        correct = np.zeros(n)
        correct[list(right)] = 1.0
        values.append(confidence_aurc(conf, correct))
    perfect = confidence_aurc(conf, np.r_[np.ones(n_correct), np.zeros(n - n_correct)])
    # perfect: risk 0 for k <= n_c, then (k - n_c) / k
    expected = sum((k - n_correct) / k for k in range(n_correct + 1, n + 1)) / n
    assert perfect == pytest.approx(expected, abs=1e-15)
    assert perfect == pytest.approx(min(values), abs=1e-15)
    # the reverse ranking (all wrong answers first) is the maximum
    worst = confidence_aurc(conf, np.r_[np.zeros(n - n_correct), np.ones(n_correct)])
    assert worst == pytest.approx(max(values), abs=1e-15)


def test_aurc_bounds_and_extremes():
    assert confidence_aurc([0.9, 0.4], [1, 1]) == 0.0  # all correct
    assert math.copysign(1.0, confidence_aurc([0.9, 0.4], [1, 1])) == 1.0  # +0.0
    assert confidence_aurc([0.9, 0.4], [0, 0]) == 1.0  # all wrong
    assert aurc([[1.0, 0.0]], [0]) == 0.0 and aurc([[1.0, 0.0]], [1]) == 1.0
    assert confidence_aurc([0.0, 0.0, 1.0], [0, 1, 1]) == pytest.approx((0 + 1 / 3 + 1 / 3) / 3)


def test_accuracy_hand_tie_goes_to_first_option():
    # row 0 ties .5/.5 -> predicts 0 (correct); row 1 predicts 1 (wrong)
    assert accuracy([[0.5, 0.5], [0.4, 0.6]], [0, 0]) == pytest.approx(0.5)
    conf, correct = top_label([[0.5, 0.5]], [1])
    assert conf.tolist() == [0.5] and correct.tolist() == [0.0]


def test_entropy_hand():
    # uniform over 4 -> log 4; one-hot -> 0 (0 log 0 = 0, no nan); padded uniform over 2 -> log 2
    h = entropy([[0.25] * 4, [1.0, 0, 0, 0], [0.5, 0.5, 0, 0]])
    np.testing.assert_allclose(h, [math.log(4), 0.0, math.log(2)], atol=1e-15)
    assert mean_entropy([[0.5, 0.5], [1.0, 0.0]]) == pytest.approx(math.log(2) / 2)


def test_mean_confidence_hand():
    assert mean_confidence([[0.5, 0.5], [0.9, 0.1]]) == pytest.approx(0.7)


def test_softmax_hand_with_padding():
    # softmax([0, log 3, -inf]) = [1/4, 3/4, 0]
    np.testing.assert_allclose(softmax([0.0, math.log(3), -np.inf]), [0.25, 0.75, 0.0], atol=1e-15)


def test_smooth_ece_hand_extremes():
    # all correct at confidence 1: every residual is 0
    assert smooth_ece([[1.0, 0.0]] * 5, [0] * 5) == pytest.approx(0.0, abs=1e-12)
    # one wrong item at .9: the smoothed residual is .9 wherever there is mass
    assert smooth_ece([[0.9, 0.1]], [1]) == pytest.approx(0.9, abs=1e-3)


# -------------------------------------------------------------------- edge cases
def test_confidence_one_counts_in_last_bin():
    # torchmetrics 1.9 gives confidence 1.0 a bin of its own; here it joins (14/15, 1]
    table = bin_confidences([1.0, 0.95], [0.0, 1.0], n_bins=15)
    assert table.counts[-1] == 2 and table.counts.sum() == 2
    assert table.mean_confidence[-1] == pytest.approx(0.975)
    # ECE: one bin, conf .975, acc .5 -> .475
    assert ece([[1.0, 0.0], [0.95, 0.05]], [1, 0], n_bins=15) == pytest.approx(0.475)


def test_confidence_zero_counts_in_first_bin():
    table = bin_confidences([0.0, 0.05, 0.5], [1.0, 0.0, 0.0], n_bins=10)
    assert table.counts[0] == 2 and table.counts.sum() == 3
    assert table.accuracy[0] == pytest.approx(0.5)


def test_interior_edge_goes_to_lower_bin():
    # 0.5 is an edge of 2 bins: (lo, hi] puts it in bin 0
    assert bin_confidences([0.5], [1.0], n_bins=2).counts.tolist() == [1, 0]


def test_classwise_zero_probability_gold_counts_in_first_bin():
    # probs [[1, 0], [.7, .3]], labels [1, 0], 2 bins.
    # class 0: (1.0, 0), (.7, 1) both in (.5, 1]: |.85 - .5| = .35
    # class 1: (0.0, 1), (.3, 0) both in [0, .5]: |.15 - .5| = .35 (dropping the 0.0 would give .15)
    assert classwise_ece([[1.0, 0.0], [0.7, 0.3]], [1, 0], n_bins=2) == pytest.approx(0.35)


def test_ragged_padding_does_not_change_top_label_metrics():
    p, y = make_case(120, 3, seed=9)
    padded = np.concatenate([p, np.zeros((120, 2))], axis=1)  # two padding options
    for name in ["acc", "ece", "mce", "adaptive_ece", "brier", "nll", "auroc", "aurc", "entropy",
                 "confidence", "smooth_ece"]:
        compute = by_name()[name].compute
        assert compute(padded, y) == pytest.approx(compute(p, y), abs=1e-12), name


def test_ragged_padding_columns_count_in_classwise_mean():
    # a padding column is perfectly calibrated (p = 0, never gold): cw = K/(K+P) * cw_unpadded
    p, y = make_case(120, 3, seed=9)
    padded = np.concatenate([p, np.zeros((120, 2))], axis=1)
    assert classwise_ece(padded, y, 10) == pytest.approx(classwise_ece(p, y, 10) * 3 / 5)


def test_auroc_nan_when_all_correct():
    assert math.isnan(auroc([[0.9, 0.1], [0.3, 0.7]], [0, 1]))


def test_auroc_nan_when_all_wrong():
    assert math.isnan(auroc([[0.9, 0.1], [0.3, 0.7]], [1, 0]))


def test_softmax_padding_equals_softmax_of_real_options():
    z = np.array([[1.0, 2.0, -np.inf, -np.inf], [0.5, -1.0, 3.0, -np.inf]])
    out = softmax(z)
    np.testing.assert_allclose(out[0, :2], scipy.special.softmax([1.0, 2.0]), atol=1e-15)
    np.testing.assert_allclose(out[1, :3], scipy.special.softmax([0.5, -1.0, 3.0]), atol=1e-15)
    assert out[0, 2:].tolist() == [0.0, 0.0] and out[1, 3] == 0.0


def test_softmax_large_logits_do_not_overflow():
    np.testing.assert_allclose(softmax([1000.0, 1000.0, -1000.0]), [0.5, 0.5, 0.0], atol=1e-15)


# ------------------------------------------------------------------- validation
def _bad(name: str, call, message: str):
    return pytest.param(call, message, id=name)


INVALID = [
    _bad("n_bins-zero", lambda: ece(HAND_P, HAND_Y, n_bins=0),
         r"Expected `n_bins` to be a positive int, but got 0"),
    _bad("n_bins-float", lambda: ece(HAND_P, HAND_Y, n_bins=2.5),
         r"Expected `n_bins` to be a positive int, but got 2.5"),
    _bad("n_bins-bool", lambda: ece(HAND_P, HAND_Y, n_bins=True),
         r"Expected `n_bins` to be a positive int"),
    _bad("probs-1d", lambda: ece([0.2, 0.3, 0.5], [0]),
         r"Expected `probs` to have shape \(N, K\), but got \(3,\)"),
    _bad("probs-empty", lambda: ece(np.zeros((0, 3)), []), r"Expected `probs` to be non-empty"),
    _bad("probs-nan", lambda: brier([[np.nan, 1.0]], [0]),
         r"Expected `probs` to be finite, but got nan"),
    _bad("probs-negative", lambda: nll([[-0.1, 1.1]], [0]),
         r"Expected `probs` values in \[0, 1\], but got -0.1"),
    _bad("probs-row-sum", lambda: ece([[0.5, 0.4], [0.5, 0.5]], [0, 0]),
         r"Expected `probs` rows to sum to 1 \(tolerance 1e-4\), but got 0.9 in row 0"),
    _bad("labels-too-big", lambda: ece(HAND_P, [0, 1, 7, 0]),
         r"Expected `labels` values in \[0, K\), but got 7"),
    _bad("labels-negative", lambda: auroc(HAND_P, [0, 1, -1, 0]),
         r"Expected `labels` values in \[0, K\), but got -1"),
    _bad("labels-shape", lambda: accuracy(HAND_P, [0, 1]),
         r"Expected `labels` to have shape \(4,\), but got \(2,\)"),
    _bad("labels-float", lambda: accuracy(HAND_P, [0.0, 1.0, 0.0, 1.0]),
         r"Expected `labels` to be integers, but got float64"),
    _bad("strategy-unknown", lambda: bin_confidences([0.5], [1.0], strategy="equal"),
         r"Expected `strategy` to be one of \('uniform', 'quantile'\), but got 'equal'"),
    _bad("confidence-range", lambda: bin_confidences([1.5], [1.0]),
         r"Expected `confidence` values in \[0, 1\], but got 1.5"),
    _bad("correct-shape", lambda: bin_confidences([0.5, 0.6], [1.0]),
         r"Expected `correct` to have shape \(2,\)"),
    _bad("confidence-empty", lambda: bin_confidences([], []),
         r"Expected `confidence` to have shape \(N,\) with N >= 1"),
    _bad("aurc-probs-row-sum", lambda: aurc([[0.5, 0.4]], [0]),
         r"Expected `probs` rows to sum to 1 \(tolerance 1e-4\), but got 0.9 in row 0"),
    _bad("aurc-labels-too-big", lambda: aurc(HAND_P, [0, 1, 2, 0]),
         r"Expected `labels` values in \[0, K\), but got 2 \(K = 2\)"),
    _bad("confidence_aurc-range", lambda: confidence_aurc([0.5, 1.2], [1, 0]),
         r"Expected `confidence` values in \[0, 1\], but got 1.2"),
    _bad("confidence_aurc-nan", lambda: confidence_aurc([0.5, np.nan], [1, 0]),
         r"Expected `confidence` values in \[0, 1\], but got nan"),
    _bad("confidence_aurc-correct-range", lambda: confidence_aurc([0.5, 0.6], [1, 2]),
         r"Expected `correct` values in \[0, 1\], but got 2.0"),
    _bad("confidence_aurc-correct-shape", lambda: confidence_aurc([0.5, 0.6], [1, 0, 1]),
         r"Expected `correct` to have shape \(2,\), but got \(3,\)"),
    _bad("confidence_aurc-empty", lambda: confidence_aurc([], []),
         r"Expected `confidence` to have shape \(N,\) with N >= 1, but got \(0,\)"),
    _bad("logits-all-neg-inf", lambda: softmax([-np.inf, -np.inf]),
         r"Expected `logits` to have a finite entry"),
    _bad("logits-nan", lambda: softmax([0.0, np.nan]),
         r"Expected `logits` to be finite or -inf, but got nan"),
    _bad("n_boot-zero", lambda: bootstrap_ci("acc", HAND_P, HAND_Y, n_boot=0),
         r"Expected `n_boot` to be a positive int, but got 0"),
    _bad("level-range", lambda: bootstrap_ci("acc", HAND_P, HAND_Y, level=1.5),
         r"Expected `level` to be in \(0, 1\), but got 1.5"),
    _bad("metric-unknown", lambda: bootstrap_ci("ecee", HAND_P, HAND_Y),
         r"Expected `metric` to be a callable or one of \[.*'ece'.*\], but got 'ecee'"),
    _bad("summarize-n_bins", lambda: summarize(HAND_P, HAND_Y, n_bins=-3),
         r"Expected `n_bins` to be a positive int, but got -3"),
]


@pytest.mark.parametrize("call,message", INVALID)
def test_invalid_inputs_raise_template(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# -------------------------------------------------------------------- BinTable
def test_bin_table_records_and_reduction(case, n_bins):
    p, y = case
    table = bin_confidences(*top_label(p, y), n_bins=n_bins)
    records = table.to_records()
    assert table.n_bins == n_bins == len(records)
    assert table.edges.shape == (n_bins + 1,) and table.strategy == "uniform"
    assert sum(r["count"] for r in records) == len(y)
    # the records carry enough to recompute the ECE
    from_records = sum(r["count"] / len(y) * abs(r["gap"]) for r in records if r["count"])
    assert from_records == pytest.approx(ece(p, y, n_bins), abs=1e-12)


def test_bin_table_empty_bins_are_none_in_records_and_arrays_are_read_only():
    table = bin_confidences([0.95], [1.0], n_bins=2)
    first, last = table.to_records()
    assert first == {"lower": 0.0, "upper": 0.5, "count": 0, "mean_confidence": None,
                     "accuracy": None, "gap": None}
    assert last["gap"] == pytest.approx(0.95 - 1.0)  # gap = confidence - accuracy
    assert isinstance(table, BinTable) and math.isnan(table.accuracy[0])
    with pytest.raises(ValueError):
        table.counts[0] = 5


# ------------------------------------------------------------------- bootstrap
def test_bootstrap_ci_hand_two_items():
    # resampled accuracy is 0, .5 or 1 with probability 1/4, 1/2, 1/4 -> (0, 1)
    assert bootstrap_ci("acc", [[1.0, 0.0], [0.0, 1.0]], [0, 0], n_boot=1000) == (0.0, 1.0)


def test_bootstrap_ci_is_deterministic_per_seed_and_sane():
    p, y = make_case(400, 4, seed=4)
    ci = bootstrap_ci(accuracy, p, y, n_boot=500, seed=3)
    assert ci == bootstrap_ci("acc", p, y, n_boot=500, seed=3)  # name == callable, same seed
    assert ci != bootstrap_ci("acc", p, y, n_boot=500, seed=4)
    acc = accuracy(p, y)
    normal_width = 2 * 1.96 * math.sqrt(acc * (1 - acc) / len(y))
    assert ci[0] < acc < ci[1]
    assert ci[1] - ci[0] == pytest.approx(normal_width, rel=0.2)


def test_bootstrap_ci_matches_naive_loop():
    # the documented draw: one (n_boot, N) integers() call on default_rng(seed)
    p, y = make_case(60, 3, seed=6)
    idx = np.random.default_rng(8).integers(0, 60, size=(300, 60))
    stats = [naive_uniform(*naive_top_label(p[i], y[i]), 15)[0] for i in idx]  # ece: 15 bins
    lo, median, hi = np.percentile(stats, [5.0, 50.0, 95.0])
    point = naive_uniform(*naive_top_label(p, y), 15)[0]
    expected = (point - (median - lo), point + (hi - median))  # shifted by the median bias
    assert bootstrap_ci("ece", p, y, n_boot=300, level=0.9, seed=8) == pytest.approx(expected)
    assert expected[0] <= point <= expected[1]


def test_bootstrap_ci_skips_nan_resamples():
    # 6 items, 1 wrong: resamples without the wrong item have AUROC nan
    p = [[0.9, 0.1], [0.8, 0.2], [0.7, 0.3], [0.6, 0.4], [0.95, 0.05], [0.55, 0.45]]
    lo, hi = bootstrap_ci("auroc", p, [0, 0, 0, 0, 1, 0], n_boot=200)
    assert 0.0 <= lo <= hi <= 1.0


# ------------------------------------------------------------------- summarize
def test_summarize_keys_types_and_values(case):
    p, y = case
    s = summarize(p, y, n_bins=10)
    assert list(s) == ["acc", "ece", "mce", "rms_ce", "adaptive_ece", "classwise_ece", "brier", "nll",
                       "auroc", "aurc", "entropy", "confidence", "smooth_ece", "n", "ece_bins"]
    assert type(s["n"]) is int and s["n"] == len(y)
    assert type(s["ece_bins"]) is int and s["ece_bins"] == 10
    assert s["ece"] == ece(p, y, 10) and s["mce"] == mce(p, y, 10) and s["rms_ce"] == rms_ce(p, y, 10)
    assert s["adaptive_ece"] == adaptive_ece(p, y, 10)
    assert s["classwise_ece"] == classwise_ece(p, y, 10)
    assert s["entropy"] == mean_entropy(p) and s["confidence"] == mean_confidence(p)
    assert s["smooth_ece"] == smooth_ece(p, y) and s["nll"] == nll(p, y)
    assert s["aurc"] == aurc(p, y) and s["auroc"] == auroc(p, y)
    assert all(isinstance(v, float) for k, v in s.items() if k not in ("n", "ece_bins"))


def test_summarize_hand_contains_aurc_and_bootstrap_accepts_its_name():
    s = summarize(HAND_P, HAND_Y)
    assert "aurc" in s and by_name()["aurc"].compute is not None
    assert s["aurc"] == pytest.approx((0 + 1 / 2 + 2 / 3 + 2 / 4) / 4)
    lo, hi = bootstrap_ci("aurc", HAND_P, HAND_Y, n_boot=200)
    assert 0.0 <= lo <= hi <= 1.0
