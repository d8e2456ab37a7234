"""Small data handled honestly (issue 30, part 2): what S_V supports, said in one sentence
from thresholds measured by bench/sv_agreement.py, and a suggested split the advice then
accepts (the practitioner's 63 rows, 60 good)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calm_core.data.schema import MCItem
from calm_core.data.split import plan_split
from calm_core.data.split_sizes import (
    AGREEMENT_TARGET,
    CHOOSE_HELDOUT,
    FIXES,
    MIN_HELDOUT,
    NOTE,
    WARN,
    advise_split,
    choose_threshold,
    heldout_support,
    part_sizes,
)

ROOT = Path(__file__).resolve().parent.parent
CURVE = ROOT / "bench" / "results" / "sv_agreement.json"


def _items(n: int) -> list[MCItem]:
    return [MCItem(id=f"q{i}", question=f"question {i}?", choices=["a", "b", "c", "d"], answer=i % 4) for i in range(n)]


def test_the_choose_threshold_is_the_published_curves() -> None:
    """CHOOSE_HELDOUT is not set by hand: it is what choose_threshold gives on the curve
    bench/sv_agreement.py wrote (docs/results.md prints the same table)."""
    published = json.loads(CURVE.read_text())
    agreement = {name: {int(n): row["agreement"] for n, row in rows.items()} for name, rows in published["curve"].items()}
    assert published["agreement_target"] == AGREEMENT_TARGET
    assert published["choose_threshold"] == CHOOSE_HELDOUT == choose_threshold(agreement)
    assert set(published["sizes"]) >= {20, 40, 80, 160} and published["resamples"] >= 200
    assert len(published["curve"]) >= 2  # ARC-Easy and a built-in set
    assert CHOOSE_HELDOUT > MIN_HELDOUT


def test_choose_threshold_needs_every_set_and_every_larger_size() -> None:
    curve = {"a": {20: 0.5, 40: 0.85, 80: 0.7, 160: 0.9}, "b": {20: 0.9, 40: 0.9, 80: 0.9, 160: 0.95}}
    assert choose_threshold(curve, 0.8) == 160  # 40 passes on both, but 80 fails on "a": luck, not enough items
    assert choose_threshold({"a": {20: 0.81, 40: 0.9}}, 0.8) == 20
    assert choose_threshold({"a": {20: 0.5, 40: 0.7}}, 0.8) is None


def test_heldout_support_says_what_the_items_support_in_one_sentence() -> None:
    assert heldout_support(24).startswith("24 held-out items: enough to fit one temperature, not to choose between")
    assert heldout_support(MIN_HELDOUT - 1).startswith(f"{MIN_HELDOUT - 1} held-out items: too few to fit even one")
    assert heldout_support(CHOOSE_HELDOUT) == (
        f"{CHOOSE_HELDOUT} held-out items: enough to fit a temperature and to choose between methods."
    )
    pooled = heldout_support(24, 48)
    assert "With k-fold on all 48 labelled items" in pooled and "compared on S_V alone" in pooled


def test_the_practitioners_63_rows_get_a_suggestion_that_is_then_accepted() -> None:
    """60 good rows, the page's default 60 / 20 / 20: a warning with a larger held-out part;
    that split is then accepted (no warning, no second suggestion), with what its S_V
    supports and the fixes that work."""
    items = _items(60)
    first = plan_split(items, (0.6, 0.2, 0.2), 0, True, source="upload/domain")
    advice = advise_split(first.sizes, (0.6, 0.2, 0.2))
    assert advice.level == WARN and advice.warned and advice.suggestion is not None
    assert advice.message.startswith(heldout_support(first.sizes["heldout"]))
    suggested = [p / 100 for p in advice.suggestion]
    second = plan_split(items, suggested, 0, True, source="upload/domain")
    assert second.sizes["heldout"] > first.sizes["heldout"]
    accepted = advise_split(second.sizes, suggested)
    assert accepted.level == NOTE and not accepted.warned and not accepted.refused and accepted.suggestion is None
    assert accepted.message.startswith(heldout_support(second.sizes["heldout"])) and FIXES in accepted.message


@pytest.mark.parametrize("n", [*range(12, 400, 11), 1000])
@pytest.mark.parametrize("requested", [(0.6, 0.2, 0.2), (0.8, 0.1, 0.1), (0.7, 0.15, 0.15)])
def test_advice_on_a_suggestion_never_warns_again(n: int, requested: tuple[float, float, float]) -> None:
    sizes = dict(zip(("train", "heldout", "test"), part_sizes(n, requested), strict=True))
    advice = advise_split(sizes, requested)
    if advice.suggestion is None:
        return
    suggested = [p / 100 for p in advice.suggestion]
    again = dict(zip(("train", "heldout", "test"), part_sizes(n, suggested), strict=True))
    assert not advise_split(again, suggested).warned


def test_the_agreement_bench_counts_a_clear_gain_found_by_a_large_s_v_and_missed_by_none() -> None:
    """bench/sv_agreement.py on a synthetic pool that is four times too sharp: the test split
    picks a calibrator, S_V of 160 items finds it too, and the summary counts agreement and
    how often S_V's change was worse on T."""
    import numpy as np

    from bench.sv_agreement import Pool, one_resample, summarise

    rng = np.random.default_rng(0)
    gold = rng.integers(0, 4, 600)
    logits = rng.normal(size=(600, 4))
    logits[np.arange(600), gold] += 1.0
    pool = Pool(4.0 * logits, gold, np.zeros((600, 2), dtype=np.float32))
    records = [one_resample(pool, [20, 160], seed) for seed in range(2)]
    large = summarise([r[160] for r in records])
    assert large["agreement"] == 1.0 and large["test_changes"] == 1.0 and large["changes_worse_on_test"] == 0.0
    assert set(large["test_picks"]) <= {"ts", "vs"} and large["resamples"] == 2
    small = summarise([r[20] for r in records])
    assert 0.0 <= small["agreement"] <= 1.0 and sum(small["heldout_picks"].values()) == 2


def test_a_suggested_split_holds_what_the_default_selective_rule_needs() -> None:
    """The practitioner's 70 rows: 40 / 40 / 20 % gave 28 held-out items, one short of the 29
    that selective answering's default rule needs at a 10% target, so Compare refused the
    split the Data page had suggested. The suggestion now counts that rule, and says so."""
    from calm_core.calibration.selective import DEFAULT_RULE, DEFAULT_TARGET, TooFewItems, choose_threshold, min_items
    from calm_core.data.split_sizes import MAX_SELECTIVE_PERCENT, SELECTIVE_HELDOUT, suggest_percent

    assert SELECTIVE_HELDOUT == min_items(DEFAULT_RULE, DEFAULT_TARGET) == 29
    sizes = dict(zip(("train", "heldout", "test"), part_sizes(70, (0.4, 0.4, 0.2)), strict=True))
    advice = advise_split(sizes, (0.4, 0.4, 0.2))
    assert sizes["heldout"] == 28 and advice.level == WARN and advice.suggestion == (39, 41, 20)
    suggested = part_sizes(70, [p / 100 for p in advice.suggestion])
    assert suggested == (27, 29, 14)
    assert advice.message.endswith(
        "That is enough for selective answering's default guarantee at a 10% target error (it needs 29)."
    )
    confident, right = [0.99] * suggested[1], [1] * suggested[1]  # the rule's arithmetic, read back
    assert choose_threshold(confident, right, DEFAULT_TARGET, DEFAULT_RULE, 0.05).heldout_answered == 29
    with pytest.raises(TooFewItems):
        choose_threshold(confident[:28], right[:28], DEFAULT_TARGET, DEFAULT_RULE, 0.05)
    for n in range(40, 160):  # wherever half the items could hold them, the suggestion does
        percent = suggest_percent(n)
        reachable = part_sizes(n, (0.3, MAX_SELECTIVE_PERCENT / 100, 0.2))[1] >= SELECTIVE_HELDOUT
        if reachable:
            assert percent is not None and part_sizes(n, [p / 100 for p in percent])[1] >= SELECTIVE_HELDOUT, n


def test_a_split_short_of_the_default_selective_rule_says_what_still_works() -> None:
    """The most 52 items allow is 21 held-out items: the note says the default guarantee needs
    29 and that conformal risk control (9 items) still gives a threshold."""
    best = advise_split({"train": 21, "heldout": 21, "test": 10}, (0.4, 0.4, 0.2))
    assert best.level == NOTE and best.suggestion is None
    assert "Selective answering's default guarantee at a 10% target error needs 29; with fewer, only conformal " \
        "risk control (9 items, a guarantee on average) gives a threshold." in best.message
