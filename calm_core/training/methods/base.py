"""What every training method sees, and the one helper for a plain gradient step."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from calm_core.training import distributed
from calm_core.training.bilevel import plain_step_scale, plain_step_sizes
from calm_core.data.schema import MCItem
from calm_core.calibration.head import CalibrationHead
from calm_core.training.objectives import negative_entropy, option_cross_entropy, option_entropy, option_logits
from calm_core.scoring.prompts import ScoringConfig


@dataclass
class StepContext:
    """The model under training, its head and optimizer, and the method's settings."""

    model: Any
    tokenizer: Any
    scoring: ScoringConfig
    optimizer: torch.optim.Optimizer
    theta: list[torch.nn.Parameter]  # LoRA weights
    alpha: list[torch.nn.Parameter]  # calibration head parameters ([] without a head)
    head: CalibrationHead | None
    settings: Any  # TrainConfig: beta, label_smoothing, bilevel settings, ...
    state: dict[str, Any] = field(default_factory=dict)  # per-method memory (e.g. iterate's phase)
    runner: Any = None  # a FrozenPrefixModel over `model` when the frozen layers are cached

    @property
    def net(self) -> Any:
        """What forward passes go through: the frozen-prefix runner if any, else the model."""
        return self.runner if self.runner is not None else self.model

    def logits(self, items: Sequence[MCItem]) -> torch.Tensor:
        return option_logits(self.net, self.tokenizer, items, self.scoring, self.head)  # (B, K_max)

    @property
    def task(self) -> str:
        return getattr(self.settings, "task", "mcqa")

    def lower(self, items: Sequence[MCItem]) -> Callable[[], torch.Tensor]:
        """L_tr closure: cross-entropy at the gold option of a training batch (openqa:
        at every gold answer token, calm_core.generative.task)."""
        if self.task == "openqa":
            from calm_core.generative import task

            return task.lower(self, items)
        gold = torch.tensor([it.answer for it in items], device=next(self.model.parameters()).device)
        return lambda: option_cross_entropy(self.logits(items), gold)

    def upper(self, items: Sequence[MCItem]) -> Callable[[], torch.Tensor]:
        """F closure: minus mean option entropy on held-out inputs (labels unused; openqa:
        minus mean token entropy over held-out continuations)."""
        if self.task == "openqa":
            from calm_core.generative import task

            return task.upper(self, items)
        return lambda: negative_entropy(self.logits(items))


def gradient_step(ctx: StepContext, loss: torch.Tensor, params: Sequence[torch.nn.Parameter] | None = None) -> None:
    """Backward `loss` and step the optimizer; parameters not in `params` keep no grad."""
    ctx.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    keep = None if params is None else {id(p) for p in params}
    stepped = []
    for group in ctx.optimizer.param_groups:
        for p in group["params"]:
            if keep is not None and id(p) not in keep:
                p.grad = None
            elif p.grad is not None:
                stepped.append(p.grad)
    distributed.mean_(stepped)  # data-parallel ranks take the same step (no-op in one process)
    _within_trust_region(ctx)
    ctx.optimizer.step()


def _within_trust_region(ctx: StepContext) -> None:
    """A plain (SGD) step is cut to `max_update_norm`, direction kept, as in the BOME
    step (bilevel.plain_step_scale): `iterate` and `calm` then differ only in the coupling."""
    params = [p for group in ctx.optimizer.param_groups for p in group["params"] if p.grad is not None]
    lrs = plain_step_sizes(ctx.optimizer, params)
    scale = plain_step_scale([p.grad for p in params], lrs, getattr(ctx.settings, "max_update_norm", 0.0))
    if scale < 1.0:
        for p in params:
            p.grad.mul_(scale)


def timed(fn: Callable[[], dict[str, float]]) -> dict[str, float]:
    start = time.perf_counter()
    log = fn()
    log["step_time"] = time.perf_counter() - start
    return log


def entropy_of(z: torch.Tensor) -> float:
    return float(option_entropy(z.detach()).mean())
