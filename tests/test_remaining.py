"""The Monitor's time left (calm_core.estimate.remaining): the launch estimate until the
run's own pace is measured, then that pace, and the final evaluation's own passes (issue 40:
the first "about 5.0 min left" at step 1 was 4x too high; the final evaluation sat at "0.8
min left")."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from calm_core.runs.records import RunStatus

import os
import re
import time

from calm_core.runs.selection_record import SelectionSummary
from calm_core.estimate.remaining import (
    ESTIMATE,
    FINAL,
    MEASURED,
    MEASURED_STEPS,
    NONE,
    Remaining,
    measured_pace,
    remaining,
    remaining_text,
)

NOW = 10_000.0
# Step 0's full evaluation took 50 s before step 1; each step takes 5 s.
STEP_ONE = [{"step": 0, "elapsed": 0.0}, {"step": 1, "elapsed": 55.0}]
ESTIMATE_RECORD = {"likely_s": 300.0}


def _status(step: int, **fields) -> RunStatus:
    from calm_core.runs.records import RunStatus

    return RunStatus.from_json({"state": "running", "step": step, "total_steps": 20, "started": NOW - 100.0, **fields})



def test_at_step_one_the_launch_estimate_speaks_not_step_zeros_evaluation() -> None:
    left = remaining(STEP_ONE, _status(1), ESTIMATE_RECORD, NOW)
    assert left == Remaining(200.0, ESTIMATE)  # 300 s likely, 100 s since the job started
    assert remaining_text(left) == "about 3.3 min left (launch estimate, until the run's own pace is measured)"
    # the old rule (the pace of the last logged steps) took step 1's elapsed, step 0's evaluation in it
    assert measured_pace(STEP_ONE) is None and 55.0 * 19 > 5 * left.seconds


def test_the_runs_own_pace_takes_over_after_measured_steps() -> None:
    records = STEP_ONE + [{"step": s, "elapsed": 55.0 + 5.0 * (s - 1)} for s in range(2, 2 + MEASURED_STEPS)]
    assert measured_pace(records[:-1]) is None  # one interval short: still the estimate
    assert remaining(records[:-1], _status(MEASURED_STEPS), ESTIMATE_RECORD, NOW).basis == ESTIMATE
    step = 1 + MEASURED_STEPS
    left = remaining(records, _status(step), ESTIMATE_RECORD, NOW)
    assert (left.seconds, left.basis, left.stop_at) == (5.0 * (20 - step), MEASURED, 20)  # no stop: the limit
    assert remaining_text(left) == f"about {5 * (20 - step)} s of steps left"  # under two minutes: seconds


def test_past_the_estimate_or_without_one_no_figure_is_made_up() -> None:
    late = remaining(STEP_ONE, _status(1, started=NOW - 400.0), ESTIMATE_RECORD, NOW)
    assert late == Remaining(None, ESTIMATE)
    assert remaining_text(late).startswith("past the launch estimate")
    assert remaining(STEP_ONE, _status(1), None, NOW) == Remaining(None, NONE)
    assert remaining_text(Remaining(None, NONE)) == ""


def test_the_final_evaluation_counts_its_own_passes_not_steps_that_will_not_run() -> None:
    """A run the calibrated stop ended at step 12 of 20: steps are left on paper, none will run."""
    records = [{"step": s, "elapsed": 5.0 * s} for s in range(0, 13)]
    status = _status(12, phase="final evaluation", final={"done": 2, "total": 6})
    left = remaining(records, status, ESTIMATE_RECORD, NOW)
    assert left == Remaining(None, FINAL, 2, 6)
    assert remaining_text(left) == "final evaluation: 2 of 6 set and variant passes (the steps are done)"


# A recorded S_V NLL curve (evaluated steps of the quick preset: 1, 2, 4, 6, ...): best at
# step 4, worse after it, so the calibrated stop (patience 4) ends the run at step 12 of 40.
CURVE = {0: 1.0, 1: 0.9, 2: 0.8, 4: 0.7, 6: 0.75, 8: 0.8, 10: 0.85, 12: 0.9, 14: 0.95}


def _selector_over(curve: dict[int, float], until: int):
    """The calibrated stop as the run ran it, offered the curve's evaluations up to `until`."""
    from calm_core.training.selection import Candidate, Selector, SelectRule

    selector, stopped = Selector(SelectRule(patience=4)), None
    for step, nll in sorted(curve.items()):
        if step > until:
            break
        verdict = selector.offer(Candidate(step, nll, 0.1, 0.5, 30, losses=[nll + d for d in (0.0, 0.02, -0.02) * 10]))
        stopped = stopped if stopped is not None or not verdict.stop else step
    return selector, stopped


def test_the_pace_counts_the_steps_to_where_the_calibrated_stop_ends_the_run_not_the_limit() -> None:
    """At step 8 the curve's best is step 4: with patience 4 the run stops at step 12 unless S_V
    improves, and it does stop there; the time left counts 4 steps and the final evaluation
    (its launch estimate), not the 32 steps up to the limit (issue 49: 40 counted, 16 run)."""
    from calm_core.estimate.remaining import likely_stop, schedule_of
    from calm_core.training.config import TrainConfig

    train = TrainConfig.preset("quick", method="calm").to_dict()
    schedule = schedule_of(train)
    selector, _ = _selector_over(CURVE, until=8)
    summary = SelectionSummary.from_json(selector.summary())  # as status.json's record reads it
    assert likely_stop(summary, schedule, 40) == 12
    assert _selector_over(CURVE, until=40)[1] == 12  # where the run really stops
    records = [{"step": s, "elapsed": 5.0 * s} for s in range(0, 9)]
    status = _status(8, total_steps=40, selection=selector.summary())
    left = remaining(records, status, {"likely_s": 300.0, "after_steps_s": 60.0}, NOW, schedule)
    assert (left.seconds, left.stop_at, left.limit) == (5.0 * (12 - 8) + 60.0, 12, 40)
    assert remaining_text(left) == (
        "about 80 s left: steps at the run's own pace to step 12, where the calibrated stop ends the run "
        "unless S_V improves (limit 40), then the final evaluation"
    )
    last = SelectionSummary.from_json({"rule": "last", "selected_step": 4, "patience": 4})
    assert likely_stop(last, schedule, 40) == 40 and likely_stop(summary, None, 40) == 40


def test_each_final_stage_says_what_it_does_and_its_count() -> None:
    """The recommendation's cross-fitting ran 106 s behind a full bar that said the passes
    were done (issue 49): each stage is named, with its own count."""
    from calm_core.training.tasks.mcqa import CROSS_FIT_STAGE, FIT_STAGE

    final = {"done": 3, "total": 15, "stage": CROSS_FIT_STAGE, "unit": "calibrator and fold fits"}
    left = remaining([], _status(16, phase="final evaluation", final=final), None, NOW)
    assert (left.basis, left.done, left.total) == (FINAL, 3, 15)
    assert remaining_text(left) == (
        "final evaluation, cross-fitting the calibrators for the recommendation: 3 of 15 calibrator and fold fits "
        "(the steps are done)"
    )
    fits = remaining([], _status(16, phase="final evaluation", final={"done": 0, "total": 0, "stage": FIT_STAGE}),
                     None, NOW)
    assert remaining_text(fits) == "final evaluation, fitting the post-hoc calibrators (the steps are done)"


def _loss_vlines(at) -> list[dict]:
    import json

    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        if "Training loss" in json.dumps(spec.get("layout", {}).get("title", "")):
            return [s for s in spec["layout"].get("shapes", []) if s.get("type") == "line"]
    return []


def test_the_monitor_says_the_estimate_then_the_final_passes_and_captions_match_charts(open_page) -> None:
    from calm_core.runs.rundir import RunDir

    run = RunDir.new({"train": {"method": "calm", "model": "tiny", "train_data": "builtin/capitals/train"},
                      "estimate": {"likely_s": 600.0}}, name_hint="left")
    for record in STEP_ONE:
        run.append_metrics({**record, "train/lower_loss": 1.0})
    now = time.time()
    run.write_status("running", step=1, total_steps=20, pid=os.getpid(), started=now - 120.0, heartbeat=now,
                     selection={"selected_step": 0, "rule": "best"})
    monitor = open_page("../pages/monitor/monitor.py")
    assert not monitor.exception, monitor.exception
    bar = monitor.get("progress")[0].proto
    assert "(launch estimate, until the run's own pace is measured)" in bar.text, bar.text
    shown = float(re.search(r"about ([0-9.]+) min left", bar.text).group(1))
    assert 6.5 <= shown <= 8.0  # 600 s less the 120 s since the start (and the page's own seconds)
    captions = " ".join(c.value for c in monitor.caption)
    assert "The dashed line marks the selected step." in captions and "star marks the selected step" not in captions
    assert [s["line"]["dash"] for s in _loss_vlines(monitor)] == ["dash"]  # what the caption says is drawn
    run.update_status(phase="final evaluation", final={"done": 3, "total": 12}, heartbeat=time.time())
    monitor.run()
    bar = monitor.get("progress")[0].proto
    assert "final evaluation: 3 of 12 set and variant passes (the steps are done)" in bar.text, bar.text
    assert "min left" not in bar.text and bar.value == 25  # the bar follows the passes (percent)
