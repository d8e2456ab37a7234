"""How long a running job has left, as the Monitor says it: the launch estimate until the
run's own pace is measured, then that pace; during the final evaluation, its own progress.

    left = remaining(records, status, config.estimate, now=time.time(), schedule=schedule_of(config.train))
    left.seconds, left.basis          # 140.0, "estimate" (or "measured", "final", "none")
    remaining_text(left)              # "about 2.3 min left (launch estimate)"

The first steps' pace is not the run's: step 1's record counts step 0's full evaluation
(metrics.jsonl's `elapsed` runs from the loop's start). So the launch estimate (config.json's
`estimate`), which counts the evaluations and the final evaluation, speaks until
MEASURED_STEPS step-to-step intervals from step 1 on give the run's own pace. That pace
counts the steps to where the calibrated stop will end the run if no better step comes
(`likely_stop`: the selected step so far, then `patience` evaluations, read from
status.json's `selection`), not the step limit, and adds the final evaluation and its
cross-fitting as the launch estimated them (its `after_steps_s`). Once the steps are over,
the final evaluation's own progress is status.json's `final`: its stage (the post-hoc fits,
the set and variant passes, the recommendation's cross-fitting) and the count inside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from calm_core.estimate.text import minutes
from calm_core.runs.records import FinalProgress, RunStatus
from calm_core.runs.selection_record import SelectionSummary
from calm_core.runs.state import FINAL_PHASE
from calm_core.training.selection import EvalSchedule

MEASURED_STEPS = 3  # step-to-step intervals, from step 1 on, before the run's own pace is trusted
RECENT_STEPS = 10  # the pace is the mean over this many recent intervals
ESTIMATE, MEASURED, FINAL, NONE = "estimate", "measured", "final", "none"  # Remaining.basis


@dataclass(frozen=True)
class Remaining:
    """The time a running job has left and what it rests on (`basis`). `seconds` is None
    when nothing supports a figure (no estimate recorded, or the run is past it); `done`
    and `total` count the final evaluation's passes (or its `stage`'s `unit`) while it
    runs; `stop_at`: the step the measured pace counts to, `limit` the run's step limit;
    `after`: whether the final evaluation's estimate is in `seconds`."""

    seconds: float | None
    basis: str
    done: int = 0
    total: int = 0
    stage: str | None = None
    unit: str = ""
    stop_at: int = 0
    limit: int = 0
    after: bool = False


def measured_pace(records: list[dict[str, Any]], last: int = RECENT_STEPS) -> float | None:
    """Seconds per step over the last `last` intervals between logged steps from step 1 on,
    or None before MEASURED_STEPS of them (step 0's evaluation is never in the pace)."""
    steps = [r for r in records if _number(r.get("step")) and r["step"] >= 1 and _number(r.get("elapsed"))]
    if len(steps) - 1 < MEASURED_STEPS:
        return None
    first, latest = steps[-min(len(steps), last + 1)], steps[-1]
    if latest["step"] <= first["step"]:
        return None
    return float((latest["elapsed"] - first["elapsed"]) / (latest["step"] - first["step"]))


def schedule_of(train: Mapping[str, Any] | None) -> EvalSchedule | None:
    """The run's evaluation steps from config.json's `train`; None when it cannot be read."""
    from calm_core.training.config import TrainConfig

    try:
        return TrainConfig.from_dict(dict(train or {})).eval_schedule if train else None
    except (ValueError, TypeError, KeyError):
        return None


def likely_stop(selection: SelectionSummary | None, schedule: EvalSchedule | None, limit: int) -> int:
    """The step the calibrated stop ends the run at if no better step comes: the `patience`-th
    evaluation after the selected step (selection.Selector stops after `patience` evaluations
    without a newly selected step); `limit` without a stop, a schedule or that many
    evaluations left. A better step later moves it on: the Monitor reads it at each poll."""
    if selection is None or schedule is None or selection.rule != "best":
        return limit
    patience, selected = selection.patience, selection.selected_step
    if patience is None or selected is None:
        return limit
    later = [s for s in schedule.steps_evaluated() if s > selected]
    return min(limit, later[patience - 1]) if 0 < patience <= len(later) else limit


def remaining(
    records: list[dict[str, Any]],
    status: RunStatus,
    estimate: Mapping[str, Any] | None,
    now: float,
    schedule: EvalSchedule | None = None,
) -> Remaining:
    """What the Monitor says of the time left (see the module docstring): the final
    evaluation's stage and count while it runs; once the pace is measured, that pace times
    the steps to `likely_stop` plus the estimated final evaluation; before that, the launch
    estimate's likely seconds less the time since the job started (None once past it)."""
    if (status.phase or "").startswith(FINAL_PHASE):
        final = status.final or FinalProgress()
        return Remaining(None, FINAL, final.done, final.total, final.stage, final.unit or "")
    step, limit = status.step, _real(status.total_steps)
    pace = measured_pace(records)
    if pace is not None and limit is not None:
        end = likely_stop(status.selection, schedule, int(limit))
        after = _real((estimate or {}).get("after_steps_s"))
        seconds = max(0.0, pace * (end - step)) + (after or 0.0)
        return Remaining(seconds, MEASURED, stop_at=end, limit=int(limit), after=after is not None)
    likely, started = _real((estimate or {}).get("likely_s")), _real(status.started)
    if likely is None or started is None:
        return Remaining(None, NONE)
    left = likely - (now - started)
    return Remaining(left if left > 0 else None, ESTIMATE)


def remaining_text(left: Remaining) -> str:
    """The progress line's words for `left` ("" when there is nothing to say)."""
    if left.basis == FINAL:
        return _final_text(left)
    if left.basis == MEASURED and left.seconds is not None:
        stop = (
            f" to step {left.stop_at}, where the calibrated stop ends the run unless S_V improves (limit {left.limit})"
            if left.stop_at < left.limit
            else ""
        )
        if not left.after:
            return f"about {minutes(left.seconds)} of steps left{stop}"
        return f"about {minutes(left.seconds)} left: steps at the run's own pace{stop}, then the final evaluation"
    if left.basis == ESTIMATE:
        if left.seconds is None:
            return "past the launch estimate; the run's own pace comes after a few steps"
        return f"about {minutes(left.seconds)} left (launch estimate, until the run's own pace is measured)"
    return ""


def _final_text(left: Remaining) -> str:
    """The final evaluation's stage and its count: the set and variant passes unless a
    `stage` (the fits, the cross-fitting) is named."""
    if left.stage:
        count = f": {left.done} of {left.total} {left.unit}".rstrip() if left.total else ""
        return f"{FINAL_PHASE}, {left.stage}{count} (the steps are done)"
    passes = f": {left.done} of {left.total} set and variant passes" if left.total else ""
    return f"{FINAL_PHASE}{passes} (the steps are done)"


def _real(value: object) -> float | None:
    """`value` as a number, None when it is none (a bool is not a number here)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
