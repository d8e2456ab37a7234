"""Proper scores and summary statistics over option probabilities.

softmax (THE numpy softmax over options, -inf = padded option), entropy, accuracy,
Brier score, NLL, AUROC of confidence for correctness, AURC (selective prediction),
mean entropy and confidence.
"""

from __future__ import annotations

import numpy as np

from calm_core.calibration.metrics._checks import check_probs, check_probs_labels, check_scores, fail
from calm_core.calibration.metrics.bins import _top_label_update


def softmax(logits: object, axis: int = -1) -> np.ndarray:
    """p_k = exp(z_k - m) / sum_j exp(z_j - m), m = max_j z_j (shift for stability).

    A -inf logit is a padded option of a ragged item and gets probability exactly 0; a
    slice that is all -inf (no option at all) or holds nan / +inf raises ValueError.
    logits: any shape, normalised along `axis`; returns float64 of the same shape.
    Example: softmax([0, log 3, -inf]) = [0.25, 0.75, 0].
    """
    z = np.asarray(logits, dtype=np.float64)
    if np.isnan(z).any() or np.isposinf(z).any():
        raise fail("logits", "to be finite or -inf", z[np.isnan(z) | np.isposinf(z)][0])
    m = z.max(axis=axis, keepdims=True)  # same shape as z with `axis` of length 1
    if np.isneginf(m).any():
        raise fail("logits", "to have a finite entry in every slice along `axis`", "all -inf")
    e = np.exp(z - m)  # exp(-inf) = 0 for padding
    return e / e.sum(axis=axis, keepdims=True)


def entropy(probs: object) -> np.ndarray:
    """Shannon entropy per row in nats: H_i = -sum_k p_ik log p_ik, with 0 log 0 = 0.

    probs (N, K) rows summing to 1 -> (N,). Padding zeros add nothing.
    Example: entropy([[.5, .5, 0], [1, 0, 0]]) = [log 2, 0] = [0.6931..., 0].
    """
    return _entropy_update(check_probs(probs))


def _entropy_update(p: np.ndarray) -> np.ndarray:
    logp = np.log(np.where(p > 0.0, p, 1.0))  # log 1 = 0 where p = 0
    return 0.0 - (p * logp).sum(axis=1)  # 0.0 - x, not -x: no -0.0 in tables


def mean_entropy(probs: object) -> float:
    """(1/N) sum_i H_i, the entropy of `entropy` averaged over items, in nats.

    probs (N, K). Example: [[.5, .5], [1, 0]] -> (log 2 + 0) / 2 = 0.3466.
    """
    return float(_entropy_update(check_probs(probs)).mean())


def mean_confidence(probs: object) -> float:
    """(1/N) sum_i max_k p_ik, the mean top-label confidence.

    probs (N, K). Example: [[.5, .5], [.9, .1]] -> (.5 + .9) / 2 = 0.7.
    """
    return float(check_probs(probs).max(axis=1).mean())


def accuracy(probs: object, labels: object) -> float:
    """(1/N) sum_i 1[argmax_k p_ik = y_i] (first index on ties).

    probs (N, K), labels (N,). Example: [[.7, .3], [.4, .6]], labels [0, 0] -> 0.5.
    """
    return float(_top_label_update(*check_probs_labels(probs, labels))[1].mean())


def brier(probs: object, labels: object) -> float:
    """Multiclass Brier score: (1/N) sum_i sum_k (p_ik - 1[y_i = k])^2, in [0, 2].

    probs (N, K), labels (N,). Padding columns (p = 0, never gold) add 0.
    Example: [[.7, .3]], labels [0] -> .3^2 + .3^2 = 0.18.
    """
    p, y = check_probs_labels(probs, labels)
    onehot = np.zeros_like(p)
    onehot[np.arange(len(y)), y] = 1.0  # (N, K)
    return float(((p - onehot) ** 2).sum(axis=1).mean())


def nll(probs: object, labels: object, eps: float = 1e-12) -> float:
    """Negative log-likelihood: (1/N) sum_i -log max(p_{i, y_i}, eps), in nats.

    eps keeps a zero gold probability finite (-log 1e-12 = 27.6).
    probs (N, K), labels (N,). Example: [[.5, .5], [.25, .75]], labels [0, 1]
    -> (log 2 + log(4/3)) / 2 = 0.4904.
    """
    return float(item_nll(probs, labels, eps).mean())


def item_nll(probs: object, labels: object, eps: float = 1e-12) -> np.ndarray:
    """Per-item negative log-likelihood -log max(p_{i, y_i}, eps), (N,): `nll` is its mean;
    the calibrated stop pairs two steps' per-item values for a standard error.
    Example: [[.5, .5], [.25, .75]], labels [0, 1] -> [0.6931, 0.2877]."""
    p, y = check_probs_labels(probs, labels)
    gold = p[np.arange(len(y)), y]  # (N,)
    return 0.0 - np.log(np.maximum(gold, eps))


def item_confidence_brier(confidence: object, correct: object) -> np.ndarray:
    """Per-answer Brier score of a confidence against its correctness, (c_i - a_i)^2, (N,):
    a proper score of one confidence per answer (open answers, where there are no option
    probabilities); the calibrated stop of open-answer runs averages and pairs it.
    Example: confidences [.9, .6], correct [1, 0] -> [0.01, 0.36]."""
    c, a = check_scores(confidence, correct)
    return (c - a) ** 2


def auroc(probs: object, labels: object) -> float:
    """AUROC of the top-label confidence as a score separating correct from wrong items.

    AUROC = P(c_i > c_j) + 0.5 P(c_i = c_j) for i correct, j wrong (Mann-Whitney U):
    (R_+ - n_+ (n_+ + 1) / 2) / (n_+ n_-), R_+ the sum of the average ranks of the n_+
    correct items among all N. nan when every item is correct or every item is wrong.
    probs (N, K), labels (N,). Example: confidences [.9, .8, .8, .6] with correct
    [1, 1, 0, 0]: pairs (.9,.8) 1, (.9,.6) 1, (.8,.8) .5, (.8,.6) 1 -> 3.5 / 4 = 0.875.
    """
    conf, correct = _top_label_update(*check_probs_labels(probs, labels))
    return _auroc_compute(conf, correct.astype(bool))


def confidence_auroc(confidence: object, correct: object) -> float:
    """`auroc` for answers with one confidence each: P(c_right > c_wrong), ties half.
    nan when every answer is right or every answer is wrong."""
    c, a = check_scores(confidence, correct)
    return _auroc_compute(c, a > 0.5)


def _auroc_compute(score: np.ndarray, positive: np.ndarray) -> float:
    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inverse, counts = np.unique(score, return_inverse=True, return_counts=True)
    avg_rank = np.cumsum(counts) - (counts - 1) / 2.0  # 1-based mean rank of each value
    r_pos = avg_rank[inverse][positive].sum()
    return float((r_pos - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def aurc(probs: object, labels: object) -> float:
    """Area under the risk-coverage curve of the top-label confidence (lower is better).

    Rank the N items by confidence c_i = max_k p_ik, highest first; keeping the k most
    confident gives coverage k / N and risk(k) = (errors among them) / k, an error being
    argmax_k p_ik != y_i. AURC = (1/N) sum_{k=1..N} risk(k), in [0, 1]. Ties do not depend
    on the input order: a threshold keeps a group of equal confidences whole, so every
    position in the group takes the risk at the group's end (a constant confidence gives
    AURC = the error rate). Perfect ranking (all right answers first) is the minimum for
    a given accuracy. probs (N, K), labels (N,). Example: confidences [.9, .8, .7] with
    correct [1, 0, 1]: risks 0, 1/2, 1/3 -> AURC = (0 + 1/2 + 1/3) / 3 = 0.2778.
    """
    conf, correct = _top_label_update(*check_probs_labels(probs, labels))
    return _aurc_compute(conf, 1.0 - correct)


def confidence_aurc(confidence: object, correct: object) -> float:
    """`aurc` for answers with one confidence each: (1/N) sum_k risk(k), ties kept whole.

    confidence (N,), correct (N,) in [0, 1]; a fractional a_i counts as 1 - a_i errors.
    Example: c = [.9, .8, .8], a = [1, 0, 1]: the .8 pair is one group, both positions take
    risk 1/3 -> AURC = (0 + 1/3 + 1/3) / 3 = 0.2222.
    """
    c, a = check_scores(confidence, correct)
    return _aurc_compute(c, 1.0 - a)


def _aurc_compute(score: np.ndarray, loss: np.ndarray) -> float:
    # groups of equal score, highest first (-0.0 == 0.0, so a 0 score is one group)
    _, inverse, counts = np.unique(-score, return_inverse=True, return_counts=True)
    group_loss = np.bincount(inverse.ravel(), weights=loss, minlength=len(counts))  # (G,)
    end = np.cumsum(counts)  # items kept up to each group's end
    risk = np.cumsum(group_loss) / end  # (G,) risk at each group's end
    return float((counts * risk).sum() / len(score))
