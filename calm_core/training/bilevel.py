"""The first-order bilevel step (BOME, Ye, Liu, Wright, Stone and Liu, NeurIPS 2022),
generic over loss closures.

    cfg = BilevelConfig(inner_steps=10, eta=0.5)
    opt = torch.optim.SGD([{"params": alpha, "lr": 0.1}, {"params": theta, "lr": 1.0}])
    state = BilevelState()          # the lower-level iterate, kept between steps if persistent
    log = bilevel_step(alpha, theta, lambda: ce_on(train_batch), lambda: -entropy_on(val_batch), opt, cfg, state)

With u = (alpha, theta), L the lower loss (cross-entropy on a training batch) and F the
upper loss (minus mean entropy on a held-out batch), one step is:

1. theta~ <- theta (or, `inner_start="persistent"`, the previous step's theta~), then T
   gradient steps on L(.; alpha). The step size is `inner_lr`, or with
   `inner_rule="polyak"` the Polyak step L / ||grad L||^2 (CE >= 0, so 0 is a lower
   bound), capped at `inner_lr`: scale-free, so theta~ is a real approximation of
   theta*(alpha) whatever the gradients' scale. A step that raises L is undone and the
   step size halved, so L(theta~) never ends above the best inner iterate.
2. q = L(theta; alpha) - L(theta~; alpha), with theta~ held constant:
   grad q = (grad_alpha L(theta; alpha) - grad_alpha L(theta~; alpha), grad_theta L(theta; alpha)).
3. lambda = max(phi - <grad F, grad q>_w, 0) / ||grad q||_w^2, lambda = 0 when grad q = 0;
   phi = eta ||grad q||_w^2 ("grad") or eta q ("value").
4. u <- u - c lr (grad F + lambda grad q): BOME's plain step; c <= 1 only when the
   update would be longer than `max_update_norm` (a trust region that keeps the
   direction: large gradients, as under letter scoring, otherwise blow the step up).

The metric w: BOME takes one step size xi for u. Separate step sizes for alpha and theta
(lr_alpha, lr_theta in the optimizer's param groups) are a diagonal preconditioner
P = xi diag(w), w = lr / max lr per block; BOME is run in the coordinates where that
step is plain, which means computing lambda and phi with <a, b>_w = sum w a b. Then the
update delta = -P (grad F + lambda grad q) satisfies <-delta, grad q> >= xi phi: q
decreases at first order by at least xi phi, BOME's guarantee (logged as
`descent_ratio` = <-delta, grad q> / (xi phi) >= 1). This holds for a plain SGD
optimizer (no momentum, no weight decay). Any other optimizer (AdamW) gets the Euclidean
lambda and rescales coordinates after it, which voids the guarantee: the ratio is still
logged so that the violation shows.

The closures take no arguments: they compute the loss from the parameters they hold. To
evaluate at theta~ nothing is written into the parameters: while a closure runs at
theta~, a torch-function mode (`at`, training/substitution.py) hands every torch
operation that receives one of theta's tensors theta~'s tensor in its place (the
module's attribute, a tensor read inside the closure: whatever reaches an operation).
The parameters' `.data`, storage and requires_grad stay as they were, so a wrapper that
keeps parameters elsewhere (FSDP's sharded storage,
calm_core.training.distributed.shard_frozen) sees one consistent state, and an exception
inside a closure leaves nothing to restore. Gradients at theta~ are
taken with respect to theta~'s own leaf tensors. Keep the closures deterministic
(dropout off, or the same masks at theta and theta~): q compares one function at two
points, so noise in it goes straight into lambda.

Diagnostics (every step; read by training/bilevel_health.py): q, lambda, the inner drop
(L - L~) / L, ||grad_alpha q|| / ||grad_alpha F||, cos(grad F, grad q)_w, the descent ratio.

Gradient reuse (one backward at theta gives two components) and data parallelism: docs/bilevel.md,
"Implementation notes". tests/bilevel_naive.py recomputes everything, as the reference for tests.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from calm_core.settings import check_settings, setting
from calm_core.training import distributed
from calm_core.training.substitution import at

PHI_CHOICES = ("grad", "value")
INNER_RULES = ("fixed", "polyak")
INNER_STARTS = ("theta", "persistent")
CONSTRAINTS = ("theta", "joint")
Closure = Callable[[], Tensor]


@dataclass
class BilevelConfig:
    """Settings of the BOME step (saved with the run's config)."""

    inner_steps: int = setting(
        10, "BOME's T: gradient steps from theta to theta~ (the paper's T = 10)", label="Inner steps T", min=1, max=100
    )
    inner_lr: float = setting(
        3.0, "inner step size (inner_rule fixed), or its cap (polyak)", label="Inner lr (cap)", min=1e-4, max=100.0
    )
    inner_rule: str = setting(
        "polyak",
        "polyak: L / ||grad L||^2, capped at the inner lr (scale-free); fixed: the inner lr",
        label="Inner step",
        choices=INNER_RULES,
    )
    inner_start: str = setting(
        "theta",
        "theta: theta~ starts at theta every step (BOME); persistent: it continues from the last theta~",
        label="Inner start",
        choices=INNER_STARTS,
    )
    eta: float = setting(
        0.5,
        "BOME's eta: phi = eta * ||grad q||^2 (or eta * q), the share of the constraint each step must remove",
        label="eta",
        min=0.01,
        max=100.0,
    )
    phi: str = setting("grad", "grad: phi = eta * ||grad q||^2; value: phi = eta * q", choices=PHI_CHOICES)
    constraint: str = setting(
        "theta",
        "theta: theta optimal for L given alpha (the paper); joint: (alpha, theta) optimal for L (docs/bilevel.md)",
        choices=CONSTRAINTS,
    )
    max_update_norm: float = setting(
        1.0, "a plain step's ||delta u|| is cut to this length, direction kept (0: no limit)", min=0.0, max=1e6
    )

    def __post_init__(self) -> None:
        check_settings(self)  # each setting's declared kind, choices and bounds


@dataclass
class BilevelState:
    """What a step leaves for the next: theta~ when the inner iterate is persistent."""

    tilde: list[Tensor] | None = None

    def tensors(self) -> dict[str, Tensor]:
        """For a checkpoint: theta~ by position ({} when there is none)."""
        return {f"tilde.{i}": t.detach().cpu().contiguous() for i, t in enumerate(self.tilde or [])}

    def load(self, tensors: dict[str, Tensor]) -> None:
        """Restore theta~ from `tensors` (as written by `tensors`); the next step moves it
        to the parameters' device and checks that it matches them."""
        self.tilde = [tensors[f"tilde.{i}"] for i in range(len(tensors))] or None


@dataclass
class _Gradients:
    """Everything step 3 needs: the three losses and the two gradients, split by block."""

    lower: float  # L(theta; alpha)
    lower_tilde: float  # L(theta~; alpha)
    upper: float  # F(alpha, theta)
    grad_f: list[Tensor]  # (alpha..., theta...) shapes
    grad_q: list[Tensor]  # (alpha..., theta...) shapes
    inner_lr: float = 0.0  # mean inner step size used
    n_alpha: int = 0  # how many of the blocks are alpha's


def _grad(loss: Tensor, params: Sequence[Tensor]) -> list[Tensor]:
    """d loss / d params, averaged over data-parallel ranks (calm_core.training.distributed; a
    no-op in one process); a parameter the loss does not touch gets zeros."""
    grads = list(torch.autograd.grad(loss, list(params), allow_unused=True, materialize_grads=True))
    return list(distributed.mean_(grads))


def _value(loss: Tensor) -> float:
    """A loss as a float, averaged over ranks: q and lambda are the same on every rank."""
    return distributed.mean_value(float(loss.detach()))


def _dot(xs: Sequence[Tensor], ys: Sequence[Tensor], w: Sequence[float] | None = None) -> float:
    """<x, y>_w over a list of blocks (w = per-block weights, 1 when None), in float64."""
    weights = w if w is not None else [1.0] * len(xs)
    return float(sum(c * torch.sum(x * y, dtype=torch.float64) for x, y, c in zip(xs, ys, weights, strict=True)))


def _inner_lr(loss: float, grads: Sequence[Tensor], cfg: BilevelConfig, scale: float) -> float:
    """The inner step size: fixed, or Polyak's L / ||g||^2 (lower bound 0) capped at inner_lr."""
    if cfg.inner_rule == "fixed":
        return cfg.inner_lr * scale
    gg = _dot(grads, grads)
    return min(cfg.inner_lr, loss / gg if gg > 0 else cfg.inner_lr) * scale


@dataclass
class _Inner:
    """The inner solve: theta~, the iterate before it and its loss (the fallback if the
    last step overshot), the mean step size."""

    tilde: list[Tensor]
    previous: list[Tensor]
    previous_loss: float
    lr: float


def _descend(
    params: Sequence[Tensor],
    lower_loss: Closure,
    start: list[Tensor],
    first: tuple[float, list[Tensor]] | None,
    cfg: BilevelConfig,
) -> _Inner:
    """T gradient steps on L over `params` (theta, or alpha and theta) from `start`;
    `first` = (L, grad L) at `start` when already computed (reused). A step that raised L is undone and the step size
    halved (monotone descent); the last step is checked by the caller (`_settle`), which
    evaluates L(theta~) anyway."""
    tilde = [p.detach().clone() for p in start]
    scale, used = 1.0, []
    previous, previous_loss, previous_grads = list[Tensor](), math.inf, list[Tensor]()  # set by the first step
    for t in range(cfg.inner_steps):
        if t == 0 and first is not None:
            loss, grads = first
        else:
            with at(params, tilde) as leaves:
                out = lower_loss()
                loss, grads = _value(out), _grad(out, leaves)
        if loss > previous_loss:  # overshoot: back to the last iterate, half the step
            tilde, loss, grads, scale = previous, previous_loss, previous_grads, scale / 2
        lr = _inner_lr(loss, grads, cfg, scale)
        used.append(lr)
        previous, previous_loss, previous_grads = [v.clone() for v in tilde], loss, grads
        with torch.no_grad():
            for v, g in zip(tilde, grads, strict=True):
                v.sub_(lr * g)
    return _Inner(tilde, previous, previous_loss, sum(used) / len(used))


def _settle(
    params: Sequence[Tensor], lower_loss: Closure, inner: _Inner, grad_of: Sequence[Tensor], track: bool
) -> tuple[list[Tensor], float, list[Tensor]]:
    """The inner iterate, L there and d L / d `grad_of` there (grad_alpha L(theta~; alpha);
    nothing for the joint constraint); the iterate before it when the last inner step
    raised L (one more pass, rare)."""
    for tilde in (inner.tilde, inner.previous):
        with at(params, tilde, track=track):
            if grad_of:
                out = lower_loss()
                value, grads = _value(out), _grad(out, grad_of)
            else:
                with torch.no_grad():
                    value, grads = _value(lower_loss()), []
        if value <= inner.previous_loss:
            break
    return tilde, value, grads


def _check_params(alpha: Sequence[Tensor], theta: Sequence[Tensor]) -> None:
    if not alpha or not theta:
        raise ValueError(f"Expected non-empty `alpha_params` and `theta_params`, but got {len(alpha)} and {len(theta)}")
    if {id(p) for p in alpha} & {id(p) for p in theta}:
        raise ValueError("Expected `alpha_params` and `theta_params` to be disjoint, but they share a tensor")
    if not all(p.requires_grad for p in [*alpha, *theta]):
        raise ValueError("Expected every parameter to require grad, but some do not")


def _persistent(cfg: BilevelConfig, state: BilevelState | None) -> bool:
    """True when the inner solve continues from the last step's iterate."""
    return cfg.inner_start == "persistent" and state is not None and state.tilde is not None


def _start(params: Sequence[Tensor], cfg: BilevelConfig, state: BilevelState | None) -> list[Tensor]:
    """Where the inner solve starts: the persistent iterate, else the current parameters."""
    tilde = state.tilde if state is not None and _persistent(cfg, state) else None
    if tilde is None:
        return list(params)
    if [tuple(t.shape) for t in tilde] != [tuple(p.shape) for p in params]:
        raise ValueError(
            "Expected the persistent inner iterate to match the parameters it solves for "
            f"({len(params)} tensors), but it does not: was `constraint` changed on resume?"
        )
    return [t.to(p.device, p.dtype) for t, p in zip(tilde, params, strict=True)]


def _inner_problem(alpha: Sequence[Tensor], theta: Sequence[Tensor], cfg: BilevelConfig) -> list[Tensor]:
    """What the inner solve moves: theta (the paper's constraint), or alpha and theta (joint)."""
    return list(theta) if cfg.constraint == "theta" else [*alpha, *theta]


def _constraint(g_lower: list[Tensor], g_alpha_tilde: list[Tensor], n: int, cfg: BilevelConfig) -> list[Tensor]:
    """grad q. theta: (grad_alpha L(theta) - grad_alpha L(theta~), grad_theta L(theta));
    joint: grad L(theta; alpha), since min over (theta', alpha') of L is a constant."""
    if cfg.constraint == "joint":
        return list(g_lower)
    return [a - b for a, b in zip(g_lower[:n], g_alpha_tilde, strict=True)] + g_lower[n:]


def _gradients(
    alpha: Sequence[Tensor],
    theta: Sequence[Tensor],
    lower_loss: Closure,
    upper_loss: Closure,
    cfg: BilevelConfig,
    state: BilevelState | None,
) -> _Gradients:
    """Steps 1-2 with reuse: one full backward at theta, T - 1 inner backwards (T from a
    persistent start), one alpha-only backward at theta~."""
    n = len(alpha)
    out = lower_loss()
    lower, g_lower = _value(out), _grad(out, [*alpha, *theta])  # grad_alpha L(theta), grad_theta L(theta)
    params = _inner_problem(alpha, theta, cfg)
    start = _start(params, cfg, state)
    first = None if _persistent(cfg, state) else (lower, g_lower[len(g_lower) - len(params) :])  # reuse: the start is u
    inner = _descend(params, lower_loss, start, first, cfg)
    grad_of = list(alpha) if cfg.constraint == "theta" else []
    tilde, lower_tilde, g_alpha_tilde = _settle(params, lower_loss, inner, grad_of, track=False)
    if state is not None and cfg.inner_start == "persistent":
        state.tilde = tilde
    upper_out = upper_loss()
    grad_q = _constraint(g_lower, g_alpha_tilde, n, cfg)
    return _Gradients(lower, lower_tilde, _value(upper_out), _grad(upper_out, [*alpha, *theta]), grad_q, inner.lr, n)


def bome_lambda(
    grad_f: Sequence[Tensor], grad_q: Sequence[Tensor], q: float, cfg: BilevelConfig, w: Sequence[float] | None = None
) -> float:
    """lambda = max(phi - <grad F, grad q>_w, 0) / ||grad q||_w^2, and 0 when grad q = 0."""
    qq = _dot(grad_q, grad_q, w)
    if qq == 0.0:
        return 0.0
    phi = cfg.eta * (qq if cfg.phi == "grad" else q)
    return max(phi - _dot(grad_f, grad_q, w), 0.0) / qq


def plain_step_sizes(optimizer: torch.optim.Optimizer, params: Sequence[Tensor]) -> list[float] | None:
    """Per-parameter step sizes when `optimizer` is a plain gradient step (SGD without
    momentum or weight decay), else None: only then is BOME's guarantee kept."""
    if not isinstance(optimizer, torch.optim.SGD):
        return None
    lr_of: dict[int, float] = {}
    for group in optimizer.param_groups:
        if group.get("momentum", 0) or group.get("weight_decay", 0) or group.get("nesterov", False):
            return None
        lr_of.update({id(p): float(group["lr"]) for p in group["params"]})
    return [lr_of[id(p)] for p in params] if all(id(p) in lr_of for p in params) else None


def _dot64(xs: Sequence[Tensor], ys: Sequence[Tensor]) -> float:
    """<x, y> with every product in float64 (one block's temporary at a time): the
    difference of two such sums resolves a step much smaller than the parameters."""
    with torch.no_grad():
        return float(sum(torch.sum(x.detach().double() * y.double()) for x, y in zip(xs, ys, strict=True)))


def _diagnostics(g: _Gradients, lam: float, w: Sequence[float] | None, descent: float) -> dict[str, float]:
    """The numbers that say whether the coupling acts (see the module docstring)."""
    n = g.n_alpha
    q = g.lower - g.lower_tilde
    qq_w = _dot(g.grad_q, g.grad_q, w)
    ff_w = _dot(g.grad_f, g.grad_f, w)
    gf_alpha = math.sqrt(_dot(g.grad_f[:n], g.grad_f[:n]))
    gq_alpha = math.sqrt(_dot(g.grad_q[:n], g.grad_q[:n]))
    return {
        "lower_loss": g.lower,
        "upper_loss": g.upper,
        "q": q,
        "lambda": lam,
        "grad_f_norm": math.sqrt(_dot(g.grad_f, g.grad_f)),
        "grad_q_norm": math.sqrt(_dot(g.grad_q, g.grad_q)),
        "inner_loss_drop": q,
        "inner_drop_frac": q / g.lower if g.lower > 0 else 0.0,
        "inner_lr": g.inner_lr,
        "coupling_ratio": gq_alpha / gf_alpha if gf_alpha > 0 else 0.0,
        "cos_fq": _dot(g.grad_f, g.grad_q, w) / math.sqrt(qq_w * ff_w) if qq_w > 0 and ff_w > 0 else 0.0,
        "descent": descent,
    }


def _apply(
    params: Sequence[Tensor], g: _Gradients, optimizer: torch.optim.Optimizer, cfg: BilevelConfig
) -> dict[str, float]:
    """Steps 3-4: lambda in the step's metric, the direction grad F + lambda grad q as
    .grad, one optimizer step; then the diagnostics, with the update actually applied."""
    q = g.lower - g.lower_tilde
    lrs = plain_step_sizes(optimizer, params)
    xi = max(lrs) if lrs else None
    w = [lr / xi for lr in lrs] if lrs and xi else None
    lam = bome_lambda(g.grad_f, g.grad_q, q, cfg, w)
    direction = [f + lam * dq for f, dq in zip(g.grad_f, g.grad_q, strict=True)]  # param shapes
    scale = plain_step_scale(direction, lrs, cfg.max_update_norm)
    # <-delta, grad q> of the update the optimizer really applied, as <u, grad q> before
    # minus after (exact products in float64), so no copy of the parameters is kept.
    before = _dot64(params, g.grad_q)
    for p, d in zip(params, direction, strict=True):
        p.grad = scale * d
    optimizer.step()
    log = _diagnostics(g, lam, w, before - _dot64(params, g.grad_q))
    log["step_scale"] = scale
    phi = cfg.eta * (_dot(g.grad_q, g.grad_q, w) if cfg.phi == "grad" else q)
    if xi is not None and phi > 0:  # BOME's guarantee: <-delta, grad q> >= scale xi phi
        log["descent_ratio"] = log["descent"] / (scale * xi * phi)
    return log


def plain_step_scale(direction: Sequence[Tensor], lrs: Sequence[float] | None, max_norm: float) -> float:
    """The factor c <= 1 that keeps a plain step's update lr * d within `max_norm` (a
    trust region: the direction, and so BOME's guarantee, is unchanged; only xi shrinks).
    1 for other optimizers (lrs None), whose step size does not follow the gradient's,
    and for max_norm 0. Every method's plain step uses it (methods.base.gradient_step)."""
    if lrs is None or not max_norm:
        return 1.0
    norm = math.sqrt(
        sum(lr * lr * float(torch.sum(d * d, dtype=torch.float64)) for lr, d in zip(lrs, direction, strict=True))
    )
    return min(1.0, max_norm / norm) if norm > 0 else 1.0


def _step(
    gradients: Callable[..., _Gradients],
    alpha_params: Sequence[Tensor],
    theta_params: Sequence[Tensor],
    lower_loss: Closure,
    upper_loss: Closure,
    optimizer: torch.optim.Optimizer,
    cfg: BilevelConfig,
    state: BilevelState | None,
) -> dict[str, float]:
    start = time.perf_counter()
    _check_params(alpha_params, theta_params)
    g = gradients(alpha_params, theta_params, lower_loss, upper_loss, cfg, state)
    log = _apply([*alpha_params, *theta_params], g, optimizer, cfg)
    log["step_time"] = time.perf_counter() - start
    return log


def bilevel_step(
    alpha_params: Sequence[Tensor],
    theta_params: Sequence[Tensor],
    lower_loss: Closure,
    upper_loss: Closure,
    optimizer: torch.optim.Optimizer,
    cfg: BilevelConfig | None = None,
    state: BilevelState | None = None,
) -> dict[str, float]:
    """One BOME step on u = (alpha, theta), reusing gradients; returns the log values
    (BOME_LOG_KEYS, plus `descent_ratio` under a plain step, and step_time in s).

    lower_loss / upper_loss: closures computing L and F from the current parameters.
    optimizer: holds alpha_params and theta_params; its `.grad`s are overwritten.
    state: where a persistent theta~ is kept between steps (needed for inner_start="persistent").
    """
    return _step(
        _gradients, alpha_params, theta_params, lower_loss, upper_loss, optimizer, cfg or BilevelConfig(), state
    )


BOME_LOG_KEYS = (
    "q",
    "lambda",
    "grad_f_norm",
    "grad_q_norm",
    "inner_loss_drop",
    "inner_drop_frac",
    "inner_lr",
    "coupling_ratio",
    "cos_fq",
    "descent",
    "descent_ratio",
    "step_scale",
)
