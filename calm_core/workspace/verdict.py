"""What a finished run says to its user: which step the model is from and why, which
calibrator to use (chosen on S_V), and the test-split evidence beside it.

    lines = verdict_lines(run.results(), method="calm")   # `calm train`'s closing lines
    rows = evidence_rows(run.results(), method="calm")    # one row per (dataset, variant) with 90% intervals

Pure functions over results.json (training/tasks/mcqa.py writes `selection`,
`recommendation` and each row's `ci90`), shared by `calm train`, the HTML report and the
studio's Compare and Monitor pages, so every page says the same thing.
"""

from __future__ import annotations

from typing import Any

from calm_core.calibration.posthoc import calibrators
from calm_core.training.selection import lower_limit
from calm_core.workspace.export import POSTHOC_EXPORTS

EVIDENCE_METRICS = ("acc", "ece", "auroc", "confidence")  # with their 90% bootstrap intervals


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
        for name in EVIDENCE_METRICS:
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
    text = f"The model is from step {step}, selected on S_V: NLL {chosen.get('score', float('nan')):.4f}, " \
           f"ECE {chosen.get('ece', float('nan')):.4f}, accuracy {chosen.get('acc', float('nan')):.3f}"
    if step == 0:
        text += " (no trained step beat the untouched model on S_V, so it is the base model)"
    if selection.get("stopped_early") is not None:
        text += f"; the run stopped early at step {selection['stopped_early']} ({selection.get('patience')} " \
                "evaluations without a better step)"
    return text + "."


def selection_status_line(selection: dict[str, Any] | None) -> str | None:
    """status.json's `selection` in one line, while the run goes and after: the rule, the
    step selected so far with its S_V NLL / ECE / accuracy, and where the run stopped
    early (None before the first evaluation, or for a run without a calibrated stop)."""
    if not selection or selection.get("selected_step") is None:
        return None
    chosen = selection.get("selected") or {}
    text = f"Selected step {selection['selected_step']} (rule `{selection.get('rule', '?')}`)"
    figures = [f"{label} {chosen[key]:{fmt}}" for key, label, fmt in
               (("score", "S_V NLL", ".4f"), ("ece", "ECE", ".4f"), ("acc", "accuracy", ".3f"))
               if isinstance(chosen.get(key), (int, float))]
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
            text += " `calm export RUN_ID DIR --variant recommended` writes it as a folder that loads like the trained one."
    return text


def missing_variant_notes(results: dict[str, Any]) -> dict[str, str]:
    """variant -> why it is missing (e.g. S_V too small for TS), from results.json."""
    return {name: entry["note"] for name, entry in results.items()
            if isinstance(entry, dict) and isinstance(entry.get("note"), str)}


def verdict_lines(results: dict[str, Any], method: str) -> list[str]:
    """The closing lines of a run: the selected step, the recommendation, why a baseline
    is missing, and the evidence table on the evaluation sets (90% intervals)."""
    lines = [line for line in (selection_line(results), recommendation_line(results, method)) if line]
    lines += [f"No {name}: {note}" for name, note in missing_variant_notes(results).items()]
    rows = evidence_rows(results, method)
    if rows:
        header = ["dataset", "variant", *EVIDENCE_METRICS]
        cells = [[r["dataset"], r["variant"] + (" *" if r["recommended"] else ""), *(r[m] for m in EVIDENCE_METRICS)]
                 for r in rows]
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
        lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)))
        lines += ["  ".join(v.ljust(w) for v, w in zip(c, widths)) for c in cells]
        lines.append("(* recommended on S_V; figures on the evaluation sets with 90% bootstrap intervals)")
    return lines
