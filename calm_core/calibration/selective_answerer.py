"""Selective answering as an object, in MAPIE's risk-control shape: calibrate on held-out
items, then answer new ones or abstain.

    answerer = SelectiveAnswerer("ltt", target_level=0.1, confidence_level=0.95)
    answerer.calibrate(probs_heldout, y_heldout)     # (N, K) option probabilities, (N,) gold
    answerer.predict(probs_new)                      # (M,) the answered option, ABSTAIN (-1) where it abstains
    answerer.threshold_, answerer.valid_thresholds_, answerer.p_values_

The maths is calibration/selective.py's (`crc_search`, `ltt_search`); this wraps it with
the names of MAPIE's risk controllers (`mapie.risk_control`): `target_level` is the largest
risk the rule allows (here an error rate, a risk where lower is better: the CLI's
`--target-error`), `confidence_level` is 1 - delta, the probability over the held-out draw
with which the ltt rules' guarantee holds (crc's holds in expectation and ignores it).
Fitted state ends in `_` (scikit-learn's convention): the threshold chosen, every threshold
whose test passed (`valid_thresholds_`, MAPIE's `valid_predict_params`), the ltt rules'
p-values of the thresholds tried (`p_values_`), and the `Threshold` record that
`calm selective`, Compare and the export read (`record_`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from calm_core.calibration.fitted import not_fitted
from calm_core.calibration.selective import (
    CRC,
    DEFAULT_DELTA,
    LTT,
    LTT_ANSWERED,
    RULES,
    Search,
    Threshold,
    check_probs,
    check_rate,
    check_scores,
    crc_search,
    fail,
    ltt_search,
    threshold_record,
)

ABSTAIN = -1  # `predict`'s answer where the confidence is below the threshold
DELTA_DECIMALS = 12  # 1 - 0.95 is 0.050000000000000044: delta as the CLI's --delta 0.05 gives it


class SelectiveAnswerer:
    """A confidence threshold chosen on held-out items by `rule` (RULES: crc, ltt,
    ltt-answered) so that the error stays at most `target_level` (module docstring)."""

    def __init__(self, rule: str = LTT, target_level: float = 0.1, confidence_level: float = 1 - DEFAULT_DELTA):
        self.rule = rule
        self.target_level = target_level
        self.confidence_level = confidence_level

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's arguments by name (scikit-learn's convention)."""
        return {"rule": self.rule, "target_level": self.target_level, "confidence_level": self.confidence_level}

    @property
    def delta(self) -> float | None:
        """1 - confidence_level for the ltt rules; None for crc (a guarantee in expectation)."""
        if self.rule == CRC:
            return None
        return round(1.0 - check_rate(self.confidence_level, "confidence_level"), DELTA_DECIMALS)

    def calibrate(self, probs: object, y: object) -> SelectiveAnswerer:
        """Choose the threshold on held-out `probs` (N, K; NaN for an option an item lacks)
        and gold indices `y` (N,); returns self. Too few items for the target: TooFewItems,
        with the count needed."""
        confidence, correct = top_label(probs, y)
        return self.calibrate_scores(confidence, correct)

    def calibrate_scores(self, confidence: object, correct: object) -> SelectiveAnswerer:
        """`calibrate` from each item's top-label confidence (N,) and correctness (N,) in {0, 1}."""
        if self.rule not in RULES:
            raise fail("rule", f"to be one of {', '.join(RULES)}", repr(self.rule))
        c, a = check_scores(confidence, correct)
        alpha = check_rate(self.target_level, "target_level")
        search = self._search(c, a, alpha)
        self.record_: Threshold = threshold_record(self.rule, alpha, self.delta, search.threshold, c, a)
        self.threshold_: float = search.threshold
        self.candidates_: np.ndarray = search.candidates
        self.valid_thresholds_: np.ndarray = search.candidates[search.valid]
        self.p_values_: np.ndarray | None = search.p_values
        self.n_calibration_: int = len(c)
        return self

    def _search(self, c: np.ndarray, a: np.ndarray, alpha: float) -> Search:
        delta = self.delta
        if delta is None:
            return crc_search(c, a, alpha)
        return ltt_search(c, a, alpha, delta, answered=self.rule == LTT_ANSWERED)

    def answers(self, probs: object) -> np.ndarray:
        """(M,) bool: whether each item's top-label confidence reaches the threshold."""
        if not hasattr(self, "threshold_"):
            raise not_fitted(self, "calibrate")
        p = check_probs(probs, "probs")
        return np.asarray(np.nanmax(p, axis=1) >= self.threshold_)

    def predict(self, probs: object) -> np.ndarray:
        """(M,) int: each item's most probable option where it is answered, ABSTAIN elsewhere."""
        answered = self.answers(probs)
        return np.where(answered, np.nanargmax(np.asarray(probs, dtype=np.float64), axis=1), ABSTAIN)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"


def top_label(probs: object, y: object) -> tuple[np.ndarray, np.ndarray]:
    """(confidence (N,), correct (N,)) of option probabilities (N, K; NaN for a missing
    option) and gold indices (N,): max_k p_ik and 1[argmax_k p_ik = y_i]."""
    p = check_probs(probs, "probs")
    gold = np.asarray(y).reshape(-1)
    if gold.shape != (p.shape[0],):
        raise fail("y", f"to hold {p.shape[0]} gold indices", gold.shape)
    return np.nanmax(p, axis=1), (np.nanargmax(p, axis=1) == gold).astype(np.float64)


__all__ = ["ABSTAIN", "CRC", "LTT", "LTT_ANSWERED", "SelectiveAnswerer", "top_label"]
