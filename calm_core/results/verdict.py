"""What a finished run says to its user: which step the model is from and why, which
calibrator to use (chosen on S_V), and the test-split evidence beside it.

    lines = verdict_lines(run.results(), method="calm")   # `calm train`'s closing lines
    rows = evidence_rows(run.results(), method="calm")    # one row per (dataset, variant) with 90% intervals
    verdict = verdict_rows(run.results())                 # one line per evaluation set: what to use there, flags
    recommendation_sentence(run.results())                # "Keep the model as it is: on 24 held-out items, ..."

Pure functions over results.json (training/tasks/mcqa.py writes `selection`,
`recommendation` and each row's `ci90` and `paired`), shared by `calm train`, the HTML
report, the export's model card and the studio's Compare and Monitor pages, so every page
says the same thing: the recommendation is one sentence (`recommendation_sentence`), built
here and nowhere else, and the verdict row's cell is its opening words.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from calm_core.calibration.metrics.paired import MIN_PAIRED_ITEMS, PAIRED_LEVEL, PairedDifference
from calm_core.calibration.posthoc import calibrators
from calm_core.calibration.recommend import KEEP, accuracy_slack
from calm_core.runs.records import ResultRow, RunResults
from calm_core.training.methods import METHODS

# A forecast is near-uniform when its mean confidence is within this of chance (1/K) while the
# model's accuracy is clearly above chance: its small ECE then hides what the model knows.
NEAR_UNIFORM_CONFIDENCE = 0.05
NEAR_UNIFORM_ACCURACY = 0.10
# A forecast is under-confident when its mean confidence is below its accuracy by more than
# this: it says "40% sure" of answers that are right two times in three.
UNDER_CONFIDENT_GAP = 0.10
NEAR_UNIFORM, ACCURACY_LOST, UNDER_CONFIDENT = "near-uniform", "accuracy lost", "under-confident"
BASE_LABEL = "the model as it is"  # how a person reads `base`
LEVEL = f"{PAIRED_LEVEL:.0%}"  # "90%": every interval the verdict states
VERDICT_COLUMNS = ("evaluation set", "best calibrated", "flags", "recommended on S_V")
VERDICT_HELP = {
    "evaluation set": "one row per evaluation set of the run (the first is in domain)",
    "best calibrated": "lowest ECE among the variants that keep base's accuracy (within one point, or one item "
    "under 100 items) and AUROC (not below base's 90% interval); a tie, with the item count, when the paired "
    f"{LEVEL} interval of the per-item top-label Brier difference cannot tell it from another; a flagged "
    "variant carries its flag's word there too",
    "flags": f"{NEAR_UNIFORM}: mean confidence within {NEAR_UNIFORM_CONFIDENCE} of 1/K while accuracy is more than "
    f"{NEAR_UNIFORM_ACCURACY} above it (a small ECE that says nothing); {UNDER_CONFIDENT}: mean confidence more "
    f"than {UNDER_CONFIDENT_GAP} below accuracy; {ACCURACY_LOST}: accuracy fell past that slack",
    "recommended on S_V": "what the run recommends, chosen on S_V (never on a test set); keep the model as it "
    f"is unless a change lowers the S_V NLL beyond the noise (paired {LEVEL} interval below zero)",
}
VERDICT_CAPTION = (
    "Best calibrated: the lowest ECE among variants that keep base's accuracy and AUROC on that set, with its "
    "flag's word when it has one; a tie when "
    f"the items cannot tell it from another (paired {LEVEL} bootstrap interval of the per-item top-label Brier "
    f"difference includes zero). Flags: {NEAR_UNIFORM} (confidence near 1/K while accuracy is well above it), "
    f"{UNDER_CONFIDENT} (confidence more than {UNDER_CONFIDENT_GAP} below accuracy) and {ACCURACY_LOST}. "
    "The recommendation is chosen on S_V, so it is the same on every set."
)


def posthoc_exports() -> tuple[str, ...]:
    """The variants of the untouched model that `calm export --variant` writes as a folder
    of the trained model's shape (export/folder.py): base, and every post-hoc calibrator
    whose class builds a head (`exports()`); the verdict offers them as the export to use."""
    return ("base", *(name for name, cls in calibrators().items() if cls.exports()))


def short_name(variant: str) -> str:
    """A variant's short name where its calibrator declares one ("ATS"), else its name."""
    found = calibrators().get(variant)
    return found.abbreviation if found is not None and found.abbreviation else variant


def variant_label(variant: str) -> str:
    """What a person reads for a variant, mid-sentence: "the model as it is", a post-hoc
    calibrator's `label` ("temperature scaling"), a method's LABEL ("CALM"), and for a
    method's theta-only ablation "CALM, adapter only"; an unknown name as it is."""
    if variant == "base":
        return BASE_LABEL
    found = calibrators().get(variant)
    if found is not None:
        label = found.label[:1].lower() + found.label[1:]
        return f"{label} ({found.abbreviation})" if found.abbreviation else label
    method = variant.removesuffix("_theta_only")
    if method not in METHODS:
        return variant
    label = METHODS[method].LABEL or method
    return f"{label}, adapter only" if method != variant else label


def keeps_model(results: RunResults) -> bool:
    """Whether the recommendation is to keep the model as it is (the reference variant)."""
    rec = results.recommendation
    return rec is not None and bool(rec.variant) and (rec.decision == KEEP or rec.variant == rec.reference)


def recommendation_decision(results: RunResults) -> str | None:
    """The sentence's opening words: "Keep the model as it is" or "Use temperature scaling"."""
    variant = results.recommended
    if not variant:
        return None
    return f"Keep {BASE_LABEL}" if keeps_model(results) else f"Use {variant_label(variant)}"


# ----------------------------------------------------------------------------- the verdict row


@dataclass(frozen=True)
class Tie:
    """A variant the items cannot tell from the best-calibrated one: its ECE, and the paired
    difference that was tested (the best's per-item `score` minus this variant's)."""

    variant: str
    ece: float
    difference: PairedDifference
    score: str = "top-label Brier"  # what a result row's `paired` compares (tasks/mcqa.TIE_SCORE)

    def reason(self, best: str) -> str:
        """ "CALM minus temperature scaling -0.010 [-0.030, +0.010], which holds 0": the
        difference tested and why it is no difference (on enough items to call one)."""
        d = self.difference
        interval = f"{variant_label(best)} minus {variant_label(self.variant)} {d.mean:+.3f} [{d.lo:+.3f}, {d.hi:+.3f}]"
        if d.n < MIN_PAIRED_ITEMS:
            return interval
        if d.lo > 0.0:
            return f"{interval}, wholly above 0: by this score {variant_label(self.variant)} is the closer forecast"
        return f"{interval}, which holds 0"


@dataclass(frozen=True)
class VerdictRow:
    """What one evaluation set says: the best-calibrated variant that keeps the base model's
    accuracy and AUROC (and those the items cannot tell from it), the variants that fail a
    sanity check, and the S_V recommendation."""

    dataset: str
    best: str | None  # lowest ECE among the variants that keep accuracy and AUROC; None: no base row
    best_ece: float | None
    flags: dict[str, tuple[str, ...]] = field(default_factory=dict)  # variant -> (ACCURACY_LOST, ...)
    recommended: str | None = None  # chosen on S_V (results.json), the same on every set
    tied: tuple[Tie, ...] = ()  # each variant the items cannot tell from `best`
    n: int | None = None  # items of the set
    decision: str | None = None  # recommendation_decision: the recommendation sentence's opening words

    def cells(self) -> dict[str, str]:
        """The row as table cells (VERDICT_COLUMNS), for the pages and the report."""
        flags = "; ".join(f"{variant_label(v)}: {', '.join(why)}" for v, why in self.flags.items()) or "none"
        recommended = self.decision or (variant_label(self.recommended) if self.recommended else "-")
        return dict(zip(VERDICT_COLUMNS, (self.dataset, self.best_cell(), flags, recommended), strict=True))

    def best_cell(self) -> str:
        """ "CALM (ECE 0.060)", or with a tie "tie on 24 items between CALM (ECE 0.060) and
        temperature scaling (ECE 0.080): ..." followed by what was compared and why it is a
        tie (`tie_reason`), since an ECE gap alone would read as a winner (labels may hold
        commas: "CALM, adapter only"). A flagged variant carries its flag's word:
        "thermometer (ECE 0.134, under-confident)", so the best cell never contradicts the
        flags cell beside it."""
        if not self.best or self.best_ece is None:
            return "-"
        named = [
            f"{variant_label(v)} (ECE {ece:.3f}{''.join(f', {why}' for why in self.flags.get(v, ()))})"
            for v, ece in ((self.best, self.best_ece), *((t.variant, t.ece) for t in self.tied))
        ]
        if not self.tied:
            return named[0]
        return f"tie on {self.n} items between {', '.join(named[:-1])} and {named[-1]}: {self.tie_reason()}"

    def tie_reason(self) -> str:
        """What a tie compared and why it is one: ECE is a binned figure with no per-item
        form, so the test is on the per-item score the row's `paired` holds, each
        difference with its paired interval ("" without a tie)."""
        if not self.tied or not self.best:
            return ""
        parts = "; ".join(t.reason(self.best) for t in self.tied)
        text = f"compared by per-item {self.tied[0].score} score ({LEVEL} paired intervals), {parts}"
        n = self.tied[0].difference.n
        if n < MIN_PAIRED_ITEMS:
            return f"{text}; {n} items are too few to call any difference (under {MIN_PAIRED_ITEMS})"
        return f"{text}; an ECE gap is not tested itself (a binned ECE has no per-item difference)"


def verdict_rows(results: RunResults) -> list[VerdictRow]:
    """One VerdictRow per evaluation set of results.json, in the run's order.

    A variant keeps accuracy when it is within `recommend.accuracy_slack(n)` of base (one
    point, or one item under 100 items) and keeps AUROC when it is not below the lower end
    of base's 90% interval (base's own AUROC without an interval); among those, the lowest
    ECE is the best-calibrated. Flags: "accuracy lost" past the slack; "near-uniform" when
    the mean confidence is within NEAR_UNIFORM_CONFIDENCE of chance (a row's `chance`, the
    mean 1/K) while accuracy is more than NEAR_UNIFORM_ACCURACY above it; "under-confident"
    when the mean confidence is more than UNDER_CONFIDENT_GAP below accuracy (and it is not
    near-uniform, the stronger form of the same fault). Open-answer
    rows use `sem_acc`, the accuracy of the answer their confidence is about.

    Ties: the best is shown alone only when the items show it better than each other kept
    variant: its per-item top-label Brier score, (confidence - correct)^2, lower for sure
    (the paired 90% interval of the difference, the row's `paired`, wholly below zero).
    Otherwise they tie, with the item count. Not ECE itself: ECE is a binned statistic, not
    a mean over items, so a difference of ECEs has no per-item form, and resampled ECEs
    are biased upwards on small sets, by more for the sharper forecast. The top-label Brier
    score grades the same forecast ECE bins (one confidence against right or wrong), is
    proper, and is a mean over items, so its paired difference is exactly the per-item
    question "which forecast is closer to what happened". Rows without `paired` (runs
    before it, open answers) show no tie.
    """
    by_set: dict[str, list[ResultRow]] = {}
    for row in results.rows:
        by_set.setdefault(row.dataset, []).append(row)
    chosen = results.recommended
    decision = recommendation_decision(results)
    return [_verdict_row(name, rows, chosen, decision) for name, rows in by_set.items()]


def _verdict_row(
    dataset: str, rows: list[ResultRow], recommended: str | None, decision: str | None = None
) -> VerdictRow:
    """One evaluation set's VerdictRow from its typed rows (see `verdict_rows`)."""
    base = next((r for r in rows if r.variant == "base"), None)
    base_acc = _number(base, _acc_key(base)) if base is not None else None
    if base is None or base_acc is None:
        return VerdictRow(dataset, None, None, recommended=recommended, decision=decision)
    floor = base_acc - accuracy_slack(int(base.get("n") or 0)) - 1e-12
    auroc_floor = _auroc_floor(base)
    kept, flags = [], {}
    for row in rows:
        acc, ece = _number(row, _acc_key(row)), _number(row, "ece")
        why = _flags(row, acc, floor)
        if why:
            flags[row.variant] = why
        auroc = _number(row, "auroc")
        auroc_kept = auroc_floor is None or auroc is None or auroc >= auroc_floor - 1e-12
        if acc is not None and ece is not None and acc >= floor and auroc_kept and NEAR_UNIFORM not in why:
            kept.append((ece, row.variant))
    if not kept:
        return VerdictRow(dataset, None, None, flags, recommended, n=_count(base), decision=decision)
    best_ece, best = min(kept)
    best_row = next(r for r in rows if r.variant == best)
    ties = (_tie(best_row, v, e) for e, v in sorted(kept) if v != best)
    tied = tuple(t for t in ties if t is not None)
    return VerdictRow(dataset, best, best_ece, flags, recommended, tied, _count(base), decision)


def _flags(row: Mapping[str, Any], acc: float | None, floor: float) -> tuple[str, ...]:
    """The sanity flags of one variant's row, in VERDICT_HELP's order."""
    why = []
    if acc is not None and acc < floor:
        why.append(ACCURACY_LOST)
    if _near_uniform(row, acc):
        why.append(NEAR_UNIFORM)  # the stronger word: it is under-confident too, down to chance
    elif _under_confident(row, acc):
        why.append(UNDER_CONFIDENT)
    return tuple(why)


def _tie(best_row: Mapping[str, Any], other: str, ece: float) -> Tie | None:
    """The Tie of `other` when the items cannot tell `best_row`'s variant from it (see
    verdict_rows); None when they can, or the row records no paired interval for it."""
    record = best_row.get("paired") or {}
    values = (record.get("against") or {}).get(other)
    if not isinstance(values, (list, tuple)) or len(values) != 3:
        return None
    mean, lo, hi = (float(v) for v in values)
    difference = PairedDifference(mean, lo, hi, int(record.get("n", 0)))
    if difference.lower_for_sure:
        return None
    return Tie(other, ece, difference, str(record.get("score") or Tie.score))


def _count(row: Mapping[str, Any]) -> int | None:
    n = row.get("n")
    return int(n) if isinstance(n, (int, float)) and not isinstance(n, bool) else None


def _acc_key(row: Mapping[str, Any]) -> str:
    return "sem_acc" if row.get("task") == "openqa" and "sem_acc" in row else "acc"


def _number(row: Mapping[str, Any], key: str) -> float | None:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _auroc_floor(base: Mapping[str, Any]) -> float | None:
    """The lower end of base's 90% AUROC interval, else base's AUROC (None: not recorded)."""
    bounds = (base.get("ci90") or {}).get("auroc")
    if (
        isinstance(bounds, (list, tuple))
        and len(bounds) == 2
        and isinstance(bounds[0], (int, float))
        and not math.isnan(bounds[0])
    ):
        return float(bounds[0])
    return _number(base, "auroc")


def _under_confident(row: Mapping[str, Any], acc: float | None) -> bool:
    confidence = _number(row, "confidence")
    return confidence is not None and acc is not None and confidence < acc - UNDER_CONFIDENT_GAP


def _near_uniform(row: Mapping[str, Any], acc: float | None) -> bool:
    chance, confidence = _number(row, "chance"), _number(row, "confidence")
    if chance is None or confidence is None or acc is None:
        return False
    return confidence <= chance + NEAR_UNIFORM_CONFIDENCE and acc > chance + NEAR_UNIFORM_ACCURACY


def verdict_table(results: RunResults) -> list[dict[str, str]]:
    """The verdict rows as table rows (VERDICT_COLUMNS): what Compare, the Monitor and the
    report open with."""
    return [row.cells() for row in verdict_rows(results)]


def verdict_row_lines(results: RunResults) -> list[str]:
    """The verdict rows as text lines (`calm train`'s closing lines, the CLI)."""
    lines = []
    for row in verdict_rows(results):
        cells = row.cells()
        lines.append(
            f"{row.dataset}: best calibrated {cells['best calibrated']}; flags {cells['flags']}; "
            f"recommended on S_V: {cells['recommended on S_V']}"
        )
    return lines
