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

"Keep the model as it is" is a candidate, and the default. A change from base is
recommended only when the data show it: the paired bootstrap of per-item S_V NLL
differences (metrics.paired, 90% interval) of the candidate against base lies wholly
below zero. Among the candidates that pass, the lowest S_V NLL wins, unless a simpler one
that also passes cannot be told from it (its paired interval against the winner includes
zero): then the simpler one is recommended, since the data give no reason for more.
Simpler means: base (nothing changes), then the post-hoc calibrators by their declared
`order` (a few parameters on base's logits, no weight changed), then anything else (a
trained model, whose weights changed). Base is always a candidate: it is the reference,
so it keeps its own accuracy, and nothing is fitted on S_V for it.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from calm_core.calibration import metrics
from calm_core.calibration.metrics.paired import PAIRED_LEVEL, PairedDifference, paired_bootstrap
from calm_core.calibration.posthoc import calibrated_probs, calibrators, fit_calibrator
from calm_core.calibration.posthoc.base import MIN_FIT_ITEMS
from calm_core.runs.recommendation import HELDOUT_ITEMS, LABELLED_ITEMS, Comparison, Recommendation, VariantFigures

__all__ = ["HELDOUT_ITEMS", "LABELLED_ITEMS", "Recommendation", "cross_fitted", "recommend"]

ACCURACY_SLACK = 0.01  # one point of accuracy (or one item, on sets under 100 items)
CROSS_FIT_FOLDS = 5
RULE = (
    "lowest S_V NLL among the variants whose S_V accuracy is within one point (one item under 100 items) "
    "of the base model's, and only when its per-item NLL difference to base has a 90% paired bootstrap "
    "interval wholly below zero (else keep the model as it is); a simpler variant that cannot be told from "
    "it is preferred; post-hoc calibrators cross-fitted on S_V, CALM at its selected step"
)
KEEP, CHANGE = "keep", "change"  # Recommendation.decision
# Where a run fits its post-hoc calibrators (TrainConfig.calibrate_on): on S_V alone, or on
# every labelled item (S_T + S_V: the base model was trained on neither), k-fold cross-fitted
# so that the recommendation reads out-of-fold predictions on all of them.
HELDOUT_ONLY, ALL_LABELLED = "heldout", "all"
CALIBRATE_ON = (HELDOUT_ONLY, ALL_LABELLED)


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
    features: np.ndarray | None = None,
    where: str = "S_V",
    progress: Callable[[int, int], None] | None = None,
) -> tuple[dict[str, np.ndarray], str]:
    """(name -> probabilities (N, K) on the fit set, how they were made). Cross-fitted when
    S_V allows: each fold predicted by the calibrator fitted on the others (`fit_calibrator`,
    `calibrated_probs`), with the most folds up to `folds` whose training part has
    `min_fit` items; else fitted and scored on all of S_V (in-sample, which flatters it),
    and said so. {} with fewer than `min_fit` items (no calibrator can be fitted).
    A calibrator that reads hidden-state `features` (ats) is a candidate only with them
    and when the folds' training parts reach its own `min_items`: it is never scored
    in-sample (it chooses its own features by cross-fitting, and would flatter itself).
    `where` names the fit set in the returned words ("S_V", or all labelled items);
    `progress(done, total)` is told before each (calibrator, fold) fit and after the last."""
    n = len(gold)
    if n < min_fit:
        return {}, f"S_V has {n} items, fewer than {min_fit}: no post-hoc calibrator"
    k = fold_count(n, folds, min_fit)
    plain = {name: cls for name, cls in calibrators.items() if not cls.reads_features}
    if not k:
        return (
            {name: fit_calibrator(cls, logits, gold).probs(logits) for name, cls in plain.items()},
            f"{IN_SAMPLE} {n} S_V items (too few to cross-fit): optimistic",
        )
    parts = np.array_split(np.random.default_rng(seed).permutation(n), k)
    fitted_here = cross_fit_calibrators(n, k, calibrators, features is not None)
    out: dict[str, np.ndarray] = {}
    for index, (name, cls) in enumerate(fitted_here.items()):
        probs = np.zeros(np.shape(logits), dtype=np.float64)  # (N, K)
        for offset, part in enumerate(parts):
            if progress is not None:
                progress(index * k + offset, len(fitted_here) * k)
            rest = np.setdiff1d(np.arange(n), part)
            h = (features[rest], features[part]) if features is not None else (None, None)
            fitted = fit_calibrator(cls, logits[rest], gold[rest], h[0])
            probs[part] = calibrated_probs(fitted, logits[part], h[1])
        out[name] = probs
    if progress is not None:
        progress(len(fitted_here) * k, len(fitted_here) * k)
    return out, f"{k}-fold cross-fitted on {where}"


def fold_count(n: int, folds: int = CROSS_FIT_FOLDS, min_fit: int = MIN_FIT_ITEMS) -> int:
    """The most folds up to `folds` whose training parts keep `min_fit` of `n` items; 0
    when even two folds would not (then `cross_fitted` fits in-sample)."""
    usable = [k for k in range(2, folds + 1) if n - -(-n // k) >= min_fit]
    return max(usable, default=0)


def cross_fit_calibrators(n: int, k: int, calibrators: dict[str, Any], features: bool) -> dict[str, Any]:
    """The calibrators `cross_fitted` fits on `k` folds of `n` items: those on logits, and
    those that read features when there are features and each fold's training part reaches
    their `min_items`."""
    smallest_fit = n - -(-n // k)
    return {
        name: cls
        for name, cls in calibrators.items()
        if not cls.reads_features or (features and smallest_fit >= cls.min_items)
    }


def cross_fit_work(n: int, calibrators: dict[str, Any], features: bool = True) -> float:
    """What `cross_fitted` on `n` items costs, in item-fits (PosthocCalibrator.fit_work):
    each calibrator it fits, once per fold on the items the fold leaves (or once in-sample);
    the time estimate's count for the recommendation's cross-fitting."""
    if n < MIN_FIT_ITEMS:
        return 0.0
    k = fold_count(n)
    if not k:
        return sum(cls.fit_work(n) for cls in calibrators.values() if not cls.reads_features)
    fitted = cross_fit_calibrators(n, k, calibrators, features)
    return sum(k * cls.fit_work(n - -(-n // k)) for cls in fitted.values())


def simplicity(variant: str, reference: str = "base") -> tuple[int, int, str]:
    """A sort key, simplest first: the reference (nothing changes), then the post-hoc
    calibrators by their declared `order` (a few parameters on its logits), then anything
    else (a trained model: its weights changed)."""
    if variant == reference:
        return (0, 0, variant)
    found = calibrators().get(variant)
    return (1, found.order, variant) if found is not None else (2, 0, variant)


def recommend(
    heldout_probs: dict[str, np.ndarray],
    gold: np.ndarray,
    reference: str = "base",
    posthoc_fit: str = "",
    in_sample: Sequence[str] = (),
    items: str = HELDOUT_ITEMS,
) -> Recommendation:
    """What to use, chosen on S_V (see the module docstring): `reference` unless a candidate
    that keeps its S_V accuracy has a lower S_V NLL beyond the noise. `heldout_probs`:
    variant -> (N, K) probabilities on S_V; `in_sample`: the variants whose S_V figures come
    from a fit on the same items (refused when `reference` makes no mistake on S_V:
    `_unidentifiable`); `items`: what the compared items are, in words (LABELLED_ITEMS when
    they are all labelled items, out of fold), recorded in the comparison for the sentence."""
    if reference not in heldout_probs:
        return Recommendation(None, f"no `{reference}` variant on S_V to compare accuracy against", rule=RULE)
    figures = _figures(heldout_probs, gold, reference, in_sample)
    candidates = [name for name, f in figures.items() if f["kept_accuracy"] and f["evidence"]]
    paired = paired_bootstrap({name: metrics.item_nll(heldout_probs[name], gold) for name in candidates})
    chosen = _choose(candidates, figures, paired, reference)
    return Recommendation(
        chosen,
        _reason(figures, chosen, reference),
        {name: VariantFigures(**f) for name, f in figures.items()},
        rule=RULE,
        posthoc_fit=posthoc_fit,
        decision=KEEP if chosen == reference else CHANGE,
        comparison=_comparison(chosen, candidates, figures, paired, reference, len(gold), items),
    )


def _figures(
    heldout_probs: dict[str, np.ndarray], gold: np.ndarray, reference: str, in_sample: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """variant -> its S_V nll, acc, ece, confidence, and whether it kept the reference's
    accuracy and is evidence at all."""
    figures: dict[str, dict[str, Any]] = {
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
    return figures


def _choose(
    candidates: list[str],
    figures: dict[str, dict[str, Any]],
    paired: dict[str, dict[str, PairedDifference]],
    reference: str,
) -> str:
    """The reference, unless some candidate's NLL is lower than the reference's for sure:
    then the lowest-NLL such candidate, or the simplest of those that cannot be told from it."""
    shown = [name for name in candidates if name != reference and paired[name][reference].lower_for_sure]
    if not shown:
        return reference
    best = min(shown, key=lambda name: figures[name]["nll"])
    tied = [name for name in shown if name == best or paired[name][best].undecided]
    return min(tied, key=lambda name: simplicity(name, reference))


def _comparison(
    chosen: str,
    candidates: list[str],
    figures: dict[str, dict[str, Any]],
    paired: dict[str, dict[str, PairedDifference]],
    reference: str,
    n: int,
    items: str,
) -> Comparison:
    """The evidence the sentence reads: the item count and level, each candidate's per-item
    NLL difference to the reference (candidate - reference), and the chosen one's to its
    runner-up (chosen - runner-up), the lowest-NLL other candidate (None: no other one kept
    accuracy), and which of the two is simpler. `items`: what the n items are, in words."""
    others = sorted((name for name in candidates if name != chosen), key=lambda name: figures[name]["nll"])
    runner_up = others[0] if others else None
    return Comparison(
        score="per-item NLL on S_V",
        n=n,
        level=PAIRED_LEVEL,
        reference=reference,
        candidates=tuple(candidates),
        against_reference={name: paired[name][reference] for name in candidates if name != reference},
        runner_up=runner_up,
        against_runner_up=paired[chosen][runner_up] if runner_up else None,
        simpler=min((chosen, runner_up), key=lambda name: simplicity(name, reference)) if runner_up else chosen,
        items=items,
    )


def _reason(figures: dict[str, dict[str, Any]], chosen: str, reference: str) -> str:
    """Every variant's S_V NLL, the chosen one first, with why a variant did not count."""
    losers = sorted((name for name in figures if name != chosen), key=lambda name: figures[name]["nll"])
    reason = f"{chosen}: S_V NLL {figures[chosen]['nll']:.4g}"
    if losers:
        reason += " against " + ", ".join(
            f"{name} {figures[name]['nll']:.4g}"
            + ("" if figures[name]["kept_accuracy"] else " (accuracy lost)")
            + ("" if figures[name]["evidence"] else " (no evidence)")
            for name in losers
        )
    no_evidence = sorted(name for name, f in figures.items() if not f["evidence"])
    if no_evidence:
        reason += (
            f". {', '.join(no_evidence)}: fitted in-sample on an S_V that {reference} answers "
            "without a mistake, where any sharper temperature scores better: no evidence, not recommended"
        )
    return reason


def _unidentifiable(figures: dict[str, dict[str, float]], reference: str, in_sample: Sequence[str]) -> set[str]:
    """In-sample calibrators on an S_V the reference gets all right: their fit runs to a
    temperature near 0 (S_V NLL near 0), which says nothing about any other item."""
    if figures[reference]["acc"] < 1.0:
        return set()
    return {name for name in in_sample if name in figures}
