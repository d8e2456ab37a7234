"""cft: calibration-aware fine-tuning, SFT plus a binned calibration penalty on the
max-probability (after Xiao et al. 2025): items are binned by their (detached)
confidence, and each bin's |mean confidence - accuracy| is penalised, weighted by the
bin's share of the batch. The confidences carry gradient; the bin assignment does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from calm_core.settings import setting
from calm_core.training.context import StepContext
from calm_core.training.methods.base import gradient_step, timed
from calm_core.training.objectives import option_cross_entropy

NAME = "cft"
LABEL = "calibration-aware fine-tuning"
USES_HEAD = False
DESCRIPTION = "SFT + a binned ECE-style penalty on the max probability (calibration-aware fine-tuning)."


@dataclass
class Settings:
    cft_gamma: float = setting(1.0, "weight of the binned calibration penalty", min=0.0, max=100.0)


N_BINS = 10


def binned_calibration_penalty(z: torch.Tensor, gold: torch.Tensor, n_bins: int = N_BINS) -> torch.Tensor:
    probs = torch.softmax(z, dim=-1)  # (B, K)
    confidence, prediction = probs.max(dim=-1)  # (B,)
    correct = (prediction == gold).float()
    bins = torch.clamp((confidence.detach() * n_bins).ceil().long() - 1, 0, n_bins - 1)  # (B,)
    penalty = z.new_zeros(())
    for b in bins.unique():
        members = bins == b
        penalty = penalty + members.float().mean() * (confidence[members].mean() - correct[members].mean()).abs()
    return penalty


def step(ctx: StepContext, train_items: Sequence[Any], heldout_items: Sequence[Any]) -> dict[str, float]:
    def run() -> dict[str, float]:
        z = ctx.logits(train_items)
        gold = torch.tensor([it.answer for it in train_items], device=z.device)
        ce = option_cross_entropy(z, gold)
        penalty = binned_calibration_penalty(z, gold)
        gradient_step(ctx, ce + ctx.settings.method_settings.cft_gamma * penalty)
        return {"lower_loss": float(ce.detach()), "calibration_penalty": float(penalty.detach())}

    return timed(run)
