"""The calibrated stop's rule (calm_core/training/selection.py): the schedule, the proper
score with its noise margin, the lower-level and accuracy guards, patience, `last`, and
the state a resumed run continues from."""

from __future__ import annotations

import math

import pytest

from calm_core.training.selection import (
    Candidate, EvalSchedule, SelectionState, Selector, SelectRule, paired_standard_error,
)
from calm_core.calibration.recommend import accuracy_slack


def cand(step: int, score: float, ece: float = 0.1, acc: float = 0.7, lower: float | None = 0.5,
         losses: list[float] | None = None, n: int = 100) -> Candidate:
    return Candidate(step=step, score=score, ece=ece, acc=acc, n=n, lower=lower, losses=losses)


def test_schedule_is_dense_early_then_sparse_and_ends_on_the_last_step() -> None:
    assert EvalSchedule(steps=45, every=10, dense_until=8, dense_every=2).steps_evaluated() == [1, 2, 4, 6, 8, 10, 20,
                                                                                              30, 40, 45]
    assert EvalSchedule(steps=5, every=0, dense_until=0).steps_evaluated() == [1, 5]


def test_the_lowest_nll_is_selected_and_patience_stops_the_run() -> None:
    selector = Selector(SelectRule(patience=2))
    verdicts = [selector.offer(cand(s, nll)) for s, nll in [(0, 1.6), (1, 1.2), (2, 0.9), (4, 1.0), (6, 1.1)]]
    assert [v.selected for v in verdicts] == [True, True, True, False, False]
    assert [v.stop for v in verdicts] == [False, False, False, False, True]
    assert selector.state.selected.step == 2 and selector.state.stopped_early == 6
    assert selector.summary()["selected_step"] == 2 and selector.summary()["reference"]["step"] == 0


def test_a_difference_within_one_standard_error_is_a_tie_broken_by_ece() -> None:
    """S_V has tens of items: a step whose NLL is lower only by noise does not win on NLL;
    within that margin the lower ECE wins."""
    noisy = [0.2, 1.8, 0.3, 1.7]  # per-item NLL, mean 1.0
    selector = Selector(SelectRule(patience=0))
    selector.offer(cand(0, 1.0, ece=0.05, losses=noisy))
    shifted = [x - 0.05 for x in reversed(noisy)]  # mean 0.95: better by 0.05, paired SE ~0.8
    assert paired_standard_error(shifted, noisy) > 0.05
    worse_ece = selector.offer(cand(2, 0.95, ece=0.09, losses=shifted))
    assert not worse_ece.selected and "not better" in worse_ece.reason
    better_ece = selector.offer(cand(4, 0.97, ece=0.02, losses=shifted))
    assert better_ece.selected and "ECE" in better_ece.reason
    clear = selector.offer(cand(6, 0.1, ece=0.3, losses=[0.1] * 4))  # far below the margin: NLL decides
    assert clear.selected and selector.state.selected.step == 6


def test_a_step_that_loses_the_lower_level_or_accuracy_is_never_selected() -> None:
    selector = Selector(SelectRule(patience=0, lower_tolerance=0.1))
    selector.offer(cand(0, 1.5, acc=0.70, lower=0.50))
    lost = selector.offer(cand(2, 0.5, acc=0.70, lower=0.56))  # 12% above step 0's S_T cross-entropy
    assert not lost.selected and not lost.eligible and "lower level lost" in lost.reason
    kept = selector.offer(cand(4, 0.9, acc=0.70, lower=0.54))  # 8%: still solved
    assert kept.selected
    worse = selector.offer(cand(6, 0.4, acc=0.68, lower=0.50, n=100))  # two points of accuracy lost
    assert not worse.selected and "accuracy lost" in worse.reason
    one_item = Selector(SelectRule())
    one_item.offer(cand(0, 1.5, acc=0.70, n=30))
    assert one_item.offer(cand(2, 1.0, acc=0.70 - 1 / 30, n=30)).selected  # one item of 30 is within the slack
    assert accuracy_slack(30) == pytest.approx(1 / 30) and accuracy_slack(500) == 0.01


def test_when_no_step_beats_the_untouched_model_step_0_is_selected() -> None:
    selector = Selector(SelectRule(patience=3))
    selector.offer(cand(0, 0.8))
    stops = [selector.offer(cand(s, 0.8 + s / 10)).stop for s in (1, 2, 4)]
    assert stops == [False, False, True] and selector.state.selected.step == 0


def test_select_last_keeps_the_last_step_and_never_stops() -> None:
    selector = Selector(SelectRule(rule="last", patience=1))
    for step, nll in [(0, 0.5), (2, 0.9), (4, 1.5)]:
        verdict = selector.offer(cand(step, nll))
        assert verdict.selected and not verdict.stop
    assert selector.state.selected.step == 4


def test_the_state_round_trips_for_resume() -> None:
    selector = Selector(SelectRule(patience=3))
    for step, nll in [(0, 1.0), (2, 0.7), (4, 0.8)]:
        selector.offer(cand(step, nll, losses=[nll] * 3))
    resumed = Selector(SelectRule(patience=3), SelectionState.from_dict(selector.state.to_dict()))
    straight_next, resumed_next = selector.offer(cand(6, 0.9)), resumed.offer(cand(6, 0.9))
    assert resumed.state == selector.state and resumed_next == straight_next


def test_settings_are_validated_by_name() -> None:
    with pytest.raises(ValueError, match="`select`"):
        SelectRule(rule="first")
    with pytest.raises(ValueError, match="`select_patience`"):
        SelectRule(patience=-1)
    with pytest.raises(ValueError, match="`lower_tolerance`"):
        SelectRule(lower_tolerance=math.inf)


def test_paired_standard_error_by_hand() -> None:
    # differences [1, 3]: sd (ddof 1) = sqrt(2), SE = sqrt(2) / sqrt(2) = 1
    assert paired_standard_error([2.0, 4.0], [1.0, 1.0]) == pytest.approx(1.0)
    assert paired_standard_error(None, [1.0]) == 0.0


def test_patience_running_out_at_the_last_step_is_not_an_early_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 6-step run whose patience runs out at step 6 ended; "stopped early at step 6"
    was said of it (issue 30)."""
    from types import SimpleNamespace

    from calm_core.training import stopping
    from calm_core.training.stopping import CalibratedStop

    monkeypatch.setattr(stopping, "take_snapshot", lambda ctx, step: step)  # no model here

    def stopped_at(total_steps: int) -> int | None:
        figures = iter([(0, 1.6), (2, 0.9), (4, 1.0), (6, 1.1)])
        task = SimpleNamespace(selection_candidate=lambda ctx, data, step, row, caches: cand(*next(figures)))
        ctx = SimpleNamespace(task=task, settings=SimpleNamespace(steps=total_steps))
        stop = CalibratedStop(Selector(SelectRule(patience=2)), enabled=True)
        for step in (0, 2, 4, 6):
            stop.offer(ctx, None, step, {}, {}, None)
        return stop.selector.state.stopped_early

    assert stopped_at(total_steps=40) == 6
    assert stopped_at(total_steps=6) is None
