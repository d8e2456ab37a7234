"""A multiple-choice run's recommendation, chosen on S_V: which variant to use, with its evidence.

    chosen = recommendation(settings, Fit(base, trained, ...), classes, probs, root, progress)

Base, the trained model (at its selected step) and each post-hoc calibrator cross-fitted on
S_V (calibration/recommend.py); with calibrate_on = all, the calibrators are cross-fitted on
S_T + S_V (`pooled_recommendation`). The cross-fitting can take minutes (ATS cross-fits its
own choices inside each fold's fit), so it tells `progress(done, total)` per fit: the
Monitor shows it (status.json `final`), and the run records its seconds (timings.py
`cross_fit`). Why a module of its own: the task module (tasks/mcqa.py) keeps its scores and
forwards; this one only reads the scores it is given.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from calm_core.calibration import metrics
from calm_core.calibration.recommend import ALL_LABELLED, IN_SAMPLE, LABELLED_ITEMS, cross_fitted, recommend
from calm_core.runs.layout import write_heldout_variants
from calm_core.runs.recommendation import Recommendation

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Fit:
    """The scores the recommendation reads: the untouched model's on S_V (`base`, with its
    hidden-state features), the labelled items' arrays (logits, gold, features) it is
    cross-fitted on (S_V's, or S_T + S_V's with calibrate_on = all), and S_V's items."""

    base: Any
    labelled: tuple[np.ndarray, np.ndarray, np.ndarray | None]
    heldout: Any


def recommendation(
    settings: Any,
    fit: Fit,
    classes: dict[str, Any],
    probs: dict[str, np.ndarray],
    root: Any = None,
    progress: Progress | None = None,
) -> Recommendation:
    """The recommendation's record (results.json): `probs` are the S_V forecasts of base,
    the trained model and the thermometer (nothing of theirs fitted on S_V labels), `classes`
    the post-hoc calibrators to cross-fit. With `root`, each variant's S_V probabilities go
    to <root>/heldout/ (selective answering)."""
    if settings.calibrate_on == ALL_LABELLED:
        return pooled_recommendation(settings, fit, classes, probs, root, progress)
    base = fit.base
    posthoc, how = cross_fitted(base.logits, base.gold, classes, features=base.features, progress=progress)
    write_heldout_variants(root, base.gold, base.n_choices, probs, posthoc, how, settings.method, fit.heldout)
    in_sample = list(posthoc) if how.startswith(IN_SAMPLE) else []
    return recommend({**probs, **posthoc}, base.gold, posthoc_fit=how, in_sample=in_sample)


def pooled_recommendation(
    settings: Any,
    fit: Fit,
    classes: dict[str, Any],
    heldout_probs: dict[str, np.ndarray],
    root: Any = None,
    progress: Progress | None = None,
) -> Recommendation:
    """calibrate_on = all: the post-hoc calibrators are k-fold cross-fitted on S_T + S_V, so
    base against them is decided on every labelled item's out-of-fold prediction (more items,
    a narrower interval). The trained model saw S_T, so it is compared on S_V alone, against
    base and the same out-of-fold predictions restricted to S_V: it is recommended only when
    it wins there; otherwise the pooled decision stands. Both comparisons are recorded."""
    logits, gold, features = fit.labelled
    where = "all labelled items (S_T + S_V)"
    posthoc, how = cross_fitted(logits, gold, classes, features=features, where=where, progress=progress)
    in_sample = list(posthoc) if how.startswith(IN_SAMPLE) else []
    pooled = recommend(
        {"base": metrics.softmax(logits), **posthoc}, gold, posthoc_fit=how, in_sample=in_sample, items=LABELLED_ITEMS
    )
    n_heldout = len(fit.heldout)
    n_train, heldout_gold = len(gold) - n_heldout, gold[len(gold) - n_heldout :]
    on_sv = {name: p[n_train:] for name, p in posthoc.items()}
    counts = fit.base.n_choices
    write_heldout_variants(root, heldout_gold, counts, heldout_probs, on_sv, how, settings.method, fit.heldout)
    on_heldout = recommend({**heldout_probs, **on_sv}, heldout_gold, posthoc_fit=how, in_sample=in_sample)
    chosen = on_heldout if on_heldout.variant == settings.method else pooled
    stages = {"all labelled": pooled, "S_V": on_heldout}
    return dataclasses.replace(chosen, calibrate_on=ALL_LABELLED, stages=stages)
