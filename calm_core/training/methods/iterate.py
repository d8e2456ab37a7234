"""iterate: alternate a task step (CE on theta) and an entropy step (held-out entropy on
alpha), without the bilevel coupling term: the ablation that shows why coupling matters."""

from __future__ import annotations

from typing import Any, Sequence

from calm_core.training.context import StepContext
from calm_core.training.methods.base import gradient_step, timed

NAME = "iterate"
LABEL = "alternating updates (ablation)"
USES_HEAD = True
OPTIMIZER = "sgd"  # CALM's plain step, so that the comparison isolates the coupling
DESCRIPTION = "Ablation: alternating CE updates of theta and entropy updates of alpha, no coupling."


def step_cost(settings: Any) -> float:
    """Two gradient steps per batch (theta on S_T, alpha on S_V), for the time estimate."""
    return 2.0


def step(ctx: StepContext, train_items: Sequence[Any], heldout_items: Sequence[Any]) -> dict[str, float]:
    def run() -> dict[str, float]:
        lower = ctx.lower(train_items)()
        gradient_step(ctx, lower, ctx.theta)
        upper = ctx.upper(heldout_items)()
        gradient_step(ctx, upper, ctx.alpha)
        return {"lower_loss": float(lower.detach()), "upper_loss": float(upper.detach())}

    return timed(run)
