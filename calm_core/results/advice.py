"""Which model to use, in words: the selected step, the recommendation sentence and the
evidence it rests on (S_V's paired intervals, the evaluation sets' bootstrap intervals),
the same words for Monitor, Compare, `calm train`, the report and the model card. The
verdict row itself (best calibrated, flags, ties) is results/verdict.py's.

    recommendation_sentence(results)   # "Keep the model as it is: on 24 held-out items, ..."
    heldout_rows(results)              # the recommendation's evidence, one row per variant
    verdict_lines(results, "calm")     # a run's closing lines (calm train, the CLI)
"""

from __future__ import annotations

import math
from typing import Any

from calm_core.calibration.metrics.columns import interval_names
from calm_core.calibration.metrics.paired import MIN_PAIRED_ITEMS, PairedDifference
from calm_core.calibration.metrics.summary import with_interval
from calm_core.calibration.posthoc import calibrators
from calm_core.calibration.recommend import HELDOUT_ITEMS
from calm_core.results.deciding import deciding_comparison
from calm_core.results.knowing import chance_note, near_uniform_note
from calm_core.results.verdict import (
    LEVEL,
    keeps_model,
    posthoc_exports,
    recommendation_decision,
    variant_label,
    verdict_row_lines,
)
from calm_core.runs.recommendation import Comparison, Recommendation, VariantFigures
from calm_core.runs.records import RunResults
from calm_core.runs.selection_record import CandidateFigures, SelectionSummary


def evidence_variants(method: str) -> list[str]:
    """The variants of the evidence table: base, every post-hoc calibrator, the trained model."""
    return ["base", *calibrators(), method]


def evidence_rows(results: RunResults, method: str) -> list[dict[str, Any]]:
    """Per evaluation set and evidence variant: acc, ECE, AUROC and mean confidence, each
    as "value [lo, hi]" (90% bootstrap interval), and whether it is the recommended one."""
    wanted = evidence_variants(method)
    chosen = results.recommended
    rows = []
    for row in results.rows:
        if row.get("variant") not in wanted:
            continue
        ci = row.get("ci90") or {}
        out = {"dataset": row["dataset"], "variant": row["variant"], "recommended": row["variant"] == chosen}
        for name in interval_names():
            value, bounds = row.get(name), ci.get(name)
            out[name] = with_interval(value, bounds)
        rows.append(out)
    order = {v: i for i, v in enumerate(wanted)}
    return sorted(rows, key=lambda r: (r["dataset"], order[r["variant"]]))


def selection_line(results: RunResults) -> str | None:
    """Which step the model is from, and why (None for a run without a calibrated stop)."""
    selection = results.selection
    if selection is None or selection.selected_step is None:
        return None
    step, chosen = selection.selected_step, selection.selected or CandidateFigures(step=selection.selected_step)
    if selection.rule == "last":
        return f"The model is from step {step}, the last step (--select last)."
    text = (
        f"The model is from step {step}, selected on S_V: NLL {_or_nan(chosen.score):.4f}, "
        f"ECE {_or_nan(chosen.ece):.4f}, accuracy {_or_nan(chosen.acc):.3f}"
    )
    if step == 0:
        text += " (no trained step beat the untouched model on S_V, so it is the base model)"
    if selection.stopped_early is not None:
        text += (
            f"; the run stopped early at step {selection.stopped_early} ({selection.patience} "
            "evaluations without a better step)"
        )
    return text + "."


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value


def selection_status_line(selection: SelectionSummary | None) -> str | None:
    """status.json's `selection` in one line, while the run goes and after: the rule, the
    step selected so far with its S_V NLL / ECE / accuracy, and where the run stopped
    early (None before the first evaluation, or for a run without a calibrated stop)."""
    if selection is None or selection.selected_step is None:
        return None
    chosen = selection.selected
    text = f"Selected step {selection.selected_step} (rule `{selection.rule or '?'}`)"
    figures = [
        f"{label} {value:{fmt}}"
        for value, label, fmt in (
            (chosen.score if chosen else None, "S_V NLL", ".4f"),
            (chosen.ece if chosen else None, "ECE", ".4f"),
            (chosen.acc if chosen else None, "accuracy", ".3f"),
        )
        if value is not None
    ]
    if figures:
        text += ": " + ", ".join(figures)
    if selection.stopped_early is not None:
        text += f"; stopped early at step {selection.stopped_early}"
    return text + "."


def selected_step(selection: SelectionSummary | None) -> int | None:
    """The step a run's model is (so far) from, or None: what the curves mark."""
    return selection.selected_step if selection is not None else None


def lower_threshold(selection: SelectionSummary | None) -> float | None:
    """The highest S_T cross-entropy of theta a step may have and still be selected
    (SelectionSummary.lower_threshold); None when it is not recorded."""
    return selection.lower_threshold if selection is not None else None


def method_recommended(results: RunResults, method: str) -> bool | None:
    """Whether the recommendation is the trained model itself (None: no recommendation),
    so a page can say it plainly (success) or warn that a baseline wins."""
    variant = results.recommended
    return None if not variant else variant == method


def recommendation_line(results: RunResults, method: str) -> str | None:
    """The recommendation sentence (`recommendation_sentence`), then the comparison that
    decided it where the sentence reads other items (`deciding.deciding_comparison`), then
    what a reader may need next: that post-hoc calibrators were scored in-sample, and how to
    export a recommended variant of the untouched model (None without a recommendation)."""
    sentence = recommendation_sentence(results)
    if sentence is None:
        return None
    rec, text = results.recommendation, sentence
    if rec is None:  # a sentence means a recommendation
        return None
    deciding = deciding_comparison(results, method)
    if deciding:
        text += " " + deciding[:1].upper() + deciding[1:]
    if "same" in (rec.posthoc_fit or ""):  # recommend.cross_fitted: too few S_V items to cross-fit
        text += f" Post-hoc calibrators were {rec.posthoc_fit}."
    if keeps_model(results):
        text += KEEP_NEXT
    elif rec.variant != method and rec.variant in posthoc_exports():
        text += " `calm export RUN_ID DIR --variant recommended` writes it as a folder that loads like the trained one."
    return text


# What to do next when the answer is "keep": exporting the untouched model would only copy it.
KEEP_NEXT = (
    " Nothing needs exporting: go on using the model you started from. The trained model stays in this run "
    "(`calm export RUN_ID DIR`) if more held-out data later shows that it helps."
)


def recommendation_sentence(results: RunResults) -> str | None:
    """The recommendation in one plain sentence, the same words wherever it is shown (the
    verdict row opens with its first words, `recommendation_decision`): what to do, on how
    many held-out items, and the paired 90% interval it rests on; then, where they hold,
    that the recommended variant is near-uniform and that the model does not know the data
    (knowing.py), so a flat forecast is never recommended without the word. None without one.

        Keep the model as it is: on 24 held-out items, temperature scaling's gain cannot be
        told from noise (NLL change -0.04, 90% interval -0.15 to +0.06).
    """
    rec = results.recommendation
    if rec is None or not rec.variant:
        return None
    decision = recommendation_decision(results)
    comparison = rec.comparison
    if comparison is None or (not comparison.against_reference and not comparison.candidates):
        sentence = f"{decision}: it has the lowest S_V NLL ({rec.reason or ''}); this run recorded no interval."
    else:
        sentence = f"{decision}: {_because(rec.variant, comparison)}."
    caveats = (note for note in (near_uniform_note(results), chance_note(results)) if note)
    return " ".join((sentence, *caveats))


def _because(chosen: str, comparison: Comparison) -> str:
    """The sentence after its opening words, from the recommendation's `comparison`."""
    n, reference, items = comparison.n, comparison.reference, comparison.items
    against, runner_up = comparison.against_reference, comparison.runner_up
    if chosen == reference:
        return _keep_because(n, runner_up, against.get(runner_up) if runner_up else None, items)
    gain = against[chosen]
    text = f"on {n} {items} it lowers the NLL ({_interval('NLL change', gain)})"
    versus = comparison.against_runner_up
    if not runner_up or runner_up == reference or versus is None:
        return text
    simpler = comparison.simpler or chosen
    if runner_up in against and not against[runner_up].lower_for_sure:
        return text + "; " + _not_shown(runner_up, against[runner_up], versus, simpler == runner_up)
    if versus.lower_for_sure:
        return text + f", also against the runner-up, {variant_label(runner_up)} ({_interval('difference', versus)})"
    which = "it is the simpler of the two" if simpler == chosen else f"{variant_label(simpler)} is simpler"
    return text + f"; it is tied with {variant_label(runner_up)} ({_interval('difference', versus)}), and {which}"


def _not_shown(runner_up: str, gain: PairedDifference, versus: PairedDifference, simpler: bool) -> str:
    """Why the runner-up is not the one recommended although it comes close: its own NLL
    change against the model as it is is not shown (the interval reaches zero, or too few
    items), which is checked before how the two compare, so it is said first."""
    name = variant_label(runner_up) + (", though simpler," if simpler else "")
    why = "reaches zero" if gain.hi >= 0 else f"rests on too few items (under {MIN_PAIRED_ITEMS})"
    text = f"{name} is not shown to lower it: its own {_interval('NLL change', gain)}, {why}"
    if versus.undecided:
        text += f"; the two cannot be told apart ({_interval('difference', versus)})"
    return text


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


# The same evidence when the post-hoc choice was made on every labelled item (calibrate_on = all):
# each row says which items scored it, since the trained model is scored on S_V alone beside them.
SCORED_ON = "scored on"
POOLED_COLUMNS = ("variant", SCORED_ON, "NLL", HELDOUT_COLUMNS[2], "accuracy", "counted")
POOLED_ITEMS, HELDOUT_ONLY_ITEMS = "S_T + S_V, out of fold", "S_V alone"  # the `scored on` cells


POOLED_NOTE = (
    " Here the post-hoc calibrators were fitted k-fold on all labelled items (S_T + S_V), so their figures are "
    "every labelled item's out-of-fold prediction; the trained model saw S_T, so its rows are scored on S_V "
    "alone, beside the model as it is and the recommended variant on the same items, and it is recommended only "
    "when it wins there."
)


HELDOUT_CAPTION = (
    "The recommendation's evidence on S_V: each variant's NLL, and its change against the model as it is, "
    f"the mean per-item difference with its paired {LEVEL} bootstrap interval (a change is recommended only "
    "when the whole interval is below zero). Post-hoc calibrators are scored on S_V items they were not fitted "
    "on where S_V allows (cross-fitted). Counted: whether a variant took part in the choice, or why not."
)


def pooled(results: RunResults) -> bool:
    """Whether the recommendation was decided on every labelled item, out of fold."""
    return results.recommendation is not None and results.recommendation.pooled


def evidence_columns(results: RunResults) -> tuple[str, ...]:
    """heldout_rows' columns: S_V's, or with the choice made on all labelled items, theirs."""
    return POOLED_COLUMNS if pooled(results) else HELDOUT_COLUMNS


def evidence_caption(results: RunResults) -> str:
    """What heldout_rows' table shows, said under it (the page and the report)."""
    return HELDOUT_CAPTION.replace(" on S_V:", ":", 1) + POOLED_NOTE if pooled(results) else HELDOUT_CAPTION


def heldout_rows(results: RunResults) -> list[dict[str, str]]:
    """The recommendation's evidence, one row per variant (evidence_columns), lowest NLL
    first: its NLL on S_V (or on every labelled item, out of fold), its per-item NLL change
    against base with the paired 90% interval, its accuracy, and whether it counted (or
    why not). With the choice made on all labelled items, the variants that were compared
    on S_V alone (the trained model: it saw S_T) follow, with base on the same S_V items,
    so every trained variant is in the table. [] without a recommendation."""
    rec = results.recommendation
    if rec is None:
        return []
    if not rec.pooled:
        rows = _stage_rows(rec, rec.variant, HELDOUT_COLUMNS)
        return rows + _not_compared(results, set(rec.heldout), HELDOUT_COLUMNS)
    rows = _stage_rows(rec, rec.variant, POOLED_COLUMNS, POOLED_ITEMS)
    on_heldout = rec.stages.get("S_V")
    shown = set(rec.heldout)
    added = {name for name in on_heldout.heldout if name not in shown} if on_heldout else set()
    if on_heldout is not None and added:
        keep = added | {on_heldout.reference, rec.variant or ""}  # the recommended one beside them, on the same items
        rows += _stage_rows(on_heldout, rec.variant, POOLED_COLUMNS, HELDOUT_ONLY_ITEMS, keep)
    return rows + _not_compared(results, shown | added, POOLED_COLUMNS)


# Why an evaluated post-hoc calibrator has no figures in the evidence: recommend.cross_fitted
# scores a calibrator only out of fold, and one that reads hidden states (ATS) only when each
# fold's fitting part holds its own minimum of items.
NOT_COMPARED = "not compared: too few items to score it out of fold"


def _not_compared(results: RunResults, compared: set[str], columns: tuple[str, ...]) -> list[dict[str, str]]:
    """A row for each post-hoc calibrator the run evaluated but the recommendation could not
    compare, so the table never drops a variant the tables below show without saying why."""
    evaluated = dict.fromkeys(str(row.get("variant")) for row in results.rows)
    missing = [name for name in evaluated if name in calibrators() and name not in compared]
    return [
        {
            column: variant_label(name) if column == "variant" else NOT_COMPARED if column == "counted" else "-"
            for column in columns
        }
        for name in missing
    ]


def _stage_rows(
    stage: Recommendation,
    chosen: str | None,
    columns: tuple[str, ...],
    scored_on: str | None = None,
    only: set[str] | None = None,
) -> list[dict[str, str]]:
    """One recommendation stage's rows (its `heldout` figures and `comparison`), lowest NLL
    first, limited to `only`; `scored_on` fills that column where `columns` has it."""
    figures = stage.heldout
    against = stage.comparison.against_reference if stage.comparison else {}
    names = [name for name in figures if only is None or name in only]
    rows = []
    for name in sorted(names, key=lambda v: _or_inf(figures[v].nll)):
        f = figures[name]
        change = against.get(name)
        cells = {
            "variant": variant_label(name),
            SCORED_ON: scored_on or "",
            "NLL": f"{f.nll:.3f}" if f.nll is not None else "-",
            "change": f"{change.mean:+.3f} [{change.lo:+.3f}, {change.hi:+.3f}]" if change else "-",
            "accuracy": f"{f.acc:.3f}" if f.acc is not None else "-",
            "counted": _counted(name, f, chosen),
        }
        order = ("variant", SCORED_ON, "NLL", "change", "accuracy", "counted")
        values = [cells[key] for key in order if key != SCORED_ON or SCORED_ON in columns]
        rows.append(dict(zip(columns, values, strict=True)))
    return rows


def _or_inf(value: float | None) -> float:
    return math.inf if value is None else value


def _counted(name: str, figures: VariantFigures, chosen: str | None) -> str:
    """The `counted` cell: recommended, yes, or why the variant took no part in the choice."""
    if name == chosen:
        return "recommended"
    if not figures.kept_accuracy:
        return "accuracy lost"
    if not figures.evidence:
        return "no evidence (fitted on these items)"
    return "yes"


def _text_table(rows: list[dict[str, str]], columns: tuple[str, ...]) -> list[str]:
    """Rows as fixed-width text lines under a header ([] without rows)."""
    if not rows:
        return []
    widths = [max(len(c), *(len(r[c]) for r in rows)) for c in columns]
    return ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()] + [
        "  ".join(r[c].ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip() for r in rows
    ]


def missing_variant_notes(results: RunResults) -> dict[str, str]:
    """variant -> why it is missing (e.g. S_V too small for TS), from results.json."""
    return results.missing_notes


def verdict_lines(results: RunResults, method: str) -> list[str]:
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
