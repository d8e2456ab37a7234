"""regularization: single-level ablation, CE - beta * entropy on the training batch,
theta and alpha updated jointly with a fixed beta (no bilevel coupling)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from calm_core.settings import setting
from calm_core.training.context import StepContext
from calm_core.training.methods.base import entropy_of, gradient_step, timed
from calm_core.training.objectives import option_cross_entropy, option_entropy

NAME = "regularization"
LABEL = "entropy regularization (ablation)"
USES_HEAD = True
DESCRIPTION = "Single-level ablation: cross-entropy minus beta x entropy, fixed beta."


@dataclass
class Settings:
    beta: float = setting(0.5, "weight of the entropy bonus: CE - beta * entropy", min=0.0, max=100.0)


def step(ctx: StepContext, train_items: Sequence[Any], heldout_items: Sequence[Any]) -> dict[str, float]:
    def run() -> dict[str, float]:
        z = ctx.logits(train_items)
        gold = torch.tensor([it.answer for it in train_items], device=z.device)
        ce = option_cross_entropy(z, gold)
        loss = ce - ctx.settings.method_settings.beta * option_entropy(z).mean()
        gradient_step(ctx, loss)
        return {"lower_loss": float(ce.detach()), "loss": float(loss.detach()), "train_entropy": entropy_of(z)}

    return timed(run)
