"""The calibrated stop inside a run: the selection (training/selection.py) fed by the
loop's evaluations, the selected step's adapter and head kept, and put back before the
final evaluation.

    stop = CalibratedStop.start(cfg, ctx, writer, start_step)
    if stop.offer(ctx, data, step, row, caches, writer): ...   # True: patience ran out
    reuse = stop.restore(ctx, step)    # the selected step's parameters, and its scores

The selected step's adapter and head live in memory (`Snapshot`), in the run's
`selected/` directory (for export) and in every checkpoint with the selector's state
(`record`), so a resumed run continues the same selection; status.json's `selection`
shows the rule and the selected step with its S_V figures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from calm_core.runs.rundir import RunDir
from calm_core.training.checkpoints import SelectionRecord, Snapshot, restore_snapshot, save_selected, take_snapshot
from calm_core.training.context import StepContext
from calm_core.training.selection import SelectionState, Selector

Scores = dict[str, dict[tuple[bool, bool], Any]]  # set name -> the task's score cache of one evaluation


@dataclass
class CalibratedStop:
    """One run's selection, with the selected step's snapshot and evaluation scores."""

    selector: Selector
    snapshot: Snapshot | None = None  # the selected step's adapter and head (rule best)
    scores: dict[int, Scores] = field(default_factory=dict)  # step -> its evaluation's scores (selected, last)
    enabled: bool = True  # False when the task has no selection score (SELECTS)

    @classmethod
    def start(cls, cfg: Any, ctx: StepContext, writer: RunDir | None, start_step: int) -> "CalibratedStop":
        """A fresh selection, or a resumed run's as its checkpoint kept it (the evaluations
        after the checkpoint are replayed by the resumed steps). `selected/` is rewritten
        from the checkpoint's snapshot when a later selection, lost with the steps after
        the checkpoint, had replaced it."""
        enabled = ctx.task.SELECTS
        rule = dataclasses.replace(
            cfg.select_rule,
            score=getattr(ctx.task, "SELECTION_SCORE", "NLL"),
            tie_break=getattr(ctx.task, "SELECTION_TIE_BREAK", "ECE"),
        )
        saved: SelectionRecord | None = ctx.state.pop("selection", None) if start_step > 0 else None
        if saved is None:
            return cls(Selector(rule), enabled=enabled)
        stop = cls(Selector(rule, SelectionState.from_dict(saved.state)), saved.snapshot, enabled=enabled)
        stop.write_selected(ctx, writer)  # a later selection, lost with the steps after the checkpoint, may be there
        return stop

    def write_selected(self, ctx: StepContext, writer: RunDir | None) -> None:
        """`selected/` from the snapshot, when it holds another step than the one on disk.
        Called by rank 0 outside FSDP's gather (PEFT's save reads a state_dict()): at each
        checkpoint and at the end of the run."""
        if (
            writer is not None
            and self.keeps_snapshots
            and self.snapshot is not None
            and writer.selected_step() != self.snapshot.step
        ):
            save_selected(ctx, writer, self.snapshot)

    def record(self) -> SelectionRecord | None:
        """What a checkpoint keeps of the selection (None when there is none)."""
        return SelectionRecord(self.selector.state.to_dict(), self.snapshot) if self.enabled else None

    @property
    def keeps_snapshots(self) -> bool:
        return self.enabled and self.selector.rule.rule == "best"

    def offer(
        self, ctx: StepContext, data: Any, step: int, row: dict[str, Any], caches: Scores, writer: RunDir | None
    ) -> bool:
        """Judge the evaluation of `step` (its figures in `row`, its scores in `caches`);
        adds `select/*` and `lower/*` keys to the row, keeps a newly selected step's
        snapshot, writes status.json's `selection`. True when the run should stop now."""
        self.scores = {s: c for s, c in self.scores.items() if self._selected_step() == s}
        self.scores[step] = caches
        if not self.enabled:
            return False
        candidate = ctx.task.selection_candidate(ctx, data, step, row, caches)
        if candidate is None:
            return False
        decision = self.selector.offer(candidate)
        if decision.stop and step >= getattr(ctx.settings, "steps", step + 1):
            self.selector.state.stopped_early = None  # patience ran out at the last step: the run ended, not early
        if candidate.lower is not None:
            row["lower/st_nll"] = candidate.lower
        row["select/eligible"] = float(decision.eligible)
        row["select/selected_step"] = self._selected_step()
        if decision.selected and self.keeps_snapshots:
            self.snapshot = take_snapshot(ctx, step)  # selected/ is written by `write_selected`
        if writer is not None:
            writer.update_status(
                selection={**self.selector.summary(), "reason": decision.reason, "state": self.selector.state.to_dict()}
            )
        return decision.stop and self.keeps_snapshots

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
