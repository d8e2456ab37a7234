"""Calibration by group: ECE, accuracy and a selective threshold per subject (or any group
label an item carries), so that a model well calibrated on average but overconfident on
one subject is seen, and a threshold can hold its guarantee within each subject.

    rows = group_metrics({"base": p0, "ts": p1}, gold, groups)        # one GroupRow per (variant, group)
    fits = mondrian_thresholds(SelectiveAnswerer("crc", 0.1), confidence, correct, groups)

`group_metrics` is the studio's own ECE (15 equal-width bins), accuracy and 90% percentile
bootstrap interval (metrics.intervals) on each group's items alone. Every variant is read
on the same items, so its rows line up with the others'.

`mondrian_thresholds` is the Mondrian (group-conditional) form of selective answering
(Vovk et al. 2003; crepes, MAPIE's conditional guarantees): the SelectiveAnswerer is fitted
on each group's held-out items alone, and a new item is answered under its own group's
threshold. Each group's guarantee then holds given the group (the error among that
subject's questions), not only on average over subjects, which a single threshold cannot
promise: an easy subject can hide a hard one. The price is items: every group needs the
rule's minimum count on its own (`min_items`). A group with fewer is named with the count it
has and the count it needs, never merged into another, since a merged group's guarantee
is not a guarantee about either subject.

Example (checkable by hand, n_bins = 10): group "a" holds confidences 0.95 (right) and
0.65 (wrong): accuracy 0.5, ECE = 0.5 * |0.95 - 1| + 0.5 * |0.65 - 0| = 0.35; group "b"
holds 0.8 (right): accuracy 1.0, ECE 0.2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from calm_core.calibration import metrics
from calm_core.calibration.selective import (
    CRC,
    Threshold,
    TooFewItems,
    crc_min_items,
    ltt_min_items,
)
from calm_core.calibration.selective_answerer import SelectiveAnswerer

NO_GROUP = "(none)"  # the group of an item without a subject: shown, never dropped
LEVEL = 0.9  # the studio's interval level (metrics.intervals)


@dataclass(frozen=True)
class GroupRow:
    """One variant on one group's items: the count, accuracy, ECE and its 90% interval."""

    variant: str
    group: str
    n: int
    acc: float
    ece: float
    ece_low: float
    ece_high: float


@dataclass(frozen=True)
class GroupThreshold:
    """One group's threshold (None when the group is too small: `needed` says how many
    held-out items it must have, `refusal` the rule's own words)."""

    group: str
    n: int
    needed: int
    threshold: Threshold | None
    refusal: str | None = None

    @property
    def too_small(self) -> bool:
        return self.threshold is None


def group_labels(groups: Sequence[str | None]) -> np.ndarray:
    """Each item's group as text; a missing or blank one is NO_GROUP (its own group)."""
    return np.array([str(g).strip() if g is not None and str(g).strip() else NO_GROUP for g in groups], dtype=object)


def group_order(labels: np.ndarray) -> list[str]:
    """The groups, sorted by name, NO_GROUP last: the same order in every table."""
    names = sorted({str(g) for g in labels} - {NO_GROUP})
    return names + ([NO_GROUP] if NO_GROUP in set(labels) else [])


def _check_groups(labels: np.ndarray, n: int) -> None:
    if len(labels) != n:
        raise ValueError(f"Expected `groups` to hold {n} labels (one per item), but got {len(labels)}")


def group_row(variant: str, group: str, probs: np.ndarray, gold: np.ndarray, n_bins: int) -> GroupRow:
    """`variant` on one group's items: ECE with the studio's interval, accuracy, count."""
    low, high = metrics.intervals(probs, gold, names=("ece",), level=LEVEL)["ece"]
    ece = metrics.ece(probs, gold, n_bins=n_bins)
    return GroupRow(variant, group, len(gold), metrics.accuracy(probs, gold), ece, low, high)


def group_metrics(
    probs: Mapping[str, object], gold: object, groups: Sequence[str | None], n_bins: int = 15
) -> list[GroupRow]:
    """One GroupRow per (group, variant), groups in `group_order`, variants in `probs`' order.

    probs: variant -> (N, K) option probabilities (zero-padded rows summing to 1), every
    variant on the same N items; gold (N,) gold indices; groups (N,) each item's group."""
    y = np.asarray(gold, dtype=np.int64).reshape(-1)
    labels = group_labels(groups)
    _check_groups(labels, len(y))
    arrays = {name: np.asarray(p, dtype=np.float64) for name, p in probs.items()}
    rows = []
    for group in group_order(labels):
        mask = labels == group  # (N,)
        rows += [group_row(name, group, p[mask], y[mask], n_bins) for name, p in arrays.items()]
    return rows


def min_items(answerer: SelectiveAnswerer) -> int:
    """The fewest held-out items with which `answerer`'s rule can hold at its target: what
    each group needs on its own (calibration/selective.py's counts)."""
    if answerer.rule == CRC:
        return crc_min_items(answerer.target_level)
    return ltt_min_items(answerer.target_level, answerer.delta or 0.0)


def mondrian_thresholds(
    answerer: SelectiveAnswerer, confidence: object, correct: object, groups: Sequence[str | None]
) -> list[GroupThreshold]:
    """A threshold per group, `answerer`'s rule fitted on that group's items alone (a fresh
    copy per group, so `answerer` itself stays unfitted); a group with too few items gets
    none, with the count it needs. confidence (N,), correct (N,) in {0, 1}, groups (N,)."""
    c = np.asarray(confidence, dtype=np.float64).reshape(-1)
    a = np.asarray(correct, dtype=np.float64).reshape(-1)
    labels = group_labels(groups)
    _check_groups(labels, len(c))
    needed = min_items(answerer)
    return [
        _fit_group(answerer, group, c[labels == group], a[labels == group], needed) for group in group_order(labels)
    ]


def _fit_group(answerer: SelectiveAnswerer, group: str, c: np.ndarray, a: np.ndarray, needed: int) -> GroupThreshold:
    fresh = SelectiveAnswerer(**answerer.get_params())
    try:
        return GroupThreshold(group, len(c), needed, fresh.calibrate_scores(c, a).record_)
    except TooFewItems as exc:
        return GroupThreshold(group, len(c), exc.needed, None, str(exc))


__all__ = [
    "NO_GROUP",
    "GroupRow",
    "GroupThreshold",
    "group_labels",
    "group_metrics",
    "group_order",
    "min_items",
    "mondrian_thresholds",
]
