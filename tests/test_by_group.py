"""Calibration by group (calibration/by_group.py): per-subject ECE, accuracy and count
against a hand-computed example and a naive loop, and the Mondrian threshold per group,
with groups too small named and never merged."""

from __future__ import annotations

import numpy as np
import pytest

from calm_core.calibration import metrics
from calm_core.calibration.by_group import NO_GROUP, group_metrics, min_items, mondrian_thresholds
from calm_core.calibration.selective import crc_threshold, ltt_threshold
from calm_core.calibration.selective_answerer import SelectiveAnswerer

# The module docstring's example: group a = 0.95 right, 0.65 wrong; group b = 0.8 right.
PROBS = np.array([[0.95, 0.05], [0.65, 0.35], [0.2, 0.8]])
GOLD = np.array([0, 1, 1])
GROUPS = ["a", "a", "b"]


def test_per_group_ece_accuracy_and_count_match_the_hand_computed_example() -> None:
    rows = group_metrics({"base": PROBS}, GOLD, GROUPS, n_bins=10)
    assert [(r.variant, r.group, r.n) for r in rows] == [("base", "a", 2), ("base", "b", 1)]
    assert rows[0].acc == 0.5 and rows[0].ece == pytest.approx(0.35)
    assert rows[1].acc == 1.0 and rows[1].ece == pytest.approx(0.2)
    # the interval is the studio's own 90% bootstrap on the group's items alone
    assert [rows[0].ece_low, rows[0].ece_high] == metrics.intervals(PROBS[:2], GOLD[:2], names=("ece",))["ece"]


def test_every_variant_gets_a_row_per_group_and_a_missing_subject_is_its_own_group() -> None:
    flat = np.full((3, 2), 0.5)
    rows = group_metrics({"base": PROBS, "flat": flat}, GOLD, ["a", None, "a"], n_bins=10)
    assert [(r.group, r.variant, r.n) for r in rows] == [
        ("a", "base", 2),
        ("a", "flat", 2),
        (NO_GROUP, "base", 1),
        (NO_GROUP, "flat", 1),
    ]
    assert rows[1].ece == pytest.approx(0.0)  # flat on a: confidence 0.5, one of two right


@pytest.mark.parametrize("n_bins", [10, 15])
def test_group_metrics_equal_the_metrics_on_each_groups_items(n_bins: int) -> None:
    rng = np.random.default_rng(3)
    z = rng.normal(0.0, 2.0, size=(90, 4))
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    y = rng.integers(0, 4, 90)
    groups = rng.choice(["law", "math", "physics"], 90)
    for row in group_metrics({"m": p}, y, list(groups), n_bins=n_bins):
        mask = groups == row.group
        assert row.n == mask.sum()
        assert row.ece == metrics.ece(p[mask], y[mask], n_bins=n_bins) and row.acc == metrics.accuracy(p[mask], y[mask])
        # the studio's 90% interval (metrics.intervals), on the group's items alone
        assert [row.ece_low, row.ece_high] == metrics.intervals(p[mask], y[mask], names=("ece",), level=0.9)["ece"]


def test_groups_must_match_the_items() -> None:
    with pytest.raises(ValueError, match="Expected `groups` to hold 3 labels"):
        group_metrics({"base": PROBS}, GOLD, ["a", "b"])


def _scores(n: int, rng: np.random.Generator, skill: float) -> tuple[np.ndarray, np.ndarray]:
    confidence = rng.uniform(0.3, 1.0, n)
    return confidence, (rng.uniform(size=n) < np.clip(confidence * skill, 0, 1)).astype(float)


def test_mondrian_fits_each_group_alone_and_names_the_small_ones_with_the_count_needed() -> None:
    rng = np.random.default_rng(0)
    (c1, a1), (c2, a2), (c3, a3) = _scores(80, rng, 1.0), _scores(60, rng, 0.8), _scores(5, rng, 1.0)
    confidence, correct = np.concatenate([c1, c2, c3]), np.concatenate([a1, a2, a3])
    groups = ["easy"] * 80 + ["hard"] * 60 + ["tiny"] * 5
    answerer = SelectiveAnswerer("crc", target_level=0.1)
    fits = {f.group: f for f in mondrian_thresholds(answerer, confidence, correct, groups)}
    assert list(fits) == ["easy", "hard", "tiny"] and not hasattr(answerer, "threshold_")
    assert fits["easy"].threshold == crc_threshold(c1, a1, 0.1)
    assert fits["hard"].threshold == crc_threshold(c2, a2, 0.1)
    tiny = fits["tiny"]
    assert tiny.too_small and tiny.n == 5 and tiny.needed == 9 and "at least 9 held-out items" in tiny.refusal
    assert min_items(answerer) == 9 and fits["easy"].needed == 9


def test_mondrian_under_ltt_uses_its_delta_and_its_count() -> None:
    rng = np.random.default_rng(1)
    c, a = _scores(100, rng, 1.0)
    answerer = SelectiveAnswerer("ltt", target_level=0.1, confidence_level=0.95)
    fits = mondrian_thresholds(answerer, c, a, ["x"] * 80 + ["y"] * 20)
    assert fits[0].threshold == ltt_threshold(c[:80], a[:80], 0.1, 0.05)
    assert fits[1].too_small and fits[1].needed == 29 == min_items(answerer) and fits[1].n == 20
