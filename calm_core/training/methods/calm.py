"""calm: the bilevel method. Lower level: CE under the head; upper level: maximise
held-out option entropy; one first-order (BOME) step per batch (calm_core.training.bilevel),
a plain gradient step by default (OPTIMIZER) so that BOME's descent guarantee holds."""

from __future__ import annotations

from typing import Any, Sequence

from calm_core.training.bilevel import BilevelState, bilevel_step
from calm_core.training.context import StepContext

NAME = "calm"
LABEL = "CALM"
USES_HEAD = True
OPTIMIZER = "sgd"
DESCRIPTION = "CALM: bilevel LoRA + calibration head (l, tau), first-order BOME step."


def step_cost(settings: Any) -> float:
    """A step's cost in SFT steps, for the time estimate: T inner steps plus the outer
    passes (bench/train_step.py, frozen prefix cached: 4.1 SFT steps at T = 3, 12.2 at T = 10)."""
    inner_steps: int = settings.bilevel.inner_steps
    return inner_steps + 2


def bilevel_state(ctx: StepContext) -> BilevelState:
    """The step's memory between batches (a persistent theta~), kept in ctx.state."""
    state: BilevelState = ctx.state.setdefault("bilevel", BilevelState())
    return state


def step(ctx: StepContext, train_items: Sequence[Any], heldout_items: Sequence[Any]) -> dict[str, float]:
    ctx.optimizer.zero_grad(set_to_none=True)
    return bilevel_step(
        ctx.alpha,
        ctx.theta,
        ctx.lower(train_items),
        ctx.upper(heldout_items),
        ctx.optimizer,
        ctx.settings.bilevel,
        bilevel_state(ctx),
    )
