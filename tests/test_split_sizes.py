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
