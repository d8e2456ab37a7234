"""The comparison that decided a recommendation, in words, where its sentence cannot show it.

    deciding_comparison(run.results(), "calm")
    # "CALM was trained on S_T, so it was compared on the 28 S_V items alone: NLL 1.362
    #  against temperature scaling's 1.380 on the same items, ..."

A run that fits its post-hoc calibrators on every labelled item (calibrate_on = all)
decides in two stages (training/tasks/mcqa.py `_pooled_recommendation`): the model as it
is against the calibrators on S_T + S_V out of fold, then the trained model against them
on S_V alone, which it never trained on. The recommendation sentence reads the first
stage; when the trained model lost the second, that comparison (on the same S_V items)
is what decided, and a reader must see it. Pure over results.json, shared
by Compare, the Monitor, the report and `calm train` through `advice.recommendation_line`.
"""

from __future__ import annotations

from calm_core.calibration.metrics.paired import MIN_PAIRED_ITEMS, PairedDifference
from calm_core.calibration.recommend import simplicity
from calm_core.results.verdict import LEVEL, variant_label
from calm_core.runs.recommendation import Comparison, VariantFigures
from calm_core.runs.records import RunResults


def deciding_comparison(results: RunResults, method: str) -> str | None:
    """The S_V comparison between the recommended variant and the trained model `method`
    when the recommendation was decided on other items (calibrate_on = all) and the trained
    model was not the one chosen: both NLLs on the same S_V items, the paired difference
    with its interval, and why it went the way it did. None where the recommendation
    sentence already is the deciding comparison."""
    rec = results.recommendation
    stage = rec.stages.get("S_V") if rec else None
    if rec is None or stage is None or not rec.variant:
        return None
    chosen, figures, comparison = rec.variant, stage.heldout, stage.comparison or Comparison()
    if chosen == method or method not in figures:
        return None
    text = f"{variant_label(method)} was trained on S_T, so it was compared on the {comparison.n} S_V items alone"
    if chosen in figures:
        text += (
            f": NLL {_nll(figures[method])} against {variant_label(chosen)}'s {_nll(figures[chosen])} on the same items"
        )
    if not figures[method].kept_accuracy:
        return f"{text}; it lost accuracy there, so it could not be recommended."
    versus = _difference(comparison, stage.variant, chosen, method)
    if versus is not None:
        return f"{text}; {_versus_words(chosen, method, versus)}."
    gain = comparison.against_reference.get(method)
    if gain is None:
        return f"{text}."
    return (
        f"{text}; its own NLL change against {variant_label(comparison.reference)} there is "
        f"{_interval(gain)}, not wholly below 0, so it is not shown to help."
    )


def _nll(figures: VariantFigures) -> str:
    return f"{figures.nll:.3f}" if figures.nll is not None else "-"


def _difference(comparison: Comparison, stage_chosen: str | None, chosen: str, method: str) -> PairedDifference | None:
    """chosen - method, per item, on S_V: recorded when the S_V stage chose `chosen` with
    `method` as its runner-up (or the reverse, negated); None otherwise."""
    d = comparison.against_runner_up
    if d is None:
        return None
    if comparison.runner_up == method and stage_chosen == chosen:
        return d
    if comparison.runner_up == chosen and stage_chosen == method:
        return PairedDifference(-d.mean, -d.hi, -d.lo, d.n, d.level)
    return None


def _versus_words(chosen: str, method: str, d: PairedDifference) -> str:
    """The difference chosen - method and why it decided: a tie won by the simpler one, or a
    difference beyond the noise."""
    what = f"the per-item NLL difference, {variant_label(chosen)} minus {variant_label(method)}, is {_interval(d)}"
    if d.lower_for_sure:
        return f"{what}, wholly below 0: {variant_label(chosen)} is better on these items"
    if d.n < MIN_PAIRED_ITEMS:
        why = f"{d.n} items are too few to tell them apart (under {MIN_PAIRED_ITEMS})"
    else:
        why = "which holds 0, so these items cannot tell them apart"
    simpler = min((chosen, method), key=simplicity)
    return f"{what}, {why}, and the simpler one, {variant_label(simpler)}, is recommended"


def _interval(d: PairedDifference) -> str:
    """ "+0.018 (90% interval -0.039 to +0.075)"."""
    return f"{d.mean:+.3f} ({LEVEL} interval {d.lo:+.3f} to {d.hi:+.3f})"
