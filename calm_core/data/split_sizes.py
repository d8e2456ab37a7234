"""How many items each part of a split gets (`part_sizes`), whether its held-out part S_V
can support a comparison, and a split that can.

    advice = advise_split({"train": 36, "heldout": 8, "test": 8}, requested=(0.7, 0.15, 0.15))
    advice.level        # "refuse": S_V under MIN_HELDOUT items
    advice.message      # why, in words: TS and the calibrated stop need held-out labels
    advice.suggestion   # (50, 40, 10): percentages whose S_V has enough items, or None

S_V's labels are what temperature scaling is fitted on, what the calibrated stop selects
CALM's step by and what the recommendation is chosen on: under MIN_HELDOUT items no
post-hoc calibrator is fitted at all (calibration/posthoc's MIN_FIT_ITEMS), and under
WARN_HELDOUT the fitted temperature and the selected step rest on a handful of labels.
The Data page shows the advice before saving (and refuses), `calm data split` prints it
(and refuses); this module only computes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from calm_core.calibration.posthoc.base import MIN_FIT_ITEMS
from calm_core.data.entries import SPLIT_PARTS
from calm_core.data.schema import DataError

MIN_HELDOUT = MIN_FIT_ITEMS  # fewer S_V items: no TS, no cross-fitting, a calibrated stop on noise
WARN_HELDOUT = 30  # fewer: each S_V item moves accuracy by more than 3 points
MAX_HELDOUT_PERCENT = 40  # a suggestion never holds out more: training and test need their items too
OK, WARN, REFUSE = "ok", "warn", "refuse"
WHY = (
    "TS and the calibrated stop need held-out labels: temperature scaling is fitted on S_V, and the step "
    "a CALM run hands back is selected on S_V"
)


@dataclass(frozen=True)
class SplitAdvice:
    """What to say about a split before it is saved."""

    level: str  # OK, WARN or REFUSE
    message: str  # "" when OK
    suggestion: tuple[int, int, int] | None = None  # train, heldout, test in % of the source

    @property
    def refused(self) -> bool:
        return self.level == REFUSE


def advise_split(sizes: Mapping[str, int], requested: Sequence[float] = (0.6, 0.2, 0.2)) -> SplitAdvice:
    """Advice on the part sizes `sizes` (train / heldout / test item counts, as planned);
    `requested` (the fractions or counts asked for) keeps the suggestion's train:test ratio."""
    heldout, n = int(sizes.get("heldout", 0)), int(sum(sizes.values()))
    if heldout >= WARN_HELDOUT:
        return SplitAdvice(OK, "")
    level = REFUSE if heldout < MIN_HELDOUT else WARN
    limit = f"under {MIN_HELDOUT} items, too few to save" if level == REFUSE else f"under {WARN_HELDOUT} items"
    message = f"S_V (heldout) would have {heldout} item{'s' if heldout != 1 else ''}, {limit}: {WHY}."
    suggestion = suggest_percent(n, requested)
    if suggestion is not None and _heldout_items(n, suggestion) <= heldout:
        suggestion = None  # nothing better to offer than what is asked: say so below
    if suggestion is not None:
        message += (
            f" Try {suggestion[0]} / {suggestion[1]} / {suggestion[2]} % (train / heldout / test): S_V then "
            f"has {_heldout_items(n, suggestion)} items."
        )
    else:
        message += (
            f" This dataset ({n} items) is too small for a larger held-out part beside training and "
            "test parts: add items, or use a separate held-out set."
        )
    return SplitAdvice(level, message, suggestion)


def suggest_percent(n: int, requested: Sequence[float] = (0.6, 0.2, 0.2)) -> tuple[int, int, int] | None:
    """Whole percentages (train, heldout, test) of `n` items: the smallest heldout share
    that holds WARN_HELDOUT items, else the largest allowed (MAX_HELDOUT_PERCENT) when it
    holds MIN_HELDOUT; test keeps the requested share (10-30%), train the rest. None when
    even that is too few (the dataset is too small to split for a comparison)."""
    total = float(sum(requested)) or 1.0
    test = min(30, max(10, round(100 * float(requested[2]) / total)))
    start = math.ceil(100 * WARN_HELDOUT / n) if n else MAX_HELDOUT_PERCENT + 1
    for heldout in [*range(max(1, start), MAX_HELDOUT_PERCENT + 1), MAX_HELDOUT_PERCENT]:
        percent = (100 - heldout - test, heldout, test)
        items = _heldout_items(n, percent)
        if items >= WARN_HELDOUT or (heldout == MAX_HELDOUT_PERCENT and items >= MIN_HELDOUT):
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
