"""The calibrated stop inside a run: the selection (training/selection.py) fed by the
loop's evaluations, the selected step's adapter and head kept, and put back before the
final evaluation.

    stop = CalibratedStop.start(cfg, ctx, writer, start_step)
    if stop.offer(ctx, data, step, record, caches, writer): ...   # True: patience ran out
    reuse = stop.restore(ctx, step)    # the selected step's parameters, and its scores

The selected step's adapter and head live in memory (`Snapshot`) and in the run's
`selected/` directory (for resume and export); status.json's `selection` holds the
rule, the selected step with its S_V figures and the selector's state, so a resumed run
continues the same selection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from calm_core.runs.rundir import RunDir
from calm_core.training.checkpoints import Snapshot, read_selected, restore_snapshot, save_selected, take_snapshot
from calm_core.training.context import StepContext
from calm_core.training.selection import SelectionState, Selector

Scores = dict[str, dict[tuple[bool, bool], Any]]  # set name -> the task's score cache of one evaluation


@dataclass
class CalibratedStop:
    """One run's selection, with the selected step's snapshot and evaluation scores."""

    selector: Selector
    snapshot: Snapshot | None = None  # the selected step's adapter and head (rule best)
    scores: dict[int, Scores] = field(default_factory=dict)  # step -> its evaluation's scores (selected, last)
    enabled: bool = True  # False when the task has no selection score (open answers, for now)

    @classmethod
    def start(cls, cfg: Any, ctx: StepContext, writer: RunDir | None, start_step: int) -> "CalibratedStop":
        """A fresh selection, or a resumed run's from status.json and `selected/`. A
        resumed selection whose snapshot is missing or damaged forgets its selected step
        (said on stdout) and selects again from the evaluations still to come."""
        enabled = bool(getattr(ctx.task, "SELECTS", False))
        state = None
        snapshot = None
        if writer is not None and start_step > 0:
            saved = writer.status.get("selection") or {}
            state = SelectionState.from_dict(saved.get("state"))
            if cfg.select == "best" and state.selected is not None:
                snapshot = read_selected(ctx, writer)
                if snapshot is None or snapshot.step != state.selected.step:
                    print(f"calm: the selected step {state.selected.step} is not in selected/ whole; "
                          "selecting again from the next evaluation", flush=True)
                    state.selected, snapshot = None, None
        return cls(Selector(cfg.select_rule, state), snapshot, enabled=enabled)

    @property
    def keeps_snapshots(self) -> bool:
        return self.enabled and self.selector.rule.rule == "best"

    def offer(self, ctx: StepContext, data: Any, step: int, record: dict[str, Any], caches: Scores,
              writer: RunDir | None) -> bool:
        """Judge the evaluation of `step` (its figures in `record`, its scores in `caches`);
        adds `select/*` and `lower/*` keys to the record, keeps a newly selected step's
        snapshot, writes status.json's `selection`. True when the run should stop now."""
        self.scores = {s: c for s, c in self.scores.items() if self._selected_step() == s}
        self.scores[step] = caches
        if not self.enabled:
            return False
        candidate = ctx.task.selection_candidate(ctx, data, step, record, caches)
        if candidate is None:
            return False
        verdict = self.selector.offer(candidate)
        if candidate.lower is not None:
            record["lower/st_nll"] = candidate.lower
        record["select/eligible"] = float(verdict.eligible)
        record["select/selected_step"] = self._selected_step()
        if verdict.selected and self.keeps_snapshots:
            self.snapshot = take_snapshot(ctx, step)
            if writer is not None:
                save_selected(ctx, writer, step)
        if writer is not None:
            writer.update_status(selection={**self.selector.summary(), "reason": verdict.reason,
                                            "state": self.selector.state.to_dict()})
        return verdict.stop and self.keeps_snapshots

    def _selected_step(self) -> int | None:
        selected = self.selector.state.selected
        return selected.step if selected is not None else None

    def restore(self, ctx: StepContext, step: int) -> Scores | None:
        """Before the final evaluation at `step`: the selected step's adapter and head put
        into the model (rule best), and the scores its evaluation left (None when that
        evaluation is not in memory, e.g. after a resume: they are computed again)."""
        if self.keeps_snapshots and self.snapshot is not None and self.snapshot.step != step:
            restore_snapshot(ctx, self.snapshot)
            return self.scores.get(self.snapshot.step)
        return self.scores.get(step)

    def summary(self) -> dict[str, Any] | None:
        """results.json's `selection` (None when the task selects nothing)."""
        return self.selector.summary() if self.enabled and self.selector.state.reference is not None else None
