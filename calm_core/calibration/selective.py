"""Selective answering with a finite-sample guarantee: a confidence threshold above which
the model answers alone, and sets of options that hold the right one, both chosen on
held-out items (S_V) and then applied unchanged to new ones.

Three rules pick the threshold t (the model answers an item when its top-label confidence
is at least t, and abstains otherwise), one rule picks the sets:

- `crc`, conformal risk control (Angelopoulos et al. 2022, "Conformal Risk Control"):
  the loss of an item is 1[answered and wrong] (bounded by B = 1, nonincreasing in t);
  t is the smallest held-out confidence with (n / (n + 1)) * Rhat(t) + 1 / (n + 1) <= alpha.
  Guarantee: P(answered and wrong) <= alpha for a new item, in expectation over the
  held-out draw. The risk is the error among ALL items, not among the answered ones. An
  expectation: a given test split exceeds alpha often (bench/selective_guarantee.py).
- `ltt`, the same risk with probability 1 - delta (Learn then Test, Angelopoulos, Bates et
  al. 2021): for each t of a fixed grid, from 1 down, the null "P(answered and wrong) >
  alpha" is tested with the exact binomial p-value P(Bin(n, alpha) <= k_t) of the k_t
  held-out items answered and wrong; the sequence stops at the first null it cannot reject
  (fixed-sequence testing: no multiplicity cost). Guarantee: with probability at least
  1 - delta over the held-out draw, P(answered and wrong) <= alpha.
- `ltt-answered`, Learn then Test on the selective error: the same walk, the null "error
  among answered items > alpha", the p-value P(Bin(n_t, alpha) <= k_t) over the n_t answered
  held-out items. Guarantee: with probability at least 1 - delta, the error among answered
  items is at most alpha: what a person asking "how often is it wrong when it answers?"
  means; it answers far fewer items than the other two.
- LAC prediction sets (Sadinle et al. 2019; Kumar et al. 2023 for MCQA with LLMs): with
  scores s_i = 1 - p_i(gold), qhat is the ceil((n + 1)(1 - alpha))-th smallest score, and
  a new item's set is {options k : 1 - p_k <= qhat} (= p_k >= 1 - qhat). Guarantee:
  P(gold in set) >= 1 - alpha.

Every guarantee assumes the held-out items and the new ones are exchangeable (drawn from
the same source, in no particular order): none holds across a shift of domain.

Each rule refuses, with the count it needs, when the held-out items are too few for its
target (`TooFewItems`): `crc` and LAC need n >= 1 / alpha - 1 (19 for 5%), `ltt` and
`ltt-answered` n >= ln(delta) / ln(1 - alpha) (29 for alpha = 10% and delta = 5%, 59 for 5%).

Example (checkable by hand): confidences [0.9, 0.8, 0.7, 0.6] x 5, right except the 0.6s,
n = 20, alpha = 0.3: at t = 0.6 Rhat = 5/20 and (20/21)(0.25) + 1/21 = 0.286 <= 0.3, so
`crc_threshold` answers everything: t = 0.6.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

CRC, LTT, LTT_ANSWERED = "crc", "ltt", "ltt-answered"
RULES = {
    CRC: "error among all questions <= target, on average over held-out draws (conformal risk control)",
    LTT: "error among all questions <= target, with probability >= 1 - delta (Learn then Test)",
    LTT_ANSWERED: "error among answered questions <= target, with probability >= 1 - delta (Learn then Test)",
}
# ltt: the chance the held-out draw misleads. 0.05, not 0.1: a reader checks the error on their own test
# split, whose sampling noise adds to S_V's; at 0.1 the target held there on 85-93.5% of
# bench/selective_guarantee.py's splits per set, at 0.05 on 93-97.5% (docs/selective.md).
DEFAULT_DELTA = 0.05
# The error among all questions, with 95% probability: a guarantee that held on the reader's own test
# split in at least 9 of 10 splits on every benchmark set (crc's holds on average only;
# bench/selective_guarantee.py measures both).
DEFAULT_RULE = LTT
DEFAULT_TARGET = 0.1
GRID = np.linspace(1.0, 0.0, 1001)  # ltt's fixed sequence of thresholds, most cautious first
NEVER = math.inf  # the threshold that answers nothing (always within any target)


class TooFewItems(ValueError):
    """The held-out items cannot support the target: `needed` is the smallest count that can."""

    def __init__(self, message: str, needed: int) -> None:
        super().__init__(message)
        self.needed = needed


@dataclass(frozen=True)
class Threshold:
    """A chosen threshold: answer an item when its confidence >= `threshold` (inf: never)."""

    rule: str
    target_error: float
    delta: float | None  # the ltt rules' delta; None for crc (a guarantee in expectation)
    threshold: float
    n_heldout: int
    heldout_answered: int  # held-out items at or above the threshold
    heldout_errors: int  # of those, the wrong ones

    def to_dict(self) -> dict[str, object]:
        return {**self.__dict__, "threshold": None if math.isinf(self.threshold) else self.threshold}


@dataclass(frozen=True, eq=False)  # eq=False: arrays
class Search:
    """What a rule tried on the held-out items: its `candidates` (thresholds, in the order
    the rule walks them), which of them are `valid` (pass the rule's test: the guarantee
    holds at each), and the ltt rules' `p_values` (P(Bin(m_t, alpha) <= k_t) of each
    candidate tested, NaN for one passed over with too few items or after the walk stopped;
    None for crc, which tests no null). The chosen threshold is the lowest valid one."""

    candidates: np.ndarray
    valid: np.ndarray
    p_values: np.ndarray | None

    @property
    def threshold(self) -> float:
        """The lowest valid candidate: the one that answers most; NEVER when none is valid."""
        return float(self.candidates[self.valid].min()) if self.valid.any() else NEVER


def fail(name: str, expected: str, got: object) -> ValueError:
    return ValueError(f"Expected `{name}` {expected}, but got {got}")


def check_rate(value: float, name: str) -> float:
    if not isinstance(value, (int, float)) or not 0.0 < float(value) < 1.0:
        raise fail(name, "to be in (0, 1)", value)
    return float(value)


def check_scores(confidence: object, correct: object) -> tuple[np.ndarray, np.ndarray]:
    """(confidence (N,), correct (N,) in {0, 1}), checked once at the boundary."""
    c = np.asarray(confidence, dtype=np.float64).reshape(-1)
    a = np.asarray(correct, dtype=np.float64).reshape(-1)
    if c.shape != a.shape:
        raise fail("correct", f"to have the shape of `confidence` {c.shape}", a.shape)
    if not np.all((c >= 0.0) & (c <= 1.0)):
        raise fail("confidence", "to lie in [0, 1]", f"values from {np.nanmin(c)} to {np.nanmax(c)}")
    if not np.all((a == 0.0) | (a == 1.0)):
        raise fail("correct", "to hold only 0 and 1", np.unique(a)[:5])
    return c, a


def crc_min_items(target_error: float) -> int:
    """The fewest held-out items for which `crc` (and LAC at coverage 1 - target) can hold:
    answering nothing must pass, 1 / (n + 1) <= alpha, so n >= 1 / alpha - 1."""
    alpha = check_rate(target_error, "target_error")
    return max(1, math.ceil(1.0 / alpha - 1.0 - 1e-9))


def ltt_min_items(target_error: float, delta: float) -> int:
    """The fewest held-out items (for `ltt-answered`, answered ones) with which the ltt rules
    can reject their first null: with no error among n, the p-value (1 - alpha)^n must reach delta."""
    alpha, d = check_rate(target_error, "target_error"), check_rate(delta, "delta")
    return math.ceil(math.log(d) / math.log1p(-alpha) - 1e-9)


def min_items(rule: str, target_error: float, delta: float = DEFAULT_DELTA) -> int:
    """The fewest held-out items with which `rule` can choose a threshold at `target_error`
    (`ltt-answered` needs as many answered ones)."""
    return crc_min_items(target_error) if rule == CRC else ltt_min_items(target_error, delta)


def default_rule_items() -> int:
    """What the default rule needs at the default target: the split advice counts it, so a
    suggested split lets the studio's first selective answer be a threshold, not a refusal."""
    return min_items(DEFAULT_RULE, DEFAULT_TARGET)


def _refuse_if_few(n: int, needed: int, what: str, way_out: str = "") -> None:
    """TooFewItems naming the count `what` needs and the ways out (more items, a larger target)."""
    if n < needed:
        raise TooFewItems(
            f"Expected at least {needed} held-out items for {what}, but got {n}: hold out more items, "
            f"or ask for a larger target{way_out}",
            needed,
        )


def crc_threshold(confidence: object, correct: object, target_error: float) -> Threshold:
    """Conformal risk control of P(answered and wrong): the smallest held-out confidence t
    with (errors at or above t + 1) / (n + 1) <= alpha; inf when none passes.

    Restricting t to held-out confidences keeps the guarantee: the chosen t also passes the
    rule on the n + 1 items with the new one added (its loss is at most 1), whose smallest
    passing t is exchangeable with the new item's loss (the paper's proof)."""
    c, a = check_scores(confidence, correct)
    alpha = check_rate(target_error, "target_error")
    return threshold_record(CRC, alpha, None, crc_search(c, a, alpha).threshold, c, a)


def crc_search(c: np.ndarray, a: np.ndarray, alpha: float) -> Search:
    """crc's candidates (the held-out confidences, ascending) and those that pass
    (errors at or above t + 1) / (n + 1) <= alpha; refused below `crc_min_items`."""
    _refuse_if_few(len(c), crc_min_items(alpha), f"a target error of {alpha:.0%} on average")
    candidates = np.unique(c)  # ascending
    wrong = np.sort(c[a == 0.0])
    errors = len(wrong) - np.searchsorted(wrong, candidates, side="left")  # wrong items with c >= t
    passes = (errors + 1.0) <= alpha * (len(c) + 1.0) + 1e-12  # nonincreasing errors: passes is monotone
    return Search(candidates, passes, None)


@lru_cache(maxsize=65536)
def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) <= k), summed in log space (exact enough for n in the thousands)."""
    if k >= n:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
        for i in range(k + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def marginal_low(n: int, level: float, chance: float = 0.1) -> int:
    """The count k of n new items such that, when each is covered (or right) with probability
    exactly `level`, one set of n shows k or fewer with probability at least `chance`: the
    `chance` quantile of Bin(n, level). A marginal guarantee is a promise over many draws, so
    one small set can land that low while the promise holds (the held-out draw adds spread)."""
    k = 0
    while binomial_cdf(k, n, level) < chance:
        k += 1
    return k


def ltt_threshold(
    confidence: object, correct: object, target_error: float, delta: float = DEFAULT_DELTA, answered: bool = False
) -> Threshold:
    """Learn then Test: walk GRID from 1 down, rejecting "risk(t) > alpha" while the binomial
    p-value P(Bin(m_t, alpha) <= k_t) is at most delta; the last rejected t is chosen, inf
    when the first cannot be rejected. The risk is P(answered and wrong) (m_t = n, k_t the
    held-out items answered and wrong), or with `answered` the error among answered items
    (m_t = n_t answered held-out items, k_t of them wrong).

    With `answered`, the sequence starts at the first t where n_t reaches `ltt_min_items`
    (fewer answered items could not reject even with no error, and would end it at once).
    n_t only grows as t falls, so this is fixed-sequence testing from a start set by the
    held-out confidences, never by their labels; tests/test_selective.py checks the
    guarantee by simulation."""
    c, a = check_scores(confidence, correct)
    alpha, d = check_rate(target_error, "target_error"), check_rate(delta, "delta")
    threshold = ltt_search(c, a, alpha, d, answered).threshold
    return threshold_record(LTT_ANSWERED if answered else LTT, alpha, d, threshold, c, a)


def ltt_search(c: np.ndarray, a: np.ndarray, alpha: float, delta: float, answered: bool = False) -> Search:
    """The ltt rules' walk over GRID (see `ltt_threshold`): each candidate's p-value where it
    was tested, and the valid ones (the run of rejections from the top); refused below
    `ltt_min_items`."""
    what = f"an error among {'answered' if answered else 'all'} of {alpha:.0%} with {1 - delta:.0%} probability"
    way_out = f", or for it on average (conformal risk control: {crc_min_items(alpha)} items)"
    if answered:  # crc bounds another error: say so, or the way out would change the promise unseen
        way_out = (
            f", or a guarantee on another error, the error among all questions on average (conformal risk "
            f"control: {crc_min_items(alpha)} items), where a question left unanswered counts as no error"
        )
    _refuse_if_few(len(c), ltt_min_items(alpha, delta), what, way_out)
    order, wrong = np.sort(c), np.sort(c[a == 0.0])
    errors = len(wrong) - np.searchsorted(wrong, GRID, side="left")  # (G,) wrong items with c >= t
    tested = len(order) - np.searchsorted(order, GRID, side="left") if answered else np.full(len(GRID), len(c))
    p_values, valid = _fixed_sequence(tested, errors, alpha, delta)
    return Search(GRID, valid, p_values)


def _fixed_sequence(
    tested: np.ndarray, errors: np.ndarray, alpha: float, delta: float
) -> tuple[np.ndarray, np.ndarray]:
    """(p-values (G,), valid (G,)): GRID walked from the top, each threshold with enough
    tested items tested, valid while rejected; the first threshold not rejected ends the
    walk (p-values after it stay NaN). A threshold with too few tested items to reject is
    passed over (see `ltt_threshold`)."""
    least = ltt_min_items(alpha, delta)
    p_values, valid = np.full(len(GRID), np.nan), np.zeros(len(GRID), dtype=bool)
    for i, (m_t, k_t) in enumerate(zip(tested, errors, strict=True)):
        if m_t < least:
            continue
        p_values[i] = binomial_cdf(int(k_t), int(m_t), alpha)
        if p_values[i] > delta:
            break
        valid[i] = True
    return p_values, valid


def threshold_record(rule: str, alpha: float, delta: float | None, t: float, c: np.ndarray, a: np.ndarray) -> Threshold:
    answered = c >= t
    return Threshold(rule, alpha, delta, t, len(c), int(answered.sum()), int((answered & (a == 0.0)).sum()))


def risk_controlled_threshold(
    confidence: object, correct: object, target_error: float, delta: float | None = None
) -> Threshold:
    """A threshold bounding P(answered and wrong) by `target_error`: `crc_threshold` without
    delta (in expectation), `ltt_threshold` with it (with probability 1 - delta)."""
    if delta is None:
        return crc_threshold(confidence, correct, target_error)
    return ltt_threshold(confidence, correct, target_error, delta)


def choose_threshold(confidence: object, correct: object, target_error: float, rule: str, delta: float) -> Threshold:
    """The threshold of the rule named `rule` (RULES); `delta` is read by the ltt rules only."""
    if rule not in RULES:
        raise fail("rule", f"to be one of {', '.join(RULES)}", repr(rule))
    if rule == LTT_ANSWERED:
        return ltt_threshold(confidence, correct, target_error, delta, answered=True)
    return risk_controlled_threshold(confidence, correct, target_error, None if rule == CRC else delta)


def check_probs(probs: object, name: str) -> np.ndarray:
    """(N, K) option probabilities; NaN marks an option an item does not have (ragged K)."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] == 0 or p.shape[1] < 2:
        raise fail(name, "to have shape (N, K) with N >= 1 and K >= 2", p.shape)
    real = p[~np.isnan(p)]
    if not np.all((real >= 0.0) & (real <= 1.0)):
        raise fail(name, "to hold probabilities in [0, 1] (NaN for a missing option)", "values outside")
    return p


def lac_quantile(probs: object, labels: object, coverage: float) -> float:
    """LAC's qhat on held-out items: the ceil((n + 1) * coverage)-th smallest of 1 - p(gold)."""
    p = check_probs(probs, "probs_heldout")
    y = np.asarray(labels).reshape(-1)
    if y.shape != (p.shape[0],) or not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= p.shape[1]:
        raise fail("labels_heldout", f"to be {p.shape[0]} option indices in [0, {p.shape[1]})", y[:5])
    alpha = 1.0 - check_rate(coverage, "coverage")
    n = len(y)
    _refuse_if_few(n, crc_min_items(alpha), f"option sets that hold the answer {1 - alpha:.0%} of the time")
    scores = np.sort(1.0 - p[np.arange(n), y])  # (n,) ascending
    if np.isnan(scores).any():
        raise fail("probs_heldout", "to give every gold option a probability", "NaN at a gold option")
    rank = math.ceil((n + 1) * (1.0 - alpha) - 1e-9)  # <= n, as the refusal above checked
    return float(scores[rank - 1])


def prediction_sets(probs: object, qhat: float) -> np.ndarray:
    """(M, K) bool: option k is in item i's set when 1 - p_ik <= qhat (NaN options never)."""
    p = check_probs(probs, "probs_test")
    with np.errstate(invalid="ignore"):
        return (1.0 - p) <= qhat


def lac_prediction_sets(
    probs_heldout: object, labels_heldout: object, probs_test: object, coverage: float
) -> np.ndarray:
    """Split conformal LAC sets of the test items at `coverage` (`lac_quantile`, then
    `prediction_sets`): P(gold in set) >= coverage on exchangeable data."""
    return prediction_sets(probs_test, lac_quantile(probs_heldout, labels_heldout, coverage))
