"""The helpers every training method shares: a plain gradient step within the trust region,
timing, and the entropy of option scores for the logs. What a step sees is
`calm_core.training.context.StepContext`."""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch

from calm_core.training import distributed
from calm_core.training.bilevel import plain_step_scale, plain_step_sizes
from calm_core.training.context import StepContext
from calm_core.training.objectives import option_entropy


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
    scale = plain_step_scale([p.grad for p in params], lrs, ctx.settings.bilevel.max_update_norm)
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
