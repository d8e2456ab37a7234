"""The BOME step without gradient reuse: every loss and gradient computed afresh. The
reference `tests/test_bilevel.py` checks `bilevel_step`'s reuse against; it is not part of
the product, so it lives here and reads the step's internals."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from calm_core.training.bilevel import (
    BilevelConfig,
    BilevelState,
    Closure,
    _constraint,
    _descend,
    _Gradients,
    _grad,
    _inner_problem,
    _settle,
    _start,
    _step,
    _value,
)


def _gradients_naive(
    alpha: Sequence[Tensor],
    theta: Sequence[Tensor],
    lower_loss: Closure,
    upper_loss: Closure,
    cfg: BilevelConfig,
    state: BilevelState | None,
) -> _Gradients:
    """Steps 1-2 with every loss and gradient computed afresh (the reference)."""
    n = len(alpha)
    lower = _value(lower_loss())
    g_alpha = _grad(lower_loss(), alpha)
    g_theta = _grad(lower_loss(), theta)
    params = _inner_problem(alpha, theta, cfg)
    inner = _descend(params, lower_loss, _start(params, cfg, state), None, cfg)
    grad_of = list(alpha) if cfg.constraint == "theta" else []
    tilde, lower_tilde, g_alpha_tilde = _settle(params, lower_loss, inner, grad_of, track=True)
    if state is not None and cfg.inner_start == "persistent":
        state.tilde = tilde
    upper_out = upper_loss()
    grad_q = _constraint(g_alpha + g_theta, g_alpha_tilde, n, cfg)
    return _Gradients(lower, lower_tilde, _value(upper_out), _grad(upper_out, [*alpha, *theta]), grad_q, inner.lr, n)



def bilevel_step_naive(
    alpha_params: list[Tensor],
    theta_params: list[Tensor],
    lower_loss: Closure,
    upper_loss: Closure,
    optimizer: torch.optim.Optimizer,
    cfg: BilevelConfig | None = None,
    state: BilevelState | None = None,
) -> dict[str, float]:
    """`bilevel_step` without gradient reuse: the test reference."""
    return _step(
        _gradients_naive, alpha_params, theta_params, lower_loss, upper_loss, optimizer, cfg or BilevelConfig(), state
    )


