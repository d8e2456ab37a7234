"""status.json's and results.json's `selection` as a typed record: the calibrated stop's
rule, the step it selected and why, step 0's figures, and where it stopped the run.

    selection = run.status.selection       # SelectionSummary | None (runs/records.py)
    selection.selected_step, selection.selected.score, selection.stopped_early
    selection.lower_threshold              # the highest S_T cross-entropy a step may have

training/selection.py's `Selector.summary()` writes it (with `reason`, the last
evaluation's, and `state`, what a resumed run restores: the selector's own business),
training/stopping.py stores it; the Monitor, the verdict's selection line, the export's
step record and the remaining time read these attributes. It sits below training/ so that
every layer above can read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calm_core.runs.record_fields import decode, encode

_ADVICE = "it was written by hand or by another program"


@dataclass(frozen=True)
class CandidateFigures:
    """One evaluation of the model on S_V as the stop recorded it (selection.Candidate)."""

    step: int | None = None
    score: float | None = None  # S_V score under head and adapter, lower is better (NLL, or Brier for open answers)
    ece: float | None = None
    acc: float | None = None
    n: int | None = None
    lower: float | None = None  # S_T cross-entropy of theta; None: not measured
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys a newer writer added: kept on rewrite


@dataclass(frozen=True)
class SelectionSummary:
    """The calibrated stop's record (see the module docstring)."""

    rule: str | None = None  # "best" or "last"
    rule_text: str | None = None
    selected_step: int | None = None
    selected: CandidateFigures | None = None
    reference: CandidateFigures | None = None  # step 0's
    stopped_early: int | None = None  # the step the run stopped at when the patience ran out
    patience: int | None = None
    lower_tolerance: float | None = None
    reason: str | None = None  # why the last evaluation was (not) selected
    state: Mapping[str, Any] = field(default_factory=dict)  # what a resume restores (SelectionState)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(
        cls, data: Any, path: str | Path = "status.json", advice: str = _ADVICE, where: str = "selection"
    ) -> SelectionSummary:
        """The record of a `selection` object; RunFileError names the file and the wrong key."""
        return decode(cls, data, path, advice, where=where)

    def to_json(self) -> dict[str, Any]:
        return encode(self)

    @property
    def lower_threshold(self) -> float | None:
        """The highest S_T cross-entropy of theta a step may have and still be selected:
        step 0's times (1 + lower_tolerance); None when either is not recorded."""
        lower = self.reference.lower if self.reference else None
        if lower is None or self.lower_tolerance is None:
            return None
        return lower_limit(lower, self.lower_tolerance)


def lower_limit(reference: float, tolerance: float) -> float:
    """The highest S_T cross-entropy of theta a step may have and still be selected."""
    return reference * (1 + tolerance)


def recorded_selection(extra: Mapping[str, Any] | None) -> SelectionSummary | None:
    """The calibrated stop's record a final evaluation is handed (`extra["selection"]`, what
    training/stopping.py summarised), typed for results.json; None without one."""
    data = (extra or {}).get("selection")
    return SelectionSummary.from_json(data, "the calibrated stop's summary") if data else None
