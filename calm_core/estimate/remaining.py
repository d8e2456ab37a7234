"""How long a running job has left, as the Monitor says it: the launch estimate until the
run's own pace is measured, then that pace; during the final evaluation, its own progress.

    left = remaining(records, status, config.estimate, now=time.time())
    left.seconds, left.basis          # 140.0, "estimate" (or "measured", "final", "none")
    remaining_text(left)              # "about 2.3 min left (launch estimate)"

The first steps' pace is not the run's: step 1's record counts step 0's full evaluation
(metrics.jsonl's `elapsed` runs from the loop's start). So the launch estimate (config.json's
`estimate`), which counts the evaluations and the final evaluation, speaks until
MEASURED_STEPS step-to-step intervals from step 1 on give the run's own pace. Once the
steps are over (the calibrated stop may end a run early), the final evaluation's own
progress is status.json's `final` (written per set and variant).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from calm_core.estimate.text import minutes
from calm_core.runs.records import RunStatus
from calm_core.runs.state import FINAL_PHASE

MEASURED_STEPS = 3  # step-to-step intervals, from step 1 on, before the run's own pace is trusted
RECENT_STEPS = 10  # the pace is the mean over this many recent intervals
ESTIMATE, MEASURED, FINAL, NONE = "estimate", "measured", "final", "none"  # Remaining.basis


@dataclass(frozen=True)
class Remaining:
    """The time a running job has left and what it rests on (`basis`). `seconds` is None
    when nothing supports a figure (no estimate recorded, or the run is past it); `done`
    and `total` count the final evaluation's passes while it runs."""

    seconds: float | None
    basis: str
    done: int = 0
    total: int = 0


def measured_pace(records: list[dict[str, Any]], last: int = RECENT_STEPS) -> float | None:
    """Seconds per step over the last `last` intervals between logged steps from step 1 on,
    or None before MEASURED_STEPS of them (step 0's evaluation is never in the pace)."""
    steps = [r for r in records if _number(r.get("step")) and r["step"] >= 1 and _number(r.get("elapsed"))]
    if len(steps) - 1 < MEASURED_STEPS:
        return None
    first, latest = steps[-min(len(steps), last + 1)], steps[-1]
    if latest["step"] <= first["step"]:
        return None
    return (latest["elapsed"] - first["elapsed"]) / (latest["step"] - first["step"])


def remaining(
    records: list[dict[str, Any]], status: RunStatus, estimate: Mapping[str, Any] | None, now: float
) -> Remaining:
    """What the Monitor says of the time left (see the module docstring): the final
    evaluation's passes while it runs; the measured pace times the steps left once it is
    measured; before that, the launch estimate's likely seconds less the time since the
    job started (None once the run is past it)."""
    if (status.phase or "").startswith(FINAL_PHASE):
        final = status.final or {}
        return Remaining(None, FINAL, int(final.get("done") or 0), int(final.get("total") or 0))
    step, total = status.step, status.total_steps
    pace = measured_pace(records)
    if pace is not None and _number(total):
        return Remaining(max(0.0, pace * (int(total) - step)), MEASURED)
    likely, started = (estimate or {}).get("likely_s"), status.started

    if not _number(likely) or not _number(started):
        return Remaining(None, NONE)
    left = float(likely) - (now - float(started))
    return Remaining(left if left > 0 else None, ESTIMATE)


def remaining_text(left: Remaining) -> str:
    """The progress line's words for `left` ("" when there is nothing to say)."""
    if left.basis == FINAL:
        passes = f": {left.done} of {left.total} set and variant passes" if left.total else ""
        return f"{FINAL_PHASE}{passes} (the steps are done)"
    if left.basis == MEASURED and left.seconds is not None:
        return f"about {minutes(left.seconds)} of steps left"
    if left.basis == ESTIMATE:
        if left.seconds is None:
            return "past the launch estimate; the run's own pace comes after a few steps"
        return f"about {minutes(left.seconds)} left (launch estimate, until the run's own pace is measured)"
    return ""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
