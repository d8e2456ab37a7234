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
from dataclasses import dataclass, field
from typing import Any

from calm_core.calibration.metrics.columns import interval_names
from calm_core.calibration.metrics.paired import MIN_PAIRED_ITEMS, PAIRED_LEVEL, PairedDifference
from calm_core.calibration.posthoc import calibrators
from calm_core.calibration.recommend import HELDOUT_ITEMS, KEEP, LABELLED_ITEMS, accuracy_slack
from calm_core.training.methods import METHODS
from calm_core.training.selection import lower_limit

# The variants of the untouched model that `calm export --variant` writes as a folder of the
# trained model's shape (workspace/export.py); the verdict offers them as the export to use.
POSTHOC_EXPORTS = ("base", "ts", "vs", "ats")
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
    f"{LEVEL} interval of the per-item top-label Brier difference cannot tell it from another",
    "flags": f"{NEAR_UNIFORM}: mean confidence within {NEAR_UNIFORM_CONFIDENCE} of 1/K while accuracy is more than "
    f"{NEAR_UNIFORM_ACCURACY} above it (a small ECE that says nothing); {UNDER_CONFIDENT}: mean confidence more "
    f"than {UNDER_CONFIDENT_GAP} below accuracy; {ACCURACY_LOST}: accuracy fell past that slack",
    "recommended on S_V": "what the run recommends, chosen on S_V (never on a test set); keep the model as it "
    f"is unless a change lowers the S_V NLL beyond the noise (paired {LEVEL} interval below zero)",
}
VERDICT_CAPTION = (
    "Best calibrated: the lowest ECE among variants that keep base's accuracy and AUROC on that set; a tie when "
    f"the items cannot tell it from another (paired {LEVEL} bootstrap interval of the per-item top-label Brier "
    f"difference includes zero). Flags: {NEAR_UNIFORM} (confidence near 1/K while accuracy is well above it), "
    f"{UNDER_CONFIDENT} (confidence more than {UNDER_CONFIDENT_GAP} below accuracy) and {ACCURACY_LOST}. "
    "The recommendation is chosen on S_V, so it is the same on every set."
)


def variant_label(variant: str) -> str:
    """What a person reads for a variant, mid-sentence: "the model as it is", a post-hoc
    calibrator's `label` ("temperature scaling"), a method's LABEL ("CALM"), and for a
    method's theta-only ablation "CALM, adapter only"; an unknown name as it is."""
    if variant == "base":
        return BASE_LABEL
    found = calibrators().get(variant)
    if found is not None:
        return found.label[:1].lower() + found.label[1:]
    method = variant.removesuffix("_theta_only")
    if method not in METHODS:
        return variant
    label = METHODS[method].LABEL or method
    return f"{label}, adapter only" if method != variant else label


def evidence_variants(method: str) -> list[str]:
    """The variants of the evidence table: base, every post-hoc calibrator, the trained model."""
    return ["base", *calibrators(), method]


def evidence_rows(results: dict[str, Any], method: str) -> list[dict[str, Any]]:
    """Per evaluation set and evidence variant: acc, ECE, AUROC and mean confidence, each
    as "value [lo, hi]" (90% bootstrap interval), and whether it is the recommended one."""
    wanted = evidence_variants(method)
    chosen = (results.get("recommendation") or {}).get("variant")
    rows = []
    for row in results.get("results", []):
        if row.get("variant") not in wanted:
            continue
        ci = row.get("ci90") or {}
        out = {"dataset": row["dataset"], "variant": row["variant"], "recommended": row["variant"] == chosen}
        for name in interval_names():
            value, bounds = row.get(name), ci.get(name)
            out[name] = _with_interval(value, bounds)
        rows.append(out)
    order = {v: i for i, v in enumerate(wanted)}
    return sorted(rows, key=lambda r: (r["dataset"], order[r["variant"]]))


def _with_interval(value: Any, bounds: Any) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    if isinstance(bounds, (list, tuple)) and len(bounds) == 2 and all(isinstance(b, (int, float)) for b in bounds):
        return f"{value:.3f} [{bounds[0]:.3f}, {bounds[1]:.3f}]"
    return f"{value:.3f}"


def selection_line(results: dict[str, Any]) -> str | None:
    """Which step the model is from, and why (None for a run without a calibrated stop)."""
    selection = results.get("selection")
    if not selection or selection.get("selected_step") is None:
        return None
    step, chosen = selection["selected_step"], selection.get("selected") or {}
    if selection.get("rule") == "last":
        return f"The model is from step {step}, the last step (--select last)."
    text = (
        f"The model is from step {step}, selected on S_V: NLL {chosen.get('score', float('nan')):.4f}, "
        f"ECE {chosen.get('ece', float('nan')):.4f}, accuracy {chosen.get('acc', float('nan')):.3f}"
    )
    if step == 0:
        text += " (no trained step beat the untouched model on S_V, so it is the base model)"
    if selection.get("stopped_early") is not None:
        text += (
            f"; the run stopped early at step {selection['stopped_early']} ({selection.get('patience')} "
            "evaluations without a better step)"
        )
    return text + "."


def selection_status_line(selection: dict[str, Any] | None) -> str | None:
    """status.json's `selection` in one line, while the run goes and after: the rule, the
    step selected so far with its S_V NLL / ECE / accuracy, and where the run stopped
    early (None before the first evaluation, or for a run without a calibrated stop)."""
    if not selection or selection.get("selected_step") is None:
        return None
    chosen = selection.get("selected") or {}
    text = f"Selected step {selection['selected_step']} (rule `{selection.get('rule', '?')}`)"
    figures = [
        f"{label} {chosen[key]:{fmt}}"
        for key, label, fmt in (("score", "S_V NLL", ".4f"), ("ece", "ECE", ".4f"), ("acc", "accuracy", ".3f"))
        if isinstance(chosen.get(key), (int, float))
    ]
    if figures:
        text += ": " + ", ".join(figures)
    if selection.get("stopped_early") is not None:
        text += f"; stopped early at step {selection['stopped_early']}"
    return text + "."


def selected_step(selection: dict[str, Any] | None) -> int | None:
    """The step a run's model is (so far) from, or None: what the curves mark."""
    step = (selection or {}).get("selected_step")
    return int(step) if isinstance(step, (int, float)) and not isinstance(step, bool) else None


def lower_threshold(selection: dict[str, Any] | None) -> float | None:
    """The highest S_T cross-entropy of theta a step may have and still be selected:
    step 0's times (1 + lower_tolerance); None when either is not recorded."""
    selection = selection or {}
    lower = (selection.get("reference") or {}).get("lower")
    tolerance = selection.get("lower_tolerance")
    if not isinstance(lower, (int, float)) or not isinstance(tolerance, (int, float)):
        return None
    return lower_limit(float(lower), float(tolerance))


def method_recommended(results: dict[str, Any], method: str) -> bool | None:
    """Whether the recommendation is the trained model itself (None: no recommendation),
    so a page can say it plainly (success) or warn that a baseline wins."""
    variant = (results.get("recommendation") or {}).get("variant")
    return None if not variant else variant == method


def recommendation_line(results: dict[str, Any], method: str) -> str | None:
    """The recommendation sentence (`recommendation_sentence`), then what a reader may need
    next: that post-hoc calibrators were scored in-sample, and how to export a recommended
    variant of the untouched model (None without a recommendation)."""
    sentence = recommendation_sentence(results)
    if sentence is None:
        return None
    rec, text = results["recommendation"], sentence
    if "same" in rec.get("posthoc_fit", ""):  # recommend.cross_fitted: too few S_V items to cross-fit
        text += f" Post-hoc calibrators were {rec['posthoc_fit']}."
    if keeps_model(results):
        text += KEEP_NEXT
    elif rec["variant"] != method and rec["variant"] in POSTHOC_EXPORTS:
        text += " `calm export RUN_ID DIR --variant recommended` writes it as a folder that loads like the trained one."
    return text


# What to do next when the answer is "keep": exporting the untouched model would only copy it.
KEEP_NEXT = (
    " Nothing needs exporting: go on using the model you started from. The trained model stays in this run "
    "(`calm export RUN_ID DIR`) if more held-out data later shows that it helps."
)


def keeps_model(results: dict[str, Any]) -> bool:
    """Whether the recommendation is to keep the model as it is (the reference variant)."""
    rec = results.get("recommendation") or {}
    variant = rec.get("variant")
    reference = (rec.get("comparison") or {}).get("reference", "base")
    return bool(variant) and (rec.get("decision") == KEEP or variant == reference)


def recommendation_sentence(results: dict[str, Any]) -> str | None:
    """The recommendation in one plain sentence, the same words wherever it is shown (the
    verdict row opens with its first words, `recommendation_decision`): what to do, on how
    many held-out items, and the paired 90% interval it rests on. None without one.

        Keep the model as it is: on 24 held-out items, temperature scaling's gain cannot be
        told from noise (NLL change -0.04, 90% interval -0.15 to +0.06).
    """
    rec = results.get("recommendation") or {}
    if not rec.get("variant"):
        return None
    decision = recommendation_decision(results)
    comparison = rec.get("comparison") or {}
    if not comparison.get("against_reference") and not comparison.get("candidates"):
        return f"{decision}: it has the lowest S_V NLL ({rec.get('reason', '')}); this run recorded no interval."
    return f"{decision}: {_because(rec['variant'], comparison)}."


def recommendation_decision(results: dict[str, Any]) -> str | None:
    """The sentence's opening words: "Keep the model as it is" or "Use temperature scaling"."""
    variant = (results.get("recommendation") or {}).get("variant")
    if not variant:
        return None
    return f"Keep {BASE_LABEL}" if keeps_model(results) else f"Use {variant_label(variant)}"


def _because(chosen: str, comparison: dict[str, Any]) -> str:
    """The sentence after its opening words, from the recommendation's `comparison`."""
    n, reference = int(comparison.get("n", 0)), comparison.get("reference", "base")
    items = comparison.get("items", HELDOUT_ITEMS)  # recommend.LABELLED_ITEMS with calibrate_on = all
    against = {name: PairedDifference.from_dict(d) for name, d in (comparison.get("against_reference") or {}).items()}
    runner_up = comparison.get("runner_up")
    if chosen == reference:
        return _keep_because(n, runner_up, against.get(runner_up) if runner_up else None, items)
    gain = against[chosen]
    text = f"on {n} {items} it lowers the NLL ({_interval('NLL change', gain)})"
    if not runner_up or runner_up == reference or not comparison.get("against_runner_up"):
        return text
    versus = PairedDifference.from_dict(comparison["against_runner_up"])
    if versus.lower_for_sure:
        return text + f", also against the runner-up, {variant_label(runner_up)} ({_interval('difference', versus)})"
    simpler = comparison.get("simpler", chosen)
    which = "it is the simpler of the two" if simpler == chosen else f"{variant_label(simpler)} is simpler"
    return text + f"; it is tied with {variant_label(runner_up)} ({_interval('difference', versus)}), and {which}"


def _keep_because(n: int, closest: str | None, gain: PairedDifference | None, items: str = HELDOUT_ITEMS) -> str:
    """Why the model is kept: nothing else to compare, too few items, a gain inside the
    noise, or no gain at all. `items`: what the n items are, in words."""
    if closest is None or gain is None:
        return f"on {n} {items}, no other variant keeps its accuracy"
    name = variant_label(closest)
    if gain.n < MIN_PAIRED_ITEMS:
        return f"{n} {items} are too few to tell any change from noise ({name}: {_interval('NLL change', gain)})"
    if gain.mean < 0:
        return f"on {n} {items}, {name}'s gain cannot be told from noise ({_interval('NLL change', gain)})"
    return f"on {n} {items}, nothing lowers its NLL (the closest, {name}: {_interval('NLL change', gain)})"


def _interval(what: str, d: PairedDifference) -> str:
    """ "NLL change -0.04, 90% interval -0.15 to +0.06": 2 decimals, 3 when all are small."""
    digits = 2 if max(abs(d.mean), abs(d.lo), abs(d.hi)) >= 0.05 else 3
    return f"{what} {d.mean:+.{digits}f}, {d.level:.0%} interval {d.lo:+.{digits}f} to {d.hi:+.{digits}f}"


HELDOUT_COLUMNS = ("variant", "S_V NLL", f"NLL change [{LEVEL} interval]", "S_V accuracy", "counted")
# The same evidence when the post-hoc choice was made on every labelled item (calibrate_on = all)
POOLED_COLUMNS = ("variant", "NLL (S_T + S_V, out of fold)", HELDOUT_COLUMNS[2], "accuracy (S_T + S_V)", "counted")
POOLED_NOTE = (
    " Here the post-hoc calibrators were fitted k-fold on all labelled items (S_T + S_V), so the figures are "
    "every labelled item's out-of-fold prediction; the trained model saw S_T, so it is compared on S_V alone "
    "and recommended only when it wins there."
)
HELDOUT_CAPTION = (
    "The recommendation's evidence on S_V: each variant's NLL, and its change against the model as it is, "
    f"the mean per-item difference with its paired {LEVEL} bootstrap interval (a change is recommended only "
    "when the whole interval is below zero). Post-hoc calibrators are scored on S_V items they were not fitted "
    "on where S_V allows (cross-fitted)."
)


def pooled(results: dict[str, Any]) -> bool:
    """Whether the recommendation was decided on every labelled item, out of fold."""
    return ((results.get("recommendation") or {}).get("comparison") or {}).get("items") == LABELLED_ITEMS


def evidence_columns(results: dict[str, Any]) -> tuple[str, ...]:
    """heldout_rows' columns: S_V's, or with the choice made on all labelled items, theirs."""
    return POOLED_COLUMNS if pooled(results) else HELDOUT_COLUMNS


def evidence_caption(results: dict[str, Any]) -> str:
    """What heldout_rows' table shows, said under it (the page and the report)."""
    return HELDOUT_CAPTION.replace(" on S_V:", ":", 1) + POOLED_NOTE if pooled(results) else HELDOUT_CAPTION


def heldout_rows(results: dict[str, Any]) -> list[dict[str, str]]:
    """The recommendation's evidence, one row per variant (evidence_columns), lowest NLL
    first: its NLL on S_V (or on every labelled item, out of fold), its per-item NLL change
    against base with the paired 90% interval, its accuracy, and whether it counted (or
    why not). [] without a recommendation."""
    rec = results.get("recommendation") or {}
    columns = evidence_columns(results)
    figures = rec.get("heldout") or {}
    against = (rec.get("comparison") or {}).get("against_reference") or {}
    rows = []
    for name in sorted(figures, key=lambda v: figures[v].get("nll", math.inf)):
        f = figures[name]
        change = PairedDifference.from_dict(against[name]) if name in against else None
        counted = (
            "recommended"
            if name == rec.get("variant")
            else "accuracy lost"
            if not f.get("kept_accuracy", True)
            else "no evidence (fitted on these items)"
            if not f.get("evidence", True)
            else "yes"
        )
        rows.append(
            dict(
                zip(
                    columns,
                    (
                        variant_label(name),
                        f"{f['nll']:.3f}" if isinstance(f.get("nll"), (int, float)) else "-",
                        f"{change.mean:+.3f} [{change.lo:+.3f}, {change.hi:+.3f}]" if change else "-",
                        f"{f['acc']:.3f}" if isinstance(f.get("acc"), (int, float)) else "-",
                        counted,
                    ),
                    strict=True,
                )
            )
        )
    return rows


def _text_table(rows: list[dict[str, str]], columns: tuple[str, ...]) -> list[str]:
    """Rows as fixed-width text lines under a header ([] without rows)."""
    if not rows:
        return []
    widths = [max(len(c), *(len(r[c]) for r in rows)) for c in columns]
    return ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()] + [
        "  ".join(r[c].ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip() for r in rows
    ]


def missing_variant_notes(results: dict[str, Any]) -> dict[str, str]:
    """variant -> why it is missing (e.g. S_V too small for TS), from results.json."""
    return {
        name: entry["note"]
        for name, entry in results.items()
        if isinstance(entry, dict) and isinstance(entry.get("note"), str)
    }


def verdict_lines(results: dict[str, Any], method: str) -> list[str]:
    """The closing lines of a run: the selected step, the recommendation, why a baseline
    is missing, the verdict row of each evaluation set, and the evidence table on the
    evaluation sets (90% intervals)."""
    lines = [line for line in (selection_line(results), recommendation_line(results, method)) if line]
    lines += [f"No {name}: {note}" for name, note in missing_variant_notes(results).items()]
    lines += verdict_row_lines(results)
    lines += _text_table(heldout_rows(results), evidence_columns(results))
    rows = evidence_rows(results, method)
    if rows:
        header = ["dataset", "variant", *interval_names()]
        cells = [
            [r["dataset"], r["variant"] + (" *" if r["recommended"] else ""), *(r[m] for m in interval_names())]
            for r in rows
        ]
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
        lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
        lines += ["  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)) for c in cells]
        lines.append("(* recommended on S_V; figures on the evaluation sets with 90% bootstrap intervals)")
    return lines


# ----------------------------------------------------------------------------- the verdict row


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
    tied: tuple[tuple[str, float], ...] = ()  # (variant, ECE) of each one the items cannot tell from `best`
    n: int | None = None  # items of the set
    decision: str | None = None  # recommendation_decision: the recommendation sentence's opening words

    def cells(self) -> dict[str, str]:
        """The row as table cells (VERDICT_COLUMNS), for the pages and the report."""
        flags = "; ".join(f"{variant_label(v)}: {', '.join(why)}" for v, why in self.flags.items()) or "none"
        recommended = self.decision or (variant_label(self.recommended) if self.recommended else "-")
        return dict(zip(VERDICT_COLUMNS, (self.dataset, self.best_cell(), flags, recommended), strict=True))

    def best_cell(self) -> str:
        """ "CALM (ECE 0.060)", or with a tie "tie on 24 items between CALM (ECE 0.060) and
        temperature scaling (ECE 0.080)" (labels may hold commas: "CALM, adapter only")."""
        if not self.best or self.best_ece is None:
            return "-"
        named = [f"{variant_label(v)} (ECE {ece:.3f})" for v, ece in ((self.best, self.best_ece), *self.tied)]
        if not self.tied:
            return named[0]
        return f"tie on {self.n} items between {', '.join(named[:-1])} and {named[-1]}"


def verdict_rows(results: dict[str, Any]) -> list[VerdictRow]:
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
    by_set: dict[str, list[dict[str, Any]]] = {}
    for row in results.get("results", []):
        by_set.setdefault(str(row.get("dataset")), []).append(row)
    chosen = (results.get("recommendation") or {}).get("variant")
    decision = recommendation_decision(results)
    return [_verdict_row(name, rows, chosen, decision) for name, rows in by_set.items()]


def _verdict_row(
    dataset: str, rows: list[dict[str, Any]], recommended: str | None, decision: str | None = None
) -> VerdictRow:
    base = next((r for r in rows if r.get("variant") == "base"), None)
    if base is None or _number(base, _acc_key(base)) is None:
        return VerdictRow(dataset, None, None, recommended=recommended, decision=decision)
    floor = _number(base, _acc_key(base)) - accuracy_slack(int(base.get("n") or 0)) - 1e-12
    auroc_floor = _auroc_floor(base)
    kept, flags = [], {}
    for row in rows:
        acc, ece = _number(row, _acc_key(row)), _number(row, "ece")
        why = _flags(row, acc, floor)
        if why:
            flags[str(row["variant"])] = why
        auroc = _number(row, "auroc")
        auroc_kept = auroc_floor is None or auroc is None or auroc >= auroc_floor - 1e-12
        if acc is not None and ece is not None and acc >= floor and auroc_kept and NEAR_UNIFORM not in why:
            kept.append((ece, str(row["variant"])))
    if not kept:
        return VerdictRow(dataset, None, None, flags, recommended, n=_count(base), decision=decision)
    best_ece, best = min(kept)
    best_row = next(r for r in rows if r.get("variant") == best)
    tied = tuple((v, e) for e, v in sorted(kept) if v != best and _tied(best_row, v))
    return VerdictRow(dataset, best, best_ece, flags, recommended, tied, _count(base), decision)


def _flags(row: dict[str, Any], acc: float | None, floor: float) -> tuple[str, ...]:
    """The sanity flags of one variant's row, in VERDICT_HELP's order."""
    why = []
    if acc is not None and acc < floor:
        why.append(ACCURACY_LOST)
    if _near_uniform(row, acc):
        why.append(NEAR_UNIFORM)  # the stronger word: it is under-confident too, down to chance
    elif _under_confident(row, acc):
        why.append(UNDER_CONFIDENT)
    return tuple(why)


def _tied(best_row: dict[str, Any], other: str) -> bool:
    """Whether the items cannot tell `best_row`'s variant from `other` (see verdict_rows);
    False when the row records no paired interval for it."""
    record = best_row.get("paired") or {}
    values = (record.get("against") or {}).get(other)
    if not isinstance(values, (list, tuple)) or len(values) != 3:
        return False
    mean, lo, hi = (float(v) for v in values)
    return not PairedDifference(mean, lo, hi, int(record.get("n", 0))).lower_for_sure


def _count(row: dict[str, Any]) -> int | None:
    n = row.get("n")
    return int(n) if isinstance(n, (int, float)) and not isinstance(n, bool) else None


def _acc_key(row: dict[str, Any]) -> str:
    return "sem_acc" if row.get("task") == "openqa" and "sem_acc" in row else "acc"


def _number(row: dict[str, Any], key: str) -> float | None:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _auroc_floor(base: dict[str, Any]) -> float | None:
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


def _under_confident(row: dict[str, Any], acc: float | None) -> bool:
    confidence = _number(row, "confidence")
    return confidence is not None and acc is not None and confidence < acc - UNDER_CONFIDENT_GAP


def _near_uniform(row: dict[str, Any], acc: float | None) -> bool:
    chance, confidence = _number(row, "chance"), _number(row, "confidence")
    if chance is None or confidence is None or acc is None:
        return False
    return confidence <= chance + NEAR_UNIFORM_CONFIDENCE and acc > chance + NEAR_UNIFORM_ACCURACY


def verdict_table(results: dict[str, Any]) -> list[dict[str, str]]:
    """The verdict rows as table rows (VERDICT_COLUMNS): what Compare, the Monitor and the
    report open with."""
    return [row.cells() for row in verdict_rows(results)]


def verdict_row_lines(results: dict[str, Any]) -> list[str]:
    """The verdict rows as text lines (`calm train`'s closing lines, the CLI)."""
    lines = []
    for row in verdict_rows(results):
        cells = row.cells()
        lines.append(
            f"{row.dataset}: best calibrated {cells['best calibrated']}; flags {cells['flags']}; "
            f"recommended on S_V: {cells['recommended on S_V']}"
        )
    return lines
