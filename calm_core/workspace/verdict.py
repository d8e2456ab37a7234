"""What a finished run says to its user: which step the model is from and why, which
calibrator to use (chosen on S_V), and the test-split evidence beside it.

    lines = verdict_lines(run.results(), method="calm")   # `calm train`'s closing lines
    rows = evidence_rows(run.results(), method="calm")    # one row per (dataset, variant) with 90% intervals
    verdict = verdict_rows(run.results())                 # one line per evaluation set: what to use there, flags

Pure functions over results.json (training/tasks/mcqa.py writes `selection`,
`recommendation` and each row's `ci90`), shared by `calm train`, the HTML report and the
studio's Compare and Monitor pages, so every page says the same thing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from calm_core.calibration.metrics.columns import interval_names
from calm_core.calibration.posthoc import calibrators
from calm_core.calibration.recommend import accuracy_slack
from calm_core.training.selection import lower_limit

# The variants of the untouched model that `calm export --variant` writes as a folder of the
# trained model's shape (workspace/export.py); the verdict offers them as the export to use.
POSTHOC_EXPORTS = ("base", "ts", "vs")
# A forecast is near-uniform when its mean confidence is within this of chance (1/K) while the
# model's accuracy is clearly above chance: its small ECE then hides what the model knows.
NEAR_UNIFORM_CONFIDENCE = 0.05
NEAR_UNIFORM_ACCURACY = 0.10
NEAR_UNIFORM, ACCURACY_LOST = "near-uniform", "accuracy lost"
VERDICT_COLUMNS = ("evaluation set", "best calibrated", "flags", "recommended on S_V")
VERDICT_HELP = {
    "evaluation set": "one row per evaluation set of the run (the first is in domain)",
    "best calibrated": "lowest ECE among the variants that keep base's accuracy (within one point, or one item "
    "under 100 items) and AUROC (not below base's 90% interval)",
    "flags": f"{NEAR_UNIFORM}: mean confidence within {NEAR_UNIFORM_CONFIDENCE} of 1/K while accuracy is more than "
    f"{NEAR_UNIFORM_ACCURACY} above it (a small ECE that says nothing); {ACCURACY_LOST}: accuracy "
    "fell past that slack",
    "recommended on S_V": "the calibrator the run recommends, chosen on S_V (never on a test set)",
}
VERDICT_CAPTION = (
    "Best calibrated: the lowest ECE among variants that keep base's accuracy and AUROC on that set. "
    f"Flags: {NEAR_UNIFORM} (confidence near 1/K while accuracy is well above it) and {ACCURACY_LOST}. "
    "The recommendation is chosen on S_V, so it is the same on every set."
)


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
    """The recommended calibrator and the S_V evidence for it, said plainly when the
    trained model does not win (None without a recommendation)."""
    rec = results.get("recommendation")
    if not rec or not rec.get("variant"):
        return None
    variant = rec["variant"]
    text = f"Recommended: {variant} ({rec.get('reason', '')})."
    if "same" in rec.get("posthoc_fit", ""):  # recommend.cross_fitted: too few S_V items to cross-fit
        text += f" Post-hoc calibrators were {rec['posthoc_fit']}."
    if variant != method:
        text += f" {method} does not win on S_V: use {variant}"
        text += " (the untouched model)." if variant == "base" else " on the base model."
        if variant in POSTHOC_EXPORTS:
            text += (
                " `calm export RUN_ID DIR --variant recommended` writes it as a folder that loads like the trained one."
            )
    return text


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
    accuracy and AUROC, the variants that fail a sanity check, and the S_V recommendation."""

    dataset: str
    best: str | None  # lowest ECE among the variants that keep accuracy and AUROC; None: no base row
    best_ece: float | None
    flags: dict[str, tuple[str, ...]] = field(default_factory=dict)  # variant -> (NEAR_UNIFORM, ACCURACY_LOST)
    recommended: str | None = None  # chosen on S_V (results.json), the same on every set

    def cells(self) -> dict[str, str]:
        """The row as table cells (VERDICT_COLUMNS), for the pages and the report."""
        best = f"{self.best} (ECE {self.best_ece:.3f})" if self.best and self.best_ece is not None else "-"
        flags = "; ".join(f"{variant}: {', '.join(why)}" for variant, why in self.flags.items()) or "none"
        return dict(zip(VERDICT_COLUMNS, (self.dataset, best, flags, self.recommended or "-"), strict=True))


def verdict_rows(results: dict[str, Any]) -> list[VerdictRow]:
    """One VerdictRow per evaluation set of results.json, in the run's order.

    A variant keeps accuracy when it is within `recommend.accuracy_slack(n)` of base (one
    point, or one item under 100 items) and keeps AUROC when it is not below the lower end
    of base's 90% interval (base's own AUROC without an interval); among those, the lowest
    ECE is the best-calibrated. Flags: "accuracy lost" past the slack; "near-uniform" when
    the mean confidence is within NEAR_UNIFORM_CONFIDENCE of chance (a row's `chance`, the
    mean 1/K) while accuracy is more than NEAR_UNIFORM_ACCURACY above it. Open-answer rows
    use `sem_acc`, the accuracy of the answer their confidence is about.
    """
    by_set: dict[str, list[dict[str, Any]]] = {}
    for row in results.get("results", []):
        by_set.setdefault(str(row.get("dataset")), []).append(row)
    chosen = (results.get("recommendation") or {}).get("variant")
    return [_verdict_row(name, rows, chosen) for name, rows in by_set.items()]


def _verdict_row(dataset: str, rows: list[dict[str, Any]], recommended: str | None) -> VerdictRow:
    base = next((r for r in rows if r.get("variant") == "base"), None)
    if base is None or _number(base, _acc_key(base)) is None:
        return VerdictRow(dataset, None, None, recommended=recommended)
    floor = _number(base, _acc_key(base)) - accuracy_slack(int(base.get("n") or 0)) - 1e-12
    auroc_floor = _auroc_floor(base)
    kept, flags = [], {}
    for row in rows:
        acc, ece = _number(row, _acc_key(row)), _number(row, "ece")
        why = []
        if acc is not None and acc < floor:
            why.append(ACCURACY_LOST)
        if _near_uniform(row, acc):
            why.append(NEAR_UNIFORM)
        if why:
            flags[str(row["variant"])] = tuple(why)
        auroc = _number(row, "auroc")
        auroc_kept = auroc_floor is None or auroc is None or auroc >= auroc_floor - 1e-12
        if acc is not None and ece is not None and acc >= floor and auroc_kept and NEAR_UNIFORM not in why:
            kept.append((ece, str(row["variant"])))
    best = min(kept) if kept else None
    return VerdictRow(dataset, best[1] if best else None, best[0] if best else None, flags, recommended)


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
            f"recommended on S_V {cells['recommended on S_V']}"
        )
    return lines
