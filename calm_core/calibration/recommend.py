"""Which calibrator to use, chosen on S_V (never on a test split), with the evidence.

    heldout = {"base": base_probs, "calm": calm_probs}                     # (N, K) on S_V
    fits = {"ts": TemperatureScaler, "vs": VectorScaler}                    # fitted by cross-fitting
    pick = recommend(heldout, cross_fitted(base_logits, gold, fits), gold)  # -> Recommendation
    pick.variant, pick.reason, pick.heldout["ts"]["nll"]

The rule: among the variants whose S_V accuracy is within one point (one item on a set
under 100 items) of the base model's, the lowest S_V NLL. NLL is a proper score: it is
lowest where confidence matches accuracy, and a near-uniform forecast, which can have a
small ECE, pays for it. S_V is also where TS and vector scaling are fitted and where the
calibrated stop chose CALM's step, so each gets its S_V figure from data it was not fitted
on where that is possible: post-hoc calibrators are *cross-fitted* (K folds of S_V: fit on
K - 1, predict the one left out), CALM's figure is its selected step's S_V evaluation (the
step was chosen among a few evaluations on the same items, a small optimism that is
stated with the figure), and base has nothing fitted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from calm_core.calibration import metrics

ACCURACY_SLACK = 0.01  # one point of accuracy (or one item, on sets under 100 items)
CROSS_FIT_FOLDS = 5
RULE = ("lowest S_V NLL among the variants whose S_V accuracy is within one point (one item under 100 items) "
        "of the base model's; post-hoc calibrators cross-fitted on S_V, CALM at its selected step")


def accuracy_slack(n: int) -> float:
    """How much accuracy may fall and still count as kept: one point, or one item when a
    set has fewer than 100 items (one item is then more than a point)."""
    return max(ACCURACY_SLACK, 1.0 / n) if n > 0 else ACCURACY_SLACK


def cross_fitted(logits: np.ndarray, gold: np.ndarray, calibrators: dict[str, Any], folds: int = CROSS_FIT_FOLDS,
                 seed: int = 0) -> dict[str, np.ndarray]:
    """name -> out-of-fold probabilities (N, K) on the fit set: each fold predicted by the
    calibrator fitted on the other folds (`cls.fit(logits, labels)`, `.probs(logits)`).
    The folds are one seeded permutation; with fewer than 2 items per fold, {}."""
    n = len(gold)
    if n < 2 * folds:
        return {}
    order = np.random.default_rng(seed).permutation(n)
    parts = np.array_split(order, folds)
    out: dict[str, np.ndarray] = {}
    for name, cls in calibrators.items():
        probs = np.zeros(np.shape(logits), dtype=np.float64)  # (N, K)
        for part in parts:
            rest = np.setdiff1d(order, part)
            probs[part] = cls.fit(logits[rest], gold[rest]).probs(logits[part])
        out[name] = probs
    return out


@dataclass
class Recommendation:
    """The chosen variant, why, and every candidate's S_V figures."""

    variant: str | None
    reason: str
    heldout: dict[str, dict[str, float]] = field(default_factory=dict)  # variant -> nll, acc, ece, kept
    rule: str = RULE

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def recommend(heldout_probs: dict[str, np.ndarray], gold: np.ndarray, reference: str = "base") -> Recommendation:
    """The variant with the lowest S_V NLL among those that keep `reference`'s S_V accuracy
    (see the module docstring); `heldout_probs`: variant -> (N, K) probabilities on S_V."""
    if reference not in heldout_probs:
        return Recommendation(None, f"no `{reference}` variant on S_V to compare accuracy against")
    figures = {name: {"nll": metrics.nll(p, gold), "acc": metrics.accuracy(p, gold), "ece": metrics.ece(p, gold),
                      "confidence": metrics.mean_confidence(p)} for name, p in heldout_probs.items()}
    floor = figures[reference]["acc"] - accuracy_slack(len(gold)) - 1e-12
    for f in figures.values():
        f["kept_accuracy"] = f["acc"] >= floor
    kept = {name: f for name, f in figures.items() if f["kept_accuracy"]}
    best = min(kept, key=lambda name: kept[name]["nll"])
    losers = sorted((name for name in figures if name != best), key=lambda name: figures[name]["nll"])
    reason = f"{best}: S_V NLL {figures[best]['nll']:.4f}"
    if losers:
        reason += " against " + ", ".join(f"{name} {figures[name]['nll']:.4f}"
                                          + ("" if figures[name]["kept_accuracy"] else " (accuracy lost)")
                                          for name in losers)
    return Recommendation(best, reason, figures)
