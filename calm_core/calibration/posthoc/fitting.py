"""Fitting a post-hoc calibrator by NLL: LBFGS to convergence on float64 parameters, with
optional item weights, on one torch thread (small problems lose time to thread start-up).

    params, before, after, n = fit_nll(logits, labels, init=[torch.zeros(1)], scale=lambda z, p: z / p[0].exp())
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np
import torch

from calm_core.calibration.posthoc.inputs import check_fit_inputs, item_weights


def fit_nll(
    logits: np.ndarray,
    labels: np.ndarray,
    init: list[torch.Tensor],
    scale: Callable[[torch.Tensor, list[torch.Tensor]], torch.Tensor],
    sample_weight: Any = None,
) -> tuple[list[torch.Tensor], float, float, int]:
    """Minimise the mean NLL of softmax(scale(z, params)) at the gold option over `params`
    (float64 tensors, started at `init`) by LBFGS to convergence; with `sample_weight`
    (N,), the weighted mean sum_i w_i NLL_i / sum_i w_i (an integer weight is that many
    copies of the item). `scale` sees z with its -inf padding zeroed (a -inf in a product
    makes a nan gradient); the padding is put back after it. Returns (params, NLL before,
    NLL after, N)."""
    z, y = check_fit_inputs(logits, labels)
    w = torch.from_numpy(item_weights(sample_weight, len(y)))
    finite = torch.isfinite(z)
    z_safe = torch.where(finite, z, torch.zeros_like(z))
    params = [p.detach().clone().to(torch.float64).requires_grad_(True) for p in init]

    def loss() -> torch.Tensor:
        scaled = scale(z_safe, params)
        return masked_nll(torch.where(finite, scaled, torch.full_like(scaled, -math.inf)), y, w)

    before = float(masked_nll(z, y, w))
    after = lbfgs(params, loss)
    return [p.detach() for p in params], before, after, len(y)


def masked_nll(scaled: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean NLL of softmax(scaled) at the gold option (weighted by `weights` (N,) when
    given: sum w_i NLL_i / sum w_i); -inf padding stays excluded."""
    if weights is None:
        return torch.nn.functional.cross_entropy(scaled, labels)
    losses = torch.nn.functional.cross_entropy(scaled, labels, reduction="none")  # (N,)
    return (weights * losses).sum() / weights.sum()


@contextmanager
def one_thread() -> Iterator[None]:
    """Torch on one thread for a small fit: on tensors of a few thousand numbers, threads
    only contend (a cross-fitted ATS fit ran many times slower with two on a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def lbfgs(
    params: list[torch.Tensor], loss_fn: Callable[[], torch.Tensor], max_rounds: int = 50, tol: float = 1e-10
) -> float:
    """Run LBFGS until the loss stops moving (not a fixed iteration count)."""
    optimizer = torch.optim.LBFGS(
        params, lr=1.0, max_iter=100, tolerance_grad=1e-10, tolerance_change=tol, line_search_fn="strong_wolfe"
    )

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    previous = math.inf
    for _ in range(max_rounds):
        loss = float(optimizer.step(closure).detach())
        if abs(previous - loss) < tol:
            break
        previous = loss
    with torch.no_grad():
        return float(loss_fn())
