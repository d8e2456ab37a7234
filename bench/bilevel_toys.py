"""Bilevel problems with known answers: trust a solver here before trusting it on a model.

    python -m bench.bilevel_toy_tables              # the table in docs/bilevel.md
    python -m bench.bilevel_toy_tables --minibatch  # the lower level under minibatches

The tables and their experiments (`lower_level_run`, the minibatch rows) live in
bench.bilevel_toy_tables; this module is the toys and `ToyContext`, which
runs the project's method steps on them.

`ShiftToy` is CALM in miniature. Softmax regression on synthetic data: theta = W (K x D,
no bias), alpha = l (K,), a logit shift like the head's.

    lower  L(W; l) = mean CE(softmax(W x + l), y) over S_T + mu/2 ||W||^2
    upper  F(l, W) = - mean entropy of softmax(W x + l) over S_V (inputs only)

The ridge term makes L strongly convex in W, so W*(l) is unique. The training inputs
have a non-zero mean, so W can partly act as a bias and answers to a change of l; S_V is
drawn elsewhere. Then the two answers differ:

- the bilevel optimum l*: argmin_l F(l, W*(l)), from exact inner solves (Newton, float64)
  and the implicit-function hypergradient
      dF/dl = dF/dl|_W - (d2L/dl dW) (d2L/dW2)^-1 dF/dW;
- alternating updates (`iterate`) stop where W = W*(l) and the *partial* derivative
  dF/dl|_W vanishes: they ignore how W*(l) answers to l.

`TemperatureToy` puts alpha = s = log tau in place of l (logits W x / tau). It shows why
CALM's temperature has no finite optimum unless the model can undo it: W*(tau) grows
with tau, but the ridge term (in a network: the bounded logit range after the final
norm) stops it from growing as fast, so F(s, W*(s)) keeps falling as tau grows.
`profile` gives that curve.

`AdaptiveTemperatureToy` asks the adaptive head's question: labels drawn at a temperature
that depends on a feature f, alpha = the AdaptiveHead's (w, b) reading h = (f, noise),
theta = a change of the base model's weights. With `constraint: joint` the lower level
alone pins tau(h) down, at tau*(f) up to the sample; with the paper's constraint the
shape is lost and the scale runs upward, as on TemperatureToy.

Everything here is float64 and full-batch by default; the tests run `calm` and `iterate`
(the project's own method steps) on ShiftToy through `ToyContext`. `ToyContext(batch_size=B)`
draws B training points per step for L as the real trainer does, and `lower_level_run`
(bilevel_toy_tables) measures, on the whole of S_T, how far theta ends from theta*(alpha):
with B = 4 the constraint no longer holds (docs/bilevel_minibatch_section.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from calm_core.training.bilevel import BilevelConfig

DTYPE = torch.float64


def _entropy(z: torch.Tensor) -> torch.Tensor:
    """Mean entropy (nats) of softmax(z) over rows; z (N, K)."""
    logp = torch.log_softmax(z, dim=-1)
    return -(logp.exp() * logp).sum(-1).mean()


@dataclass
class ToyData:
    x_train: torch.Tensor  # (N, D)
    y_train: torch.Tensor  # (N,)
    x_heldout: torch.Tensor  # (M, D)


def make_data(seed: int = 0, n: int = 200, m: int = 200, dim: int = 2, k: int = 3) -> ToyData:
    """Labels from a softmax model with a class prior W alone cannot express; training
    inputs centred at (1, 0.5, ...), held-out inputs at (-1, 1, ...): a shift."""
    g = torch.Generator().manual_seed(seed)
    w_true = 1.5 * torch.randn(k, dim, generator=g, dtype=DTYPE)
    prior = torch.linspace(-1.0, 1.0, k, dtype=DTYPE)
    centre = torch.tensor([1.0, 0.5] + [0.0] * (dim - 2), dtype=DTYPE)
    x = centre + torch.randn(n, dim, generator=g, dtype=DTYPE)
    y = torch.multinomial(torch.softmax(x @ w_true.T + prior, -1), 1, generator=g)[:, 0]
    x_val = torch.tensor([-1.0, 1.0] + [0.0] * (dim - 2), dtype=DTYPE) + 0.7 * torch.randn(
        m, dim, generator=g, dtype=DTYPE
    )
    return ToyData(x, y, x_val)


class ShiftToy:
    """alpha = l (K,), theta = W (K, D); see the module docstring."""

    def __init__(self, data: ToyData | None = None, mu: float = 0.05) -> None:
        self.data = data or make_data()
        self.mu = mu
        self.k, self.dim = int(self.data.y_train.max()) + 1, self.data.x_train.shape[1]

    def logits(self, w: torch.Tensor, alpha: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x @ w.reshape(self.k, self.dim).T + alpha  # (N, K)

    def lower(self, w: torch.Tensor, alpha: torch.Tensor, idx: Sequence[int] | None = None) -> torch.Tensor:
        """L on S_T, or on the training points `idx` (a minibatch; the ridge term is the same)."""
        x, y = self.data.x_train, self.data.y_train
        if idx is not None:
            x, y = x[list(idx)], y[list(idx)]
        return torch.nn.functional.cross_entropy(self.logits(w, alpha, x), y) + 0.5 * self.mu * (w**2).sum()

    def upper(self, w: torch.Tensor, alpha: torch.Tensor, idx: Sequence[int] | None = None) -> torch.Tensor:
        """F on S_V, or on the held-out points `idx`."""
        x = self.data.x_heldout if idx is None else self.data.x_heldout[list(idx)]
        return -_entropy(self.logits(w, alpha, x))

    def train_accuracy(self, w: torch.Tensor, alpha: torch.Tensor) -> float:
        """Share of S_T whose argmax class is the label."""
        z = self.logits(w.detach(), alpha.detach(), self.data.x_train)
        return float((z.argmax(-1) == self.data.y_train).to(DTYPE).mean())

    def alpha_init(self) -> torch.Tensor:
        return torch.zeros(self.k, dtype=DTYPE)

    def theta_init(self) -> torch.Tensor:
        return torch.zeros(self.k * self.dim, dtype=DTYPE)

    # --- exact answers -----------------------------------------------------------------

    def inner_solution(self, alpha: torch.Tensor, tol: float = 1e-12) -> torch.Tensor:
        """W*(alpha) by Newton's method (L is strongly convex in W)."""
        w = self.theta_init()
        for _ in range(100):
            grad = torch.autograd.functional.jacobian(lambda v: self.lower(v, alpha), w)
            if grad.norm() < tol:
                break
            hess = torch.autograd.functional.hessian(lambda v: self.lower(v, alpha), w)
            w = w - torch.linalg.solve(hess, grad)
        return w

    def value(self, alpha: torch.Tensor) -> float:
        """F(alpha, W*(alpha)): the bilevel objective."""
        return float(self.upper(self.inner_solution(alpha), alpha))

    def hypergradient(self, alpha: torch.Tensor) -> torch.Tensor:
        """dF(alpha, W*(alpha)) / d alpha by the implicit function theorem."""
        w = self.inner_solution(alpha)
        f_a, f_w = torch.autograd.functional.jacobian(self.upper, (w, alpha))[::-1]
        hess_ww = torch.autograd.functional.hessian(lambda v: self.lower(v, alpha), w)
        cross = torch.autograd.functional.jacobian(  # d/d alpha of grad_W L: (KD, K)
            lambda a: torch.autograd.functional.jacobian(lambda v: self.lower(v, a), w, create_graph=True), alpha
        )
        return f_a - cross.T @ torch.linalg.solve(hess_ww, f_w)

    def partial_gradient(self, alpha: torch.Tensor) -> torch.Tensor:
        """dF/d alpha at W = W*(alpha), W held fixed: what alternating updates follow."""
        w = self.inner_solution(alpha)
        return torch.autograd.functional.jacobian(lambda a: self.upper(w, a), alpha)

    def bilevel_optimum(self, tol: float = 1e-9) -> torch.Tensor:
        """l* where the hypergradient vanishes (gradient descent, step halved when F rises)."""
        return _descend_to_zero(self.alpha_init(), self.hypergradient, self.value, tol)

    def alternating_fixed_point(self, tol: float = 1e-9) -> torch.Tensor:
        """l where the partial derivative vanishes with W = W*(l): `iterate`'s answer."""
        return _root(self.alpha_init(), self.partial_gradient, tol)


def _descend_to_zero(
    x: torch.Tensor,
    grad: Callable[[torch.Tensor], torch.Tensor],
    value: Callable[[torch.Tensor], float],
    tol: float,
    lr: float = 2.0,
) -> torch.Tensor:
    """Gradient descent on `value` until ||grad|| < tol; the step halves when value rises."""
    fx = value(x)
    for _ in range(5000):
        g = grad(x)
        if g.norm() < tol:
            return x
        while True:
            candidate = x - lr * g
            fc = value(candidate)
            if fc <= fx:
                break
            lr /= 2
        x, fx, lr = candidate, fc, lr * 1.5
    raise RuntimeError(f"no convergence: ||grad|| = {float(g.norm()):.2e}")


def _root(x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor], tol: float) -> torch.Tensor:
    """A zero of fn (gauge-invariant in the all-ones direction) by damped Newton with a
    finite-difference Jacobian; fn is the partial gradient, small and smooth here."""
    k = x.numel()
    for _ in range(200):
        fx = fn(x)
        if fx.norm() < tol:
            return x
        eps = 1e-6
        jac = torch.stack([(fn(x + eps * e) - fn(x - eps * e)) / (2 * eps) for e in torch.eye(k, dtype=DTYPE)], 1)
        step = torch.linalg.lstsq(jac, fx[:, None]).solution[:, 0]  # the all-ones direction is a null direction
        x = x - step
    raise RuntimeError(f"no convergence: ||fn|| = {float(fn(x).norm()):.2e}")


class TemperatureToy(ShiftToy):
    """alpha = s = log tau (1,): logits W x / tau, no shift."""

    def logits(self, w: torch.Tensor, alpha: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return (x @ w.reshape(self.k, self.dim).T) / alpha.exp()  # (N, K)

    def alpha_init(self) -> torch.Tensor:
        return torch.zeros(1, dtype=DTYPE)

    def profile(self, log_taus: list[float]) -> list[dict[str, float]]:
        """F(s, W*(s)), the held-out entropy and the effective logit scale ||W*|| / tau, per s."""
        rows = []
        for s in log_taus:
            alpha = torch.tensor([s], dtype=DTYPE)
            w = self.inner_solution(alpha)
            rows.append(
                {
                    "tau": math.exp(s),
                    "F": float(self.upper(w, alpha)),
                    "entropy": -float(self.upper(w, alpha)),
                    "effective_scale": float(w.norm()) / math.exp(s),
                }
            )
        return rows


# --- the project's method steps on a toy --------------------------------------------------


@dataclass
class ToySettings:
    """What the calm and iterate steps read of a TrainConfig: its bilevel section."""

    bilevel: BilevelConfig = field(default_factory=BilevelConfig)


@dataclass
class ToyContext:
    """Stands in for methods.base.StepContext on a toy: alpha and theta as leaf tensors,
    `lower` / `upper` closures over them, a plain-step (SGD) optimizer by default.

    Full-batch by default. With `batch_size` B, each step's L is on B training points
    (and with `heldout_batch_size`, F on that many held-out points), drawn as the real
    trainer draws them (calm_core.training.batches.batch_indices: consecutive slices of a
    per-epoch permutation, a function of (seed, step) alone)."""

    toy: ShiftToy
    lr_alpha: float = 0.5
    lr_theta: float = 0.5
    settings: ToySettings = field(default_factory=ToySettings)
    optimizer_name: str = "sgd"
    state: dict[str, Any] = field(default_factory=dict)
    batch_size: int | None = None
    heldout_batch_size: int | None = None
    seed: int = 0
    steps_done: int = 0

    def __post_init__(self) -> None:
        self.alpha = [self.toy.alpha_init().requires_grad_()]
        self.theta = [self.toy.theta_init().requires_grad_()]
        groups = [{"params": self.theta, "lr": self.lr_theta}, {"params": self.alpha, "lr": self.lr_alpha}]
        self.optimizer = torch.optim.SGD(groups) if self.optimizer_name == "sgd" else torch.optim.Adam(groups)

    def lower(self, items: Sequence[int]) -> Callable[[], torch.Tensor]:
        """L at the current parameters: on the training points `items`, all of S_T when empty."""
        idx = list(items) or None
        return lambda: self.toy.lower(self.theta[0], self.alpha[0], idx)

    def upper(self, items: Sequence[int]) -> Callable[[], torch.Tensor]:
        """F at the current parameters: on the held-out points `items`, all of S_V when empty."""
        idx = list(items) or None
        return lambda: self.toy.upper(self.theta[0], self.alpha[0], idx)

    def batches(self) -> tuple[list[int], list[int]]:
        """This step's training and held-out indices ([] = the whole set)."""
        from calm_core.training.batches import batch_indices

        data = self.toy.data
        train = batch_indices(len(data.y_train), self.batch_size, self.steps_done, self.seed) if self.batch_size else []
        heldout = (
            batch_indices(len(data.x_heldout), self.heldout_batch_size, self.steps_done, self.seed + 1)
            if self.heldout_batch_size
            else []
        )
        return train, heldout

    def step(self, method: Any) -> dict[str, float]:
        """One call of a method module's step (calm, iterate) on this step's batches."""
        train, heldout = self.batches()
        log = method.step(self, train, heldout)
        self.steps_done += 1
        return log

    def run(self, method: Any, steps: int) -> list[dict[str, float]]:
        """`steps` calls of a method module's step (calm, iterate); returns their logs."""
        return [self.step(method) for _ in range(steps)]

    @property
    def alpha_value(self) -> torch.Tensor:
        return self.alpha[0].detach().clone()


def centred(alpha: torch.Tensor) -> torch.Tensor:
    """l minus its mean: softmax ignores a shift common to every class."""
    return alpha - alpha.mean()


def tail_mean(ctx: ToyContext, method: Any, steps: int, tail: int) -> torch.Tensor:
    """Run `steps` steps; the mean centred alpha over the last `tail` (BOME's iterates circle
    its fixed point at a radius set by the step, so their mean is the estimate)."""
    seen = []
    for i in range(steps):
        ctx.step(method)
        if i >= steps - tail:
            seen.append(centred(ctx.alpha_value))
    return torch.stack(seen).mean(0)


# --- a temperature that depends on a feature: the adaptive head on a toy ------------------


def true_temperature(f: torch.Tensor, slope: float = 0.8, offset: float = 0.5) -> torch.Tensor:
    """tau*(f) = softplus(slope f + offset) + floor: the temperature the labels are drawn
    at, in the adaptive head's own family, so that the head can be exactly right and any
    miss is the solver's or the sample's."""
    from calm_core.calibration.posthoc.ats import TAU_FLOOR

    return torch.nn.functional.softplus(slope * f + offset) + TAU_FLOOR


@dataclass
class FeatureToyData(ToyData):
    """ToyData whose rows are (x | h): the input the model reads (D columns) and the state
    the head reads (H columns: f, then noise the head must learn to ignore). The base
    model's weights are the generating ones, so the right temperature for its scores is
    tau*(f) itself: the model ranks well and only its confidence is wrong."""

    w_base: torch.Tensor  # (K, D)
    tau_train: torch.Tensor  # (N,) tau*(f) of S_T
    tau_heldout: torch.Tensor  # (M,) tau*(f) of S_V


def _feature_rows(g: torch.Generator, n: int, dim: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n rows (x | h), x ~ N(0, I_D), h ~ N(0, I_H), and tau*(f) with f = h[:, 0]."""
    rows = torch.randn(n, dim + width, generator=g, dtype=DTYPE)
    return rows, true_temperature(rows[:, dim])


def make_feature_data(
    seed: int = 0, n: int = 4000, m: int = 1000, dim: int = 2, width: int = 2, k: int = 3, scale: float = 2.0
) -> FeatureToyData:
    """Labels y ~ softmax(W* x / tau*(f)). S_V comes from the same distribution: the right
    temperature is a property of the data, so no shift is needed to make it matter. n is
    large because the shape of tau is estimated from labels: with a few hundred rows the
    lower level's own optimum misses it by the sample's noise, which would hide the
    solver's error (docs/bilevel.md)."""
    g = torch.Generator().manual_seed(seed)
    w_true = scale * torch.randn(k, dim, generator=g, dtype=DTYPE)
    x, tau = _feature_rows(g, n, dim, width)
    y = torch.multinomial(torch.softmax(x[:, :dim] @ w_true.T / tau[:, None], -1), 1, generator=g)[:, 0]
    x_val, tau_val = _feature_rows(g, m, dim, width)
    return FeatureToyData(x, y, x_val, w_base=w_true, tau_train=tau, tau_heldout=tau_val)


class AdaptiveTemperatureToy(ShiftToy):
    """alpha = the AdaptiveHead's (w, b), flat (H + 1,); theta = a change of the base
    model's weights, W = W_base + theta, ridge on theta (LoRA starts at B = 0 and is held
    near the base model). The logits are the head's own forward on (W x, h), with the
    projection fitted on S_V's states as a run fits it.

    Under the joint constraint the lower level alone pins alpha down (the labels' likelihood
    identifies tau's shape and, through the ridge on theta, its scale); under the paper's
    it does not, and F(alpha, theta*(alpha)) keeps falling as tau grows, as on TemperatureToy."""

    def __init__(self, data: FeatureToyData | None = None, mu: float = 0.05) -> None:
        from calm_core.calibration.adaptive_head import AdaptiveHead

        self.data: FeatureToyData = data or make_feature_data()
        self.mu = mu
        self.k, self.dim = self.data.w_base.shape
        self.width = self.data.x_train.shape[1] - self.dim
        self.head = AdaptiveHead(self.width, components=self.width).double()
        self.head.fit_projection(self.data.x_heldout[:, self.dim :])

    def _params(self, alpha: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"weights": alpha[: self.width], "bias": alpha[self.width :]}

    def logits(self, w: torch.Tensor, alpha: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        z = x[:, : self.dim] @ (self.data.w_base + w.reshape(self.k, self.dim)).T  # (N, K)
        return torch.func.functional_call(self.head, self._params(alpha), (z, x[:, self.dim :]))

    def alpha_init(self) -> torch.Tensor:
        """The head's own start: w = 0, tau = 1 for every row."""
        return torch.cat([self.head.weights.detach(), self.head.bias.detach()]).to(DTYPE)

    def temperatures(self, alpha: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """tau_alpha(h) of `rows` (default S_V), through the head's forward: 1 / (1 / tau)."""
        rows = self.data.x_heldout if rows is None else rows
        ones = torch.ones(len(rows), 1, dtype=DTYPE)
        with torch.no_grad():
            scaled = torch.func.functional_call(self.head, self._params(alpha), (ones, rows[:, self.dim :]))
        return 1.0 / scaled[:, 0]

    def alpha_star(self) -> torch.Tensor:
        """The head's (w, b) that gives tau*(f) exactly: tau* is in the head's family, so
        softplus^-1(tau* - floor) is affine in the head's input x(h) (least squares on S_V,
        residual ~1e-15)."""
        h = self.data.x_heldout[:, self.dim :].float().to(DTYPE)  # the head reads h in float32
        x = (h - self.head.feature_mean) @ self.head.projection.T
        design = torch.cat([x, torch.ones(len(x), 1, dtype=DTYPE)], 1)
        target = torch.log(torch.expm1(self.data.tau_heldout - self.head.floor))
        return torch.linalg.lstsq(design, target[:, None]).solution[:, 0]

    def joint_solution(self, tol: float = 1e-10) -> tuple[torch.Tensor, torch.Tensor]:
        """(theta, alpha) minimising L jointly, by damped Newton: the joint constraint's
        feasible point, which `calm` with constraint joint should reach."""
        n = self.k * self.dim
        loss = lambda u: self.lower(u[:n], u[n:])  # noqa: E731
        u = torch.cat([self.theta_init(), self.alpha_init()])
        value = float(loss(u))
        for _ in range(100):
            grad = torch.autograd.functional.jacobian(loss, u)
            if grad.norm() < tol:
                return u[:n], u[n:]
            step = torch.linalg.solve(torch.autograd.functional.hessian(loss, u), grad)
            t = 1.0
            while float(loss(u - t * step)) > value and t > 1e-8:
                t /= 2
            u = u - t * step
            value = float(loss(u))
        raise RuntimeError(f"no convergence: ||grad|| = {float(grad.norm()):.2e}")
