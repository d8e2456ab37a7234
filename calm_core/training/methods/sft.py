"""sft: plain LoRA cross-entropy on the gold option (no calibration head)."""

from __future__ import annotations

from typing import Any, Sequence

from calm_core.training.context import StepContext
from calm_core.training.methods.base import gradient_step, timed

NAME = "sft"
LABEL = "supervised fine-tuning"
USES_HEAD = False
DESCRIPTION = "Supervised fine-tuning: LoRA with cross-entropy, no calibration objective."


def step(ctx: StepContext, train_items: Sequence[Any], heldout_items: Sequence[Any]) -> dict[str, float]:
    def run() -> dict[str, float]:
        loss = ctx.lower(train_items)()
        gradient_step(ctx, loss)
        return {"lower_loss": float(loss.detach())}

    return timed(run)
