"""label_smoothing: LoRA cross-entropy against gold smoothed over each item's options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from calm_core.settings import setting
from calm_core.training.context import StepContext
from calm_core.training.methods.base import gradient_step, timed

NAME = "label_smoothing"
LABEL = "label smoothing"
USES_HEAD = False
DESCRIPTION = "LoRA cross-entropy with label smoothing over the item's own options."


@dataclass
class Settings:
    label_smoothing: float = setting(0.1, "share of the target spread evenly over the item's options", min=0.0, max=1.0)


def smoothed_cross_entropy(z: torch.Tensor, gold: torch.Tensor, eps: float) -> torch.Tensor:
    """(1 - eps) * CE(gold) + eps * mean over the item's real options of -log p_k."""
    logp = torch.log_softmax(z, dim=-1)  # (B, K)
    real = ~torch.isneginf(z)
    logp_real = torch.where(real, logp, torch.zeros_like(logp))
    uniform = -logp_real.sum(dim=-1) / real.sum(dim=-1)  # (B,)
    nll = -logp.gather(1, gold[:, None])[:, 0]  # (B,)
    return ((1 - eps) * nll + eps * uniform).mean()


def step(ctx: StepContext, train_items: Sequence[Any], heldout_items: Sequence[Any]) -> dict[str, float]:
    def run() -> dict[str, float]:
        z = ctx.logits(train_items)
        gold = torch.tensor([it.answer for it in train_items], device=z.device)
        loss = smoothed_cross_entropy(z, gold, ctx.settings.method_settings.label_smoothing)
        gradient_step(ctx, loss)
        return {"lower_loss": float(loss.detach())}

    return timed(run)
