"""Whether the model knows the data at all, said beside what a calibrator did to it.

    chance_note(run.results())        # "This model does not know this data: on ..., ..."
    near_uniform_note(run.results())  # "Temperature scaling is near-uniform on ...: ..."
    workspace_note("builtin/capitals/test")  # the Data page: the workspace's runs whose model does not know a set

Calibration makes a model's confidence match how often it is right; it cannot make it
right. A model whose accuracy on a set is not above chance (1/K) by its 90% interval has
nothing there for a calibrator to keep, and the best a calibrator can do is flatten its
forecast towards uniform, whose small ECE then reads as success. So the recommendation
sentence (advice.recommendation_sentence: Compare, the Monitor, the report, the model
card, `calm train`) says both: where the model as it is does not know the data, and
where the recommended variant is near-uniform (verdict.NEAR_UNIFORM). Pure over
results.json.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from calm_core.calibration.metrics.summary import with_interval
from calm_core.results.verdict import LEVEL, NEAR_UNIFORM, NEAR_UNIFORM_CONFIDENCE, variant_label, verdict_rows
from calm_core.runs.lifecycle import RunState
from calm_core.runs.listing import list_runs
from calm_core.runs.records import RunResults
from calm_core.runs.rundir import RunDir

SETS_NAMED = 3  # sets a note names one by one; the rest are counted


def _name(dataset: str) -> str:
    """A set's name as a code span: it is the user's text, and the sentence is shown as
    Markdown (Compare, the Monitor, the model card), where a code span shows it as written."""
    return "`" + str(dataset).replace("`", "'") + "`"


def not_above_chance(row: dict[str, Any]) -> bool:
    """Whether a result row's accuracy is not above its chance (the row's `chance`, the
    mean 1/K) by the lower end of its 90% interval (the accuracy itself without one).
    False when the row records no accuracy or no chance."""
    acc, chance = row.get("acc"), row.get("chance")
    if not isinstance(acc, (int, float)) or not isinstance(chance, (int, float)):
        return False
    bounds = (row.get("ci90") or {}).get("acc")
    lower = bounds[0] if isinstance(bounds, (list, tuple)) and len(bounds) == 2 else acc
    return bool(lower <= chance)


def chance_note(results: RunResults) -> str | None:
    """ "This model does not know this data: on SET, the model as it is answers 0.200
    [0.100, 0.320] right, not above chance (1/K = 0.250) by its 90% interval; ..." for the
    evaluation sets where that holds, or None where it knows every set."""
    rows = [dict(r) for r in results.rows if r.get("variant") == "base" and not_above_chance(dict(r))]
    if not rows:
        return None
    shown = [
        f"on {_name(r['dataset'])}, the model as it is answers {_accuracy(r)} right, not above chance "
        f"(1/K = {r['chance']:.3f}) by its {LEVEL} interval"
        for r in rows[:SETS_NAMED]
    ]
    more = f" (and {len(rows) - SETS_NAMED} more sets)" if len(rows) > SETS_NAMED else ""
    return (
        f"This model does not know this data: {'; '.join(shown)}{more}. Calibration cannot make its answers right "
        "there, only its confidence honest about them."
    )


def _accuracy(row: dict[str, Any]) -> str:
    """ "0.200 [0.100, 0.320]": a row's accuracy with its interval."""
    return with_interval(row["acc"], (row.get("ci90") or {}).get("acc"))


def near_uniform_note(results: RunResults) -> str | None:
    """ "Temperature scaling is near-uniform on SET: ..." when the recommended variant is
    flagged near-uniform on some evaluation set (verdict.NEAR_UNIFORM), else None."""
    chosen = results.recommended
    if not chosen:
        return None
    sets = [row.dataset for row in verdict_rows(results) if NEAR_UNIFORM in row.flags.get(chosen, ())]
    if not sets:
        return None
    more = f" and {len(sets) - SETS_NAMED} more sets" if len(sets) > SETS_NAMED else ""
    named = ", ".join(_name(name) for name in sets[:SETS_NAMED]) + more
    label = variant_label(chosen)
    return (
        f"{label[:1].upper() + label[1:]} is {NEAR_UNIFORM} on {named}: its mean confidence is within "
        f"{NEAR_UNIFORM_CONFIDENCE} of 1/K while the model is right well above chance there, so it gives every "
        "option about the same probability and its small ECE says nothing."
    )


def dataset_note(dataset: str, runs: Iterable[RunDir]) -> str | None:
    """ "This model does not know this data: run R scored it 0.200 [0.100, 0.320] right as
    it is, not above chance (1/K = 0.250) by its 90% interval; ..." for the finished runs
    among `runs` whose model as it is was not above chance on `dataset` (in their final
    evaluation or one added after training), or None where none was. The Data page says it
    beside the set, before a person trains on it: calibration cannot make such a model right."""
    shown = []
    for run in runs:
        row = _unknown_row(run, dataset)
        if row is not None:
            shown.append(
                f"run `{run.run_id}` scored it {_accuracy(row)} right as it is, not above chance "
                f"(1/K = {row['chance']:.3f}) by its {LEVEL} interval"
            )
    if not shown:
        return None
    more = f" (and {len(shown) - SETS_NAMED} more runs)" if len(shown) > SETS_NAMED else ""
    return (
        f"This model does not know this data: {'; '.join(shown[:SETS_NAMED])}{more}. Calibration cannot make its "
        "answers right here, only its confidence honest about them."
    )


def _unknown_row(run: RunDir, dataset: str) -> dict[str, Any] | None:
    """The base row of a finished `run` on `dataset` that is not above chance, or None (not
    finished, not scored there, above chance, or files that do not read)."""
    try:
        if run.status.state != RunState.FINISHED or not run.has_results():
            return None
        rows = [*run.results().rows, *run.added_results()]
    except (OSError, ValueError):
        return None
    base = [dict(r) for r in rows if r.get("variant") == "base" and r.get("dataset") == dataset]
    return next((row for row in base if not_above_chance(row)), None)


def workspace_note(dataset: str, root: str | Path | None = None) -> str | None:
    """`dataset_note` over every finished run under `root` (the workspace's runs), newest
    first, as Compare lists them."""
    runs = [RunDir(summary.path) for summary in list_runs(root) if summary.state == RunState.FINISHED]
    return dataset_note(dataset, runs)
