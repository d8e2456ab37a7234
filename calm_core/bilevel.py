"""The first-order bilevel step (BOME), generic over loss closures.

    cfg = BilevelConfig(inner_steps=1, inner_lr=1e-3, eta=0.5)
    opt = torch.optim.AdamW([{"params": alpha, "lr": 1e-2}, {"params": theta, "lr": 1e-4}])
    log = bilevel_step(alpha, theta, lambda: ce_on(train_batch), lambda: -entropy_on(val_batch), opt, cfg)

With u = (alpha, theta), L the lower loss (cross-entropy on a training batch) and F the
upper loss (minus mean entropy on a held-out batch), one step is:

1. theta~ <- theta (detached), then T SGD steps of size inner_lr on L(theta~; alpha).
2. q = L(theta; alpha) - L(theta~; alpha), with theta~ held constant:
   grad q = (grad_alpha L(theta; alpha) - grad_alpha L(theta~; alpha), grad_theta L(theta; alpha)).
3. lambda = max(phi - <grad F, grad q>, 0) / ||grad q||^2, lambda = 0 when grad q = 0;
   phi = eta ||grad q||^2 ("grad") or eta q ("value").
4. The caller's optimizer steps u along grad F + lambda grad q (its param groups carry
   the separate learning rates of alpha and theta).

The closures take no arguments: they compute the loss from the *current* parameter
values. To evaluate at theta~, theta's `.data` is swapped for theta~ and restored
afterwards (also when a closure raises); every backward at theta~ runs inside the swap,
because autograd reads a leaf's data at backward time. Keep the closures deterministic
(dropout off, or the same masks at theta and theta~): q compares one function at two
points, so noise in it goes straight into lambda.

With a finite inner solve (rho = contraction of the T inner steps) the step settles where
q = 0 and grad F is parallel to grad q, which is the bilevel optimum only as theta~ ->
theta*(alpha); tests/test_bilevel.py derives the gap on a quadratic.

Gradient reuse: grad_theta L(theta; alpha) is also the first inner step's gradient, so
one backward at theta gives both components; grad_alpha L(theta~; alpha) comes from one
backward w.r.t. alpha only, with theta's requires_grad off, so no graph is kept through
the model (the head sits after it). `bilevel_step_naive` recomputes everything, as the
reference for tests.

Future (not implemented): under data parallelism (torchrun / accelerate) every rank must
all-reduce grad F and grad q (and average q) *before* computing lambda, so that all ranks
take the same step; lambda from local gradients would differ per rank.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from calm_core import distributed

PHI_CHOICES = ("grad", "value")
Closure = Callable[[], Tensor]


@dataclass
class BilevelConfig:
    """Settings of the BOME step (saved with the run's config)."""

    inner_steps: int = 1  # T: SGD steps from theta to theta~ (1 is BOME's usual choice)
    inner_lr: float = 1e-3  # step size of those inner SGD steps
    eta: float = 0.5  # share of ||grad q||^2 (or of q) each step must remove from the constraint
    phi: str = "grad"  # "grad": phi = eta * ||grad q||^2; "value": phi = eta * q

    def __post_init__(self) -> None:
        if isinstance(self.inner_steps, bool) or not isinstance(self.inner_steps, int) or self.inner_steps < 1:
            raise ValueError(f"Expected `inner_steps` to be a positive int, but got {self.inner_steps!r}")
        for name in ("inner_lr", "eta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"Expected `{name}` to be a positive finite float, but got {value!r}")
        if self.phi not in PHI_CHOICES:
            raise ValueError(f"Expected `phi` to be one of {list(PHI_CHOICES)}, but got {self.phi!r}")


@dataclass
class _Gradients:
    """Everything step 3 needs: the three losses and the two gradients, split by block."""

    lower: float  # L(theta; alpha)
    lower_tilde: float  # L(theta~; alpha)
    upper: float  # F(alpha, theta)
    grad_f: list[Tensor]  # (alpha..., theta...) shapes
    grad_q: list[Tensor]  # (alpha..., theta...) shapes


def _grad(loss: Tensor, params: Sequence[Tensor]) -> list[Tensor]:
    """d loss / d params, averaged over data-parallel ranks (calm_core.distributed; a
    no-op in one process); a parameter the loss does not touch gets zeros."""
    grads = list(torch.autograd.grad(loss, list(params), allow_unused=True, materialize_grads=True))
    return list(distributed.mean_(grads))


def _value(loss: Tensor) -> float:
    """A loss as a float, averaged over ranks: q and lambda are the same on every rank."""
    return distributed.mean_value(float(loss.detach()))


@contextmanager
def _theta_at(theta: Sequence[Tensor], values: Sequence[Tensor], track: bool = True) -> Iterator[None]:
    """Temporarily give theta the data `values` (and, if not `track`, no requires_grad)."""
    saved = [(p.data, p.requires_grad) for p in theta]
    try:
        for p, v in zip(theta, values):
            p.data = v
            p.requires_grad_(track)
        yield
    finally:
        for p, (data, flag) in zip(theta, saved):
            p.data = data
            p.requires_grad_(flag)


def _descend(theta: Sequence[Tensor], lower_loss: Closure, first_grad: list[Tensor] | None,
             cfg: BilevelConfig) -> list[Tensor]:
    """theta~ after T SGD steps on L(.; alpha) from theta; `first_grad` (reused) replaces
    the first step's backward when given."""
    tilde = [p.detach().clone() for p in theta]
    for t in range(cfg.inner_steps):
        if t == 0 and first_grad is not None:
            grads = first_grad
        else:
            with _theta_at(theta, tilde):
                grads = _grad(lower_loss(), theta)
        with torch.no_grad():
            for v, g in zip(tilde, grads):
                v.sub_(cfg.inner_lr * g)  # in place: inside _theta_at, v is also p's data
    return tilde


def _check_params(alpha: Sequence[Tensor], theta: Sequence[Tensor]) -> None:
    if not alpha or not theta:
        raise ValueError(f"Expected non-empty `alpha_params` and `theta_params`, but got {len(alpha)} and {len(theta)}")
    if {id(p) for p in alpha} & {id(p) for p in theta}:
        raise ValueError("Expected `alpha_params` and `theta_params` to be disjoint, but they share a tensor")
    if not all(p.requires_grad for p in [*alpha, *theta]):
        raise ValueError("Expected every parameter to require grad, but some do not")


def _gradients(alpha: Sequence[Tensor], theta: Sequence[Tensor], lower_loss: Closure, upper_loss: Closure,
               cfg: BilevelConfig) -> _Gradients:
    """Steps 1-2 with reuse: one full backward at theta, one alpha-only backward at theta~."""
    n = len(alpha)
    lower = lower_loss()
    g_lower = _grad(lower, [*alpha, *theta])  # grad_alpha L(theta), grad_theta L(theta)
    tilde = _descend(theta, lower_loss, g_lower[n:], cfg)
    with _theta_at(theta, tilde, track=False):
        lower_tilde = lower_loss()
        g_alpha_tilde = _grad(lower_tilde, alpha)
    upper = upper_loss()
    grad_q = [a - b for a, b in zip(g_lower[:n], g_alpha_tilde)] + g_lower[n:]
    return _Gradients(_value(lower), _value(lower_tilde), _value(upper), _grad(upper, [*alpha, *theta]), grad_q)


def _gradients_naive(alpha: Sequence[Tensor], theta: Sequence[Tensor], lower_loss: Closure, upper_loss: Closure,
                     cfg: BilevelConfig) -> _Gradients:
    """Steps 1-2 with every loss and gradient computed afresh (the reference)."""
    lower = lower_loss()
    g_alpha = _grad(lower, alpha)
    g_theta = _grad(lower_loss(), theta)
    tilde = _descend(theta, lower_loss, None, cfg)
    with _theta_at(theta, tilde):
        lower_tilde = lower_loss()
        g_alpha_tilde = _grad(lower_tilde, alpha)
    upper = upper_loss()
    grad_q = [a - b for a, b in zip(g_alpha, g_alpha_tilde)] + g_theta
    return _Gradients(_value(lower), _value(lower_tilde), _value(upper), _grad(upper, [*alpha, *theta]), grad_q)


def _dot(xs: Sequence[Tensor], ys: Sequence[Tensor]) -> float:
    """<x, y> over a list of blocks, accumulated in float64."""
    return float(sum(torch.sum(x * y, dtype=torch.float64) for x, y in zip(xs, ys)))


def bome_lambda(grad_f: Sequence[Tensor], grad_q: Sequence[Tensor], q: float, cfg: BilevelConfig) -> float:
    """lambda = max(phi - <grad F, grad q>, 0) / ||grad q||^2, and 0 when grad q = 0."""
    qq = _dot(grad_q, grad_q)
    if qq == 0.0:
        return 0.0
    phi = cfg.eta * (qq if cfg.phi == "grad" else q)
    return max(phi - _dot(grad_f, grad_q), 0.0) / qq


def _apply(params: Sequence[Tensor], g: _Gradients, optimizer: torch.optim.Optimizer,
           cfg: BilevelConfig) -> dict[str, float]:
    """Steps 3-4: lambda, the direction grad F + lambda grad q as .grad, one optimizer step."""
    q = g.lower - g.lower_tilde
    lam = bome_lambda(g.grad_f, g.grad_q, q, cfg)
    for p, f, dq in zip(params, g.grad_f, g.grad_q):
        p.grad = f + lam * dq  # param shape
    optimizer.step()
    return {"lower_loss": g.lower, "upper_loss": g.upper, "q": q, "lambda": lam,
            "grad_f_norm": math.sqrt(_dot(g.grad_f, g.grad_f)), "grad_q_norm": math.sqrt(_dot(g.grad_q, g.grad_q)),
            "inner_loss_drop": g.lower - g.lower_tilde}


def _step(gradients: Callable[..., _Gradients], alpha_params: list[Tensor], theta_params: list[Tensor],
          lower_loss: Closure, upper_loss: Closure, optimizer: torch.optim.Optimizer,
          cfg: BilevelConfig) -> dict[str, float]:
    start = time.perf_counter()
    _check_params(alpha_params, theta_params)
    g = gradients(alpha_params, theta_params, lower_loss, upper_loss, cfg)
    log = _apply([*alpha_params, *theta_params], g, optimizer, cfg)
    log["step_time"] = time.perf_counter() - start
    return log


def bilevel_step(alpha_params: list[Tensor], theta_params: list[Tensor], lower_loss: Closure, upper_loss: Closure,
                 optimizer: torch.optim.Optimizer, cfg: BilevelConfig | None = None) -> dict[str, float]:
    """One BOME step on u = (alpha, theta), reusing gradients; returns the log values
    lower_loss, upper_loss, q, lambda, grad_f_norm, grad_q_norm, inner_loss_drop, step_time (s).

    lower_loss / upper_loss: closures computing L and F from the current parameters.
    optimizer: holds alpha_params and theta_params; its `.grad`s are overwritten.
    """
    return _step(_gradients, alpha_params, theta_params, lower_loss, upper_loss, optimizer, cfg or BilevelConfig())


def bilevel_step_naive(alpha_params: list[Tensor], theta_params: list[Tensor], lower_loss: Closure,
                       upper_loss: Closure, optimizer: torch.optim.Optimizer,
                       cfg: BilevelConfig | None = None) -> dict[str, float]:
    """`bilevel_step` without gradient reuse (2 + T + 2 closure calls): the test reference."""
    return _step(_gradients_naive, alpha_params, theta_params, lower_loss, upper_loss, optimizer,
                 cfg or BilevelConfig())
