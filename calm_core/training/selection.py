"""The calibrated stop: which evaluated step of a run becomes the model the user gets.

    schedule = EvalSchedule(steps=40, every=20, dense_until=20, dense_every=2)
    schedule.evaluates(4)                     # True: 1, 2, 4, ..., 20, then 40
    selector = Selector(SelectRule(patience=4, lower_tolerance=0.1))
    verdict = selector.offer(Candidate(step=4, score=0.81, ece=0.07, acc=0.68, n=34, lower=0.31))
    verdict.selected, verdict.stop, selector.state.selected.step

Why: CALM's upper level maximises held-out entropy, and with the paper's constraint the
temperature has no finite optimum (docs/bilevel.md): a run walks from overconfident to
uniform and passes the point where confidence matches accuracy early. So the run is
evaluated on S_V densely early (`EvalSchedule`) and the step with the best S_V
calibration is kept, by a proper score:

- the score is per item and proper (lower is better; it rewards confidence that matches
  accuracy and punishes both over- and under-confidence), with S_V's ECE as the
  tie-break. Each task names its own (`SELECTION_SCORE`, `SELECTION_TIE_BREAK`): the
  NLL of the gold option for multiple choice; for open answers the Brier score of the
  semantic confidence against S_V's gold answers, Semantic ECE breaking ties
  (training/tasks/openqa.py);
- a tie is a difference within one standard error of the paired per-item score
  difference: S_V has tens of items, and a step that is better by noise should not win
  on the score alone (the one-standard-error rule of model selection);
- a step is *eligible* only while the lower level is still solved and accuracy kept:
  the S_T cross-entropy of theta (adapter on, no head) within `lower_tolerance` (a
  fraction) of its step-0 value, and S_V accuracy at most one point (one item on a set
  under 100 items) below step 0's;
- step 0, the untouched model with the identity head, is a candidate too: when no step
  beats it, the run says so and hands back the base model;
- after `patience` evaluations without a newly selected step the run stops early.

The rule is `best`; `last` keeps the last step (the behaviour before the calibrated
stop). Everything here is pure; the loop (training/loop.py) feeds it and keeps the
selected step's adapter and head (training/checkpoints.py `save_selected`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from calm_core.calibration.recommend import accuracy_slack
from calm_core.runs.selection_record import lower_limit

SELECT_RULES = ("best", "last")


@dataclass(frozen=True)
class EvalSchedule:
    """When the loop evaluates, and what. `full` (every set): step 0 (the loop's, on a
    fresh run), every `every` steps and the last step. `heldout` (S_V and the lower-level
    probe only, what the selection reads): step 1 and every `dense_every` steps up to
    `dense_until`, where the calibrated point comes; the evaluation sets are left out there,
    so the dense start costs a fraction of full evaluations."""

    steps: int
    every: int  # 0: only the dense part and the end
    dense_until: int = 20
    dense_every: int = 2

    def kind(self, step: int) -> str | None:
        """ "full", "heldout" or None (no evaluation at `step`)."""
        if step == self.steps or step == 0 or (self.every and step % self.every == 0):
            return "full"
        if step == 1 or (self.dense_every and step <= self.dense_until and step % self.dense_every == 0):
            return "heldout"
        return None

    def evaluates(self, step: int) -> bool:
        return self.kind(step) is not None

    def steps_evaluated(self) -> list[int]:
        return [s for s in range(1, self.steps + 1) if self.evaluates(s)]


@dataclass(frozen=True)
class SelectRule:
    """The selection settings of a run (TrainConfig: select, select_patience, lower_tolerance)."""

    rule: str = "best"
    patience: int = 4  # evaluations without a newly selected step before stopping (0: never)
    lower_tolerance: float = 0.1  # the S_T CE of theta may rise by this fraction of its step-0 value
    score: str = "NLL"  # what Candidate.score is, in words (the task's SELECTION_SCORE)
    tie_break: str = "ECE"  # what Candidate.ece is (the task's SELECTION_TIE_BREAK)

    def __post_init__(self) -> None:
        if self.rule not in SELECT_RULES:
            raise ValueError(f"Expected `select` to be one of {list(SELECT_RULES)}, but got {self.rule!r}")
        if isinstance(self.patience, bool) or not isinstance(self.patience, int) or self.patience < 0:
            raise ValueError(f"Expected `select_patience` to be an int >= 0, but got {self.patience!r}")
        if not (isinstance(self.lower_tolerance, (int, float)) and 0 <= self.lower_tolerance < math.inf):
            raise ValueError(f"Expected `lower_tolerance` to be a finite float >= 0, but got {self.lower_tolerance!r}")

    def describe(self) -> str:
        """The rule in words, recorded with the selection (status.json, results.json)."""
        if self.rule == "last":
            return "last: the last step, whatever its S_V calibration"
        return (
            f"best: lowest S_V {self.score} (ties within one standard error of the paired per-item difference "
            f"go to the lower S_V {self.tie_break}) among steps whose S_T cross-entropy of theta stays within "
            f"{self.lower_tolerance:.0%} of step 0's and whose S_V accuracy stays within one point (one item "
            f"under 100 items) of step 0's; stop after {self.patience} evaluations without a better step"
            if self.patience
            else f"best: lowest S_V {self.score}, ties by S_V {self.tie_break}, among steps that keep the lower level "
            "and accuracy"
        )


@dataclass
class Candidate:
    """One evaluation of the model on S_V (and the lower-level probe on S_T)."""

    step: int
    score: float  # S_V score under head and adapter, lower is better: NLL (MCQA), Brier (open answers)
    ece: float  # S_V ECE: the tie-break (Semantic ECE for open answers)
    acc: float  # S_V accuracy
    n: int  # S_V items
    lower: float | None = None  # S_T cross-entropy of theta (adapter on, no head); None: not measured
    losses: list[float] | None = field(default=None, repr=False)  # per-item S_V score, for the paired standard error

    def figures(self) -> dict[str, Any]:
        """What status.json and results.json record of it (no per-item losses)."""
        return {k: v for k, v in asdict(self).items() if k != "losses"}


@dataclass
class Decision:
    """What `Selector.offer` decided about one candidate."""

    selected: bool
    stop: bool
    eligible: bool
    reason: str


@dataclass
class SelectionState:
    """Everything the selection remembers between evaluations (saved in status.json for resume)."""

    reference: Candidate | None = None  # step 0's
    selected: Candidate | None = None
    since_selected: int = 0  # evaluations since the last newly selected step
    stopped_early: int | None = None  # the step the run stopped at, when the patience ran out

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": _cand_dict(self.reference),
            "selected": _cand_dict(self.selected),
            "since_selected": self.since_selected,
            "stopped_early": self.stopped_early,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "SelectionState":
        data = data or {}
        return cls(
            _cand(data.get("reference")),
            _cand(data.get("selected")),
            int(data.get("since_selected", 0)),
            data.get("stopped_early"),
        )


def _cand_dict(c: Candidate | None) -> dict[str, Any] | None:
    return None if c is None else asdict(c)


def _cand(data: dict[str, Any] | None) -> Candidate | None:
    return None if not data else Candidate(**data)


def paired_standard_error(a: Sequence[float] | None, b: Sequence[float] | None) -> float:
    """Standard error of mean(a - b) over paired items; 0 when either is missing or n < 2."""
    if a is None or b is None or len(a) != len(b) or len(a) < 2:
        return 0.0
    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    return float(diff.std(ddof=1) / math.sqrt(len(diff)))


class Selector:
    """Feeds on evaluations in step order and keeps the selected one (see the module docstring)."""

    def __init__(self, rule: SelectRule, state: SelectionState | None = None) -> None:
        self.rule = rule
        self.state = state or SelectionState()

    def why_ineligible(self, c: Candidate) -> str | None:
        """None when `c` keeps the lower level and accuracy against step 0, else the reason."""
        ref = self.state.reference
        if ref is None or c.step == ref.step:
            return None
        if (
            c.lower is not None
            and ref.lower is not None
            and c.lower > lower_limit(ref.lower, self.rule.lower_tolerance)
        ):
            return (
                f"lower level lost: S_T cross-entropy of theta {c.lower:.3f} > step 0's {ref.lower:.3f} "
                f"+ {self.rule.lower_tolerance:.0%}"
            )
        if c.acc < ref.acc - accuracy_slack(c.n) - 1e-12:
            return f"accuracy lost: S_V accuracy {c.acc:.3f} < step 0's {ref.acc:.3f} - {accuracy_slack(c.n):.3f}"
        return None

    def _better(self, c: Candidate, best: Candidate) -> tuple[bool, str]:
        margin = paired_standard_error(c.losses, best.losses)
        score, tie = f"S_V {self.rule.score}", f"S_V {self.rule.tie_break}"
        if c.score < best.score - margin:
            return True, f"{score} {c.score:.4f} < {best.score:.4f} (step {best.step}) by more than its SE {margin:.4f}"
        if abs(c.score - best.score) <= margin and c.ece < best.ece:
            return True, (
                f"{score} within one SE ({margin:.4f}) of step {best.step}'s and {tie} {c.ece:.4f} < {best.ece:.4f}"
            )
        return False, f"not better than step {best.step} ({score} {c.score:.4f} vs {best.score:.4f}, SE {margin:.4f})"

    def offer(self, c: Candidate) -> Decision:
        """Take one evaluation; returns whether it is now the selected step and whether to stop."""
        state = self.state
        if state.reference is None:
            state.reference = c
        why_not = self.why_ineligible(c)
        if self.rule.rule == "last":
            state.selected, state.since_selected = c, 0
            return Decision(True, False, why_not is None, "last: every step replaces the one before")
        if why_not is not None:
            selected, reason = False, why_not
        elif state.selected is None:
            selected, reason = True, "the first evaluation"
        else:
            selected, reason = self._better(c, state.selected)
        if selected:
            state.selected, state.since_selected = c, 0
        else:
            state.since_selected += 1
        stop = bool(self.rule.patience) and state.since_selected >= self.rule.patience
        if stop:
            state.stopped_early = c.step
        return Decision(selected, stop, why_not is None, reason)

    def summary(self) -> dict[str, Any]:
        """status.json's and results.json's `selection`: the rule, the selected step and its
        S_V figures, step 0's, and where the run stopped early."""
        s = self.state
        return {
            "rule": self.rule.rule,
            "rule_text": self.rule.describe(),
            "selected_step": s.selected.step if s.selected else None,
            "selected": s.selected.figures() if s.selected else None,
            "reference": s.reference.figures() if s.reference else None,
            "stopped_early": s.stopped_early,
            "patience": self.rule.patience,
            "lower_tolerance": self.rule.lower_tolerance,
        }
