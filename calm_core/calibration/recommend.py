"""Which calibrator to use, chosen on S_V (never on a test split), with the evidence.

    fitted, how = cross_fitted(base_logits, gold, {"ts": TemperatureScaler, "vs": VectorScaler})
    pick = recommend({"base": base_probs, "calm": calm_probs, **fitted}, gold)   # (N, K) on S_V each
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
from typing import Any, Sequence

import numpy as np

from calm_core.calibration import metrics
from calm_core.calibration.posthoc.base import MIN_FIT_ITEMS

ACCURACY_SLACK = 0.01  # one point of accuracy (or one item, on sets under 100 items)
CROSS_FIT_FOLDS = 5
RULE = (
    "lowest S_V NLL among the variants whose S_V accuracy is within one point (one item under 100 items) "
    "of the base model's; post-hoc calibrators cross-fitted on S_V, CALM at its selected step"
)


IN_SAMPLE = "fitted and scored on the same"  # how `cross_fitted` says its figures are in-sample


def accuracy_slack(n: int) -> float:
    """How much accuracy may fall and still count as kept: one point, or one item when a
    set has fewer than 100 items (one item is then more than a point)."""
    return max(ACCURACY_SLACK, 1.0 / n) if n > 0 else ACCURACY_SLACK


def cross_fitted(
    logits: np.ndarray,
    gold: np.ndarray,
    calibrators: dict[str, Any],
    folds: int = CROSS_FIT_FOLDS,
    seed: int = 0,
    min_fit: int = MIN_FIT_ITEMS,
) -> tuple[dict[str, np.ndarray], str]:
    """(name -> probabilities (N, K) on the fit set, how they were made). Cross-fitted when
    S_V allows: each fold predicted by the calibrator fitted on the others (`cls.fit(logits,
    labels)`, `.probs(logits)`), with the most folds up to `folds` whose training part has
    `min_fit` items; else fitted and scored on all of S_V (in-sample, which flatters it),
    and said so. {} with fewer than `min_fit` items (no calibrator can be fitted)."""
    n = len(gold)
    if n < min_fit:
        return {}, f"S_V has {n} items, fewer than {min_fit}: no post-hoc calibrator"
    usable = [k for k in range(2, folds + 1) if n - -(-n // k) >= min_fit]
    if not usable:
        return (
            {name: cls.fit(logits, gold).probs(logits) for name, cls in calibrators.items()},
            f"{IN_SAMPLE} {n} S_V items (too few to cross-fit): optimistic",
        )
    k = max(usable)
    parts = np.array_split(np.random.default_rng(seed).permutation(n), k)
    out: dict[str, np.ndarray] = {}
    for name, cls in calibrators.items():
        probs = np.zeros(np.shape(logits), dtype=np.float64)  # (N, K)
        for part in parts:
            rest = np.setdiff1d(np.arange(n), part)
            probs[part] = cls.fit(logits[rest], gold[rest]).probs(logits[part])
        out[name] = probs
    return out, f"{k}-fold cross-fitted on S_V"


@dataclass
class Recommendation:
    """The chosen variant, why, and every candidate's S_V figures."""

    variant: str | None
    reason: str
    heldout: dict[str, dict[str, float]] = field(default_factory=dict)  # variant -> nll, acc, ece, kept
    rule: str = RULE
    posthoc_fit: str = ""  # how the post-hoc calibrators' S_V figures were made (cross_fitted)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def recommend(
    heldout_probs: dict[str, np.ndarray],
    gold: np.ndarray,
    reference: str = "base",
    posthoc_fit: str = "",
    in_sample: Sequence[str] = (),
) -> Recommendation:
    """The variant with the lowest S_V NLL among those that keep `reference`'s S_V accuracy
    (see the module docstring); `heldout_probs`: variant -> (N, K) probabilities on S_V;
    `in_sample`: the variants whose S_V figures come from a fit on the same items (refused
    when `reference` makes no mistake on S_V: `_unidentifiable`)."""
    if reference not in heldout_probs:
        return Recommendation(None, f"no `{reference}` variant on S_V to compare accuracy against")
    figures = {
        name: {
            "nll": metrics.nll(p, gold),
            "acc": metrics.accuracy(p, gold),
            "ece": metrics.ece(p, gold),
            "confidence": metrics.mean_confidence(p),
        }
        for name, p in heldout_probs.items()
    }
    floor = figures[reference]["acc"] - accuracy_slack(len(gold)) - 1e-12
    for f in figures.values():
        f["kept_accuracy"] = f["acc"] >= floor
    no_evidence = _unidentifiable(figures, reference, in_sample)
    for name, f in figures.items():
        f["evidence"] = name not in no_evidence
    kept = {name: f for name, f in figures.items() if f["kept_accuracy"] and f["evidence"]}
    best = min(kept, key=lambda name: kept[name]["nll"])
    losers = sorted((name for name in figures if name != best), key=lambda name: figures[name]["nll"])
    reason = f"{best}: S_V NLL {figures[best]['nll']:.4g}"
    if losers:
        reason += " against " + ", ".join(
            f"{name} {figures[name]['nll']:.4g}"
            + ("" if figures[name]["kept_accuracy"] else " (accuracy lost)")
            + ("" if figures[name]["evidence"] else " (no evidence)")
            for name in losers
        )
    if no_evidence:
        reason += (
            f". {', '.join(sorted(no_evidence))}: fitted in-sample on an S_V that {reference} answers "
            "without a mistake, where any sharper temperature scores better: no evidence, not recommended"
        )
    return Recommendation(best, reason, figures, posthoc_fit=posthoc_fit)


def _unidentifiable(figures: dict[str, dict[str, float]], reference: str, in_sample: Sequence[str]) -> set[str]:
    """In-sample calibrators on an S_V the reference gets all right: their fit runs to a
    temperature near 0 (S_V NLL near 0), which says nothing about any other item."""
    if figures[reference]["acc"] < 1.0:
        return set()
    return {name for name in in_sample if name in figures}
