"""How many items each part of a split gets (`part_sizes`), what its held-out part S_V
supports (`heldout_support`), and a split that supports more.

    advice = advise_split({"train": 36, "heldout": 8, "test": 8}, requested=(0.7, 0.15, 0.15))
    advice.level        # "refuse": S_V under MIN_HELDOUT items
    advice.message      # why, in words: TS and the calibrated stop need held-out labels
    advice.suggestion   # (45, 40, 15): percentages whose S_V has more items, or None
    heldout_support(24) # "24 held-out items: enough to fit one temperature, not to choose between methods."

S_V's labels are what temperature scaling is fitted on, what the calibrated stop selects
CALM's step by and what the recommendation is chosen on. Two thresholds, declared here
once for the Data page, the Train page, `calm data split`, `calm train` and the docs:
under MIN_HELDOUT items no post-hoc calibrator is fitted at all (calibration/posthoc's
MIN_FIT_ITEMS); under CHOOSE_HELDOUT a temperature can be fitted, but the choice between
keeping the model and a calibrator is not one to trust. CHOOSE_HELDOUT is measured, not
chosen: bench/sv_agreement.py resamples S_V from scored sets and counts how often the S_V
recommendation agrees with the choice a large test split makes (docs/results.md);
`choose_threshold` turns that curve into the smallest size that agrees often enough on
every set, and a test checks CHOOSE_HELDOUT against the published curve.

Advice levels: REFUSE under MIN_HELDOUT; WARN under CHOOSE_HELDOUT when a split of the same
source holds more S_V items (the suggestion); NOTE when none does: then the split is the
best this source allows, so the page accepts it and says what it supports and which fixes
work (k-fold cross-fitting on all labelled items, more items, a separate held-out set).
This module only computes the advice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from calm_core.calibration.posthoc.base import MIN_FIT_ITEMS
from calm_core.calibration.selective import DEFAULT_TARGET, crc_min_items, default_rule_items
from calm_core.data.entries import SPLIT_PARTS
from calm_core.data.schema import DataError

MIN_HELDOUT = MIN_FIT_ITEMS  # fewer S_V items: no TS, no cross-fitting, a calibrated stop on noise
# How often the S_V recommendation must agree with a large test split's choice for S_V to
# count as able to choose between methods (bench/sv_agreement.py measures the agreement).
AGREEMENT_TARGET = 0.8
CHOOSE_HELDOUT = 80  # choose_threshold of bench/results/sv_agreement.json (tests/test_split_sizes.py)
MAX_HELDOUT_PERCENT = 40  # a suggestion holds out no more: training and test need their items too
# ... except to reach what selective answering's default rule needs (29 items at a 10% target): a
# split the studio suggests must not have Compare refuse its first threshold; never past half the items.
SELECTIVE_HELDOUT = default_rule_items()
MAX_SELECTIVE_PERCENT = 50
OK, NOTE, WARN, REFUSE = "ok", "note", "warn", "refuse"
WHY = (
    "TS and the calibrated stop need held-out labels: temperature scaling is fitted on S_V, and the step "
    "a CALM run hands back is selected on S_V"
)
FIXES = (
    "To choose between methods: fit the post-hoc calibrators k-fold on all labelled items (S_T + S_V), "
    "add items, or use a separate, larger held-out set"
)


def choose_threshold(agreement: Mapping[str, Mapping[int, float]], target: float = AGREEMENT_TARGET) -> int | None:
    """The smallest measured S_V size from which on the agreement reaches `target` on every
    set (set -> size -> share of resamples whose S_V choice matched the test split's); None
    when even the largest size misses it on some set. "From which on": a size that reaches
    it while a larger one misses does not count (it was luck, not enough items)."""
    sizes = sorted({n for by_size in agreement.values() for n in by_size})
    passing = [n for n in sizes if all(by_size.get(n, 0.0) >= target for by_size in agreement.values())]
    for n in passing:
        if all(m in passing for m in sizes if m >= n):
            return n
    return None


def heldout_support(heldout: int, labelled: int | None = None) -> str:
    """One plain sentence: what an S_V of `heldout` items supports (fit one temperature,
    choose between methods, or neither), by MIN_HELDOUT and CHOOSE_HELDOUT. With `labelled`
    (S_T + S_V items, when the post-hoc calibrators are k-fold cross-fitted on all of them)
    a second clause says what that pool supports for the post-hoc choice."""
    sentence = f"{_items(heldout, 'held-out')}: {_supports(heldout)}."
    if labelled is not None:
        sentence += (
            f" With k-fold on all {_items(labelled, 'labelled')}, the post-hoc choice has "
            f"{_supports(labelled).replace('enough to', 'enough items to', 1)}; a trained model is still "
            "compared on S_V alone."
        )
    return sentence


def _items(n: int, kind: str) -> str:
    return f"{n} {kind} item{'s' if n != 1 else ''}"


def _supports(n: int) -> str:
    """What n labelled items support, in words."""
    if n < MIN_HELDOUT:
        return f"too few to fit even one temperature (at least {MIN_HELDOUT} needed)"
    if n < CHOOSE_HELDOUT:
        return f"enough to fit one temperature, not to choose between methods (that takes {CHOOSE_HELDOUT})"
    return "enough to fit a temperature and to choose between methods"


@dataclass(frozen=True)
class SplitAdvice:
    """What to say about a split before it is saved."""

    level: str  # OK, NOTE, WARN or REFUSE
    message: str  # "" when OK
    suggestion: tuple[int, int, int] | None = None  # train, heldout, test in % of the source

    @property
    def refused(self) -> bool:
        return self.level == REFUSE

    @property
    def warned(self) -> bool:
        """Refused or warned: a better split of the same source exists (or none can be saved)."""
        return self.level in (WARN, REFUSE)


def advise_split(sizes: Mapping[str, int], requested: Sequence[float] = (0.6, 0.2, 0.2)) -> SplitAdvice:
    """Advice on the part sizes `sizes` (train / heldout / test item counts, as planned);
    `requested` (the fractions or counts asked for) keeps the suggestion's train:test ratio.
    The message opens with `heldout_support`'s sentence."""
    heldout, n = int(sizes.get("heldout", 0)), int(sum(sizes.values()))
    if heldout >= CHOOSE_HELDOUT:
        return SplitAdvice(OK, "")
    support = heldout_support(heldout)
    suggestion = suggest_percent(n, requested)
    if suggestion is not None and _heldout_items(n, suggestion) <= heldout:
        suggestion = None  # nothing better to offer than what is asked
    if heldout < MIN_HELDOUT:
        message = f"{support} {WHY}."
        if suggestion is None:
            return SplitAdvice(REFUSE, f"{message} This dataset ({n} items) is too small to split: add items.")
        return SplitAdvice(REFUSE, f"{message} {_try(n, suggestion)}", suggestion)
    if suggestion is not None:
        return SplitAdvice(WARN, f"{support} {_try(n, suggestion)}", suggestion)
    short = f" {selective_support(heldout)}" if heldout < SELECTIVE_HELDOUT else ""
    return SplitAdvice(
        NOTE, f"{support}{short} This split holds out as much as this dataset ({n} items) allows. {FIXES}."
    )


def selective_support(heldout: int) -> str:
    """Whether `heldout` S_V items let selective answering's default rule choose a threshold at
    the default target, in one sentence (Compare and `calm selective` refuse with fewer)."""
    target = f"a {DEFAULT_TARGET:.0%} target error"
    if heldout >= SELECTIVE_HELDOUT:
        return f"That is enough for selective answering's default guarantee at {target} (it needs {SELECTIVE_HELDOUT})."
    crc = crc_min_items(DEFAULT_TARGET)
    return (
        f"Selective answering's default guarantee at {target} needs {SELECTIVE_HELDOUT}; with fewer, only "
        f"conformal risk control ({crc} items, a guarantee on average) gives a threshold."
    )


def _try(n: int, suggestion: tuple[int, int, int]) -> str:
    """The suggestion in words, with what its S_V supports."""
    items = _heldout_items(n, suggestion)
    percent = " / ".join(str(p) for p in suggestion)
    said = f"Try {percent} % (train / heldout / test) for {heldout_support(items)}"
    return said if items >= CHOOSE_HELDOUT else f"{said} {selective_support(items)}"


def suggest_percent(n: int, requested: Sequence[float] = (0.6, 0.2, 0.2)) -> tuple[int, int, int] | None:
    """Whole percentages (train, heldout, test) of `n` items: the smallest heldout share
    that holds CHOOSE_HELDOUT items, else the largest allowed (MAX_HELDOUT_PERCENT), raised
    to the smallest share that holds SELECTIVE_HELDOUT when that is at most
    MAX_SELECTIVE_PERCENT, as long as S_V gets MIN_HELDOUT; test keeps the requested share
    (10-30%), train the rest. None when even that is too few (the dataset is too small to
    split for a comparison). Advising on the suggestion itself never suggests it again
    (`advise_split` compares S_V's items), so a page that offers it accepts it."""
    total = float(sum(requested)) or 1.0
    test = min(30, max(10, round(100 * float(requested[2]) / total)))
    start = math.ceil(100 * CHOOSE_HELDOUT / n) if n else MAX_HELDOUT_PERCENT + 1
    choose = _first_share(n, test, CHOOSE_HELDOUT, range(max(1, start), MAX_HELDOUT_PERCENT + 1))
    if choose is not None:
        return choose
    largest = (100 - MAX_HELDOUT_PERCENT - test, MAX_HELDOUT_PERCENT, test)
    items = _heldout_items(n, largest)
    if items < SELECTIVE_HELDOUT:
        wider = range(MAX_HELDOUT_PERCENT + 1, MAX_SELECTIVE_PERCENT + 1)
        selective = _first_share(n, test, SELECTIVE_HELDOUT, wider)
        if selective is not None:
            return selective
    return largest if items >= MIN_HELDOUT else None


def _first_share(n: int, test: int, goal: int, shares: range) -> tuple[int, int, int] | None:
    """The first heldout share of `shares` (test at `test` %, train the rest) whose S_V holds `goal` items."""
    for heldout in shares:
        percent = (100 - heldout - test, heldout, test)
        if _heldout_items(n, percent) >= goal:
            return percent
    return None


def _heldout_items(n: int, percent: tuple[int, int, int]) -> int:
    """S_V's items under `percent`, as split.part_sizes counts them (largest remainder);
    0 when a part would be empty."""
    try:
        return part_sizes(n, [p / 100 for p in percent])[1]
    except DataError:
        return 0


def part_sizes(n: int, sizes: Sequence[float] | Sequence[int]) -> tuple[int, ...]:
    """Item counts per part for a source of `n` items.

    Fractions (floats adding up to 1) become counts adding up to `n`, by largest
    remainder; counts (ints) are kept and may add up to less than `n` (the rest is
    left out). Every part gets at least one item.
    """
    sizes = tuple(sizes)
    if len(sizes) != len(SPLIT_PARTS) or any(isinstance(s, bool) or not isinstance(s, (int, float)) for s in sizes):
        raise DataError(f"Expected three sizes (train, heldout, test), but got {sizes!r}")
    if all(isinstance(s, int) for s in sizes):
        counts = tuple(int(s) for s in sizes)
        if sum(counts) > n:
            raise DataError(f"Expected sizes adding up to at most the {n} items of the source, but got {sum(counts)}")
    else:
        if any(not 0 < s < 1 for s in sizes) or abs(sum(sizes) - 1) > 1e-6:
            raise DataError(f"Expected three fractions between 0 and 1 adding up to 1, but got {sizes!r}")
        counts = tuple(largest_remainder([s * n for s in sizes]))
    if any(c < 1 for c in counts):
        raise DataError(
            "Expected at least one item in every part, but the sizes give "
            f"{dict(zip(SPLIT_PARTS, counts, strict=True))} "
            f"of {n} items: give the small parts a larger share"
        )
    return counts


def largest_remainder(shares: list[float]) -> list[int]:
    """Integers adding up to round(sum(shares)), each the floor or the ceiling of its share."""
    floors = [int(s) for s in shares]
    left = round(sum(shares)) - sum(floors)
    order = sorted(range(len(shares)), key=lambda i: (-(shares[i] - floors[i]), i))
    for i in order[:left]:
        floors[i] += 1
    return floors
