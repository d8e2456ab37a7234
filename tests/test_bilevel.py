"""The BOME step: a quadratic bilevel toy with a closed-form answer, the one-step maths by
hand, gradient reuse against the naive reference, theta restored, config validation.

The toy (vectors a = alpha, theta in R^n, constants b, c > 0):
    lower  L(theta; a) = 1/2 ||theta - a||^2           => theta*(a) = a
    upper  F(a, theta) = 1/2 ||theta - b||^2 + c/2 ||a||^2
    bilevel optimum: min_a F(a, a) = 1/2 ||a - b||^2 + c/2 ||a||^2  =>  a* = theta* = b / (1 + c).
With T inner SGD steps of size r, theta~ - a = rho (theta - a), rho = (1 - r)^T, so with
d = theta - a:  q = (1 - rho^2)/2 ||d||^2,  grad q = (-(1 - rho) d, d),  grad F = (c a, theta - b).
BOME stops where q = 0 (a = theta = x) and grad F is parallel to grad q:
    c x = -(1 - rho)(x - b)  =>  x(rho) = (1 - rho) b / (1 + c - rho).
r = 1 makes rho = 0 (theta~ = theta*(a) exactly), so x = b / (1 + c), the bilevel optimum;
r < 1 leaves the first-order method's bias from an inexact inner solve, smaller for larger T.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from calm_core.calibration.head import CalibrationHead
from calm_core.training.bilevel import (
    BilevelConfig,
    BilevelState,
    bilevel_step,
    plain_step_sizes,
)
from calm_core.training.bilevel_health import coupling_inert
from tests.bilevel_naive import bilevel_step_naive

EPS32 = torch.finfo(torch.float32).eps
LOG_KEYS = {"lower_loss", "upper_loss", "q", "lambda", "grad_f_norm", "grad_q_norm", "inner_loss_drop", "inner_drop_frac",
            "inner_lr", "coupling_ratio", "cos_fq", "descent", "descent_ratio", "step_scale", "step_time"}


class Quadratic:
    """The toy above, with alpha = a and theta as leaf tensors."""

    def __init__(self, a: list[float], theta: list[float], b: list[float], c: float) -> None:
        self.a = torch.tensor(a, requires_grad=True)
        self.theta = torch.tensor(theta, requires_grad=True)
        self.b, self.c = torch.tensor(b), c

    def lower(self) -> torch.Tensor:
        return 0.5 * ((self.theta - self.a) ** 2).sum()

    def upper(self) -> torch.Tensor:
        return 0.5 * ((self.theta - self.b) ** 2).sum() + 0.5 * self.c * (self.a ** 2).sum()

    def sgd(self, lr_a: float, lr_theta: float) -> torch.optim.SGD:
        return torch.optim.SGD([{"params": [self.a], "lr": lr_a}, {"params": [self.theta], "lr": lr_theta}])

    def step(self, opt: torch.optim.Optimizer, cfg: BilevelConfig) -> dict[str, float]:
        return bilevel_step([self.a], [self.theta], self.lower, self.upper, opt, cfg)


def _fixed_point(b: torch.Tensor, c: float, rho: float) -> torch.Tensor:
    return (1 - rho) * b / (1 + c - rho)


@pytest.mark.parametrize("phi", ["grad", "value"])
@pytest.mark.parametrize("inner_steps", [1, 3])
def test_quadratic_converges_to_bilevel_optimum(inner_steps: int, phi: str) -> None:
    toy = Quadratic([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], b=[1.0, -2.0, 0.5], c=1.0)
    opt, cfg = toy.sgd(0.3, 0.3), BilevelConfig(inner_steps=inner_steps, inner_lr=1.0, inner_rule="fixed", eta=0.5, phi=phi)
    for _ in range(100):
        log = toy.step(opt, cfg)
    optimum = toy.b / (1 + toy.c)  # [0.5, -1, 0.25]
    torch.testing.assert_close(toy.a.detach(), optimum, atol=1e-3, rtol=0)
    torch.testing.assert_close(toy.theta.detach(), optimum, atol=1e-3, rtol=0)
    assert log["q"] < 1e-6


@pytest.mark.parametrize("phi", ["grad", "value"])
@pytest.mark.parametrize("inner_steps", [1, 3])
def test_quadratic_inexact_inner_solve_reaches_first_order_fixed_point(inner_steps: int, phi: str) -> None:
    """r = 1/2: rho = 1/2 (T = 1) or 1/8 (T = 3), x = 0.5 or 0.7 where the optimum is 0.75.
    Discrete BOME hovers around x within O(lr), so the last 100 iterates are averaged."""
    toy = Quadratic([0.0], [0.0], b=[1.5], c=1.0)
    opt, cfg = toy.sgd(0.05, 0.05), BilevelConfig(inner_steps=inner_steps, inner_lr=0.5, inner_rule="fixed", eta=0.5, phi=phi)
    tail = []
    for i in range(200):
        toy.step(opt, cfg)
        if i >= 100:
            tail.append(torch.cat([toy.a, toy.theta]).detach())  # (2,)
    x = _fixed_point(toy.b, toy.c, rho=0.5 ** inner_steps)
    torch.testing.assert_close(torch.stack(tail).mean(0), x.expand(2), atol=0.02, rtol=0)


@pytest.mark.parametrize("phi", ["grad", "value"])
def test_one_step_matches_hand_computation(phi: str) -> None:
    """Separate step sizes (lr_a 0.1, lr_theta 0.2) are the metric w = (0.5, 1): lambda and
    phi are computed with <a, b>_w, so that <-delta, grad q> = 0.2 (<grad F, grad q>_w +
    lambda ||grad q||_w^2) >= 0.2 phi (BOME's guarantee, descent_ratio >= 1)."""
    a0, th0, b, c, r, T, eta = [0.5, -1.0], [2.0, 1.0], [3.0, 3.0], 0.5, 0.25, 2, 0.5
    lr_a, lr_th = 0.1, 0.2
    w_a, w_th = lr_a / lr_th, 1.0
    toy = Quadratic(a0, th0, b, c)
    log = toy.step(toy.sgd(lr_a, lr_th), BilevelConfig(inner_steps=T, inner_lr=r, inner_rule="fixed", eta=eta, phi=phi))
    d = [t - a for t, a in zip(th0, a0)]  # [1.5, 2]
    dd, rho = sum(x * x for x in d), (1 - r) ** T  # 6.25, 0.5625
    q = 0.5 * (1 - rho ** 2) * dd
    gq_a, gq_th = [-(1 - rho) * x for x in d], d
    gf_a, gf_th = [c * a for a in a0], [t - bb for t, bb in zip(th0, b)]
    qq_w = w_a * (1 - rho) ** 2 * dd + w_th * dd
    dot_w = w_a * sum(f * g for f, g in zip(gf_a, gq_a)) + w_th * sum(f * g for f, g in zip(gf_th, gq_th))
    phi_value = eta * (qq_w if phi == "grad" else q)
    lam = max(phi_value - dot_w, 0.0) / qq_w
    assert lam > 0  # the constraint is active here, so the lambda branch is exercised
    new_a = [a - lr_a * (f + lam * g) for a, f, g in zip(a0, gf_a, gq_a)]
    new_th = [t - lr_th * (f + lam * g) for t, f, g in zip(th0, gf_th, gq_th)]
    descent = -sum((n - o) * g for n, o, g in zip(new_a + new_th, a0 + th0, gq_a + gq_th))
    expected = {"lower_loss": 0.5 * dd, "q": q, "inner_loss_drop": q, "inner_drop_frac": q / (0.5 * dd),
                "lambda": lam, "inner_lr": r,
                "upper_loss": 0.5 * sum(x * x for x in gf_th) + 0.5 * c * sum(a * a for a in a0),
                "grad_f_norm": math.sqrt(sum(x * x for x in gf_a + gf_th)),
                "grad_q_norm": math.sqrt((1 - rho) ** 2 * dd + dd),
                "coupling_ratio": math.sqrt((1 - rho) ** 2 * dd) / math.sqrt(sum(x * x for x in gf_a)),
                "descent": descent, "descent_ratio": descent / (lr_th * phi_value)}
    assert set(log) == LOG_KEYS and log["step_time"] > 0
    # descent = <u, grad q> before minus after the step, from float32 parameters: each new
    # coordinate u' is rounded to float32 (half an eps32 of itself) and its step computed in
    # float32 (a few half eps32 of the step), so descent is off by up to eps32 sum (|u'| +
    # |step|) |grad q|: 1.1e-6 of it here (phi grad), 3.5e-6 (phi value: a smaller step
    # between the same parameters), where rel=1e-6 alone would be below that rounding
    rounding = EPS32 * sum((abs(n) + abs(n - o)) * abs(g) for n, o, g in zip(new_a + new_th, a0 + th0, gq_a + gq_th))
    tolerance = {"descent": rounding, "descent_ratio": rounding / (lr_th * phi_value)}
    for key, value in expected.items():
        assert log[key] == pytest.approx(value, rel=1e-6, abs=tolerance.get(key, 0.0)), key
    assert log["descent_ratio"] >= 1 - 1e-5  # float32 parameters; BOME's guarantee, in the metric of the step
    assert toy.a.tolist() == pytest.approx(new_a, rel=1e-6)
    assert toy.theta.tolist() == pytest.approx(new_th, rel=1e-6)


def test_lambda_zero_when_upper_agrees_with_lower() -> None:
    """F = 2 L: <grad F, grad q> = 2(1 - rho)||d||^2 + 2||d||^2 > eta ||grad q||^2, so the
    constraint is not active and the step is plain grad F."""
    toy = Quadratic([0.5, -1.0], [2.0, 1.0], b=[0.0, 0.0], c=0.0)
    toy.upper = lambda: 2 * toy.lower()  # type: ignore[method-assign]
    log = toy.step(toy.sgd(0.1, 0.1), BilevelConfig(inner_steps=1, inner_lr=0.5, inner_rule="fixed"))
    assert log["lambda"] == 0.0 and log["q"] > 0
    d = torch.tensor([1.5, 2.0])
    torch.testing.assert_close(toy.a.detach(), torch.tensor([0.5, -1.0]) - 0.1 * (-2 * d))
    torch.testing.assert_close(toy.theta.detach(), torch.tensor([2.0, 1.0]) - 0.1 * (2 * d))


def test_zero_grad_q_gives_zero_lambda() -> None:
    toy = Quadratic([1.0, 2.0], [1.0, 2.0], b=[0.0, 0.0], c=1.0)  # theta = theta*(a): q = 0, grad q = 0
    log = toy.step(toy.sgd(0.1, 0.1), BilevelConfig())
    assert log["lambda"] == 0.0 and log["q"] == 0.0 and log["grad_q_norm"] == 0.0
    assert all(math.isfinite(v) for v in log.values())
    torch.testing.assert_close(toy.a.detach(), torch.tensor([0.9, 1.8]))  # a - 0.1 * c a


class SoftmaxProblem:
    """Linear option scorer (theta) + options-scope CalibrationHead (alpha) on ragged toy data."""

    def __init__(self, seed: int = 0, n: int = 6, dim: int = 5, k: int = 4) -> None:
        g = torch.Generator().manual_seed(seed)
        self.head = CalibrationHead("options", k)
        with torch.no_grad():
            self.head.log_temperature.copy_(0.3 * torch.randn(k, generator=g))
            self.head.shift.copy_(0.3 * torch.randn(k, generator=g))
        self.linear = torch.nn.Linear(dim, k)
        with torch.no_grad():
            for p in self.linear.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
        self.x_tr, self.x_val = torch.randn(n, dim, generator=g), torch.randn(n, dim, generator=g)  # (N, D)
        self.y_tr = torch.randint(0, 2, (n,), generator=g)  # (N,), gold within every item's options
        self.pad = torch.zeros(n, k, dtype=torch.bool)
        self.pad[::2, 2:] = True  # every other item has only 2 options
        self.calls: list[bool] = []  # theta's requires_grad at each lower-loss call

    def _scores(self, x: torch.Tensor) -> torch.Tensor:
        z = self.linear(x)  # (N, K)
        return self.head(z.masked_fill(self.pad, -math.inf))  # (N, K), -inf padding

    def lower(self) -> torch.Tensor:
        self.calls.append(self.linear.weight.requires_grad)
        return torch.nn.functional.cross_entropy(self._scores(self.x_tr), self.y_tr)

    def upper(self) -> torch.Tensor:
        logp = torch.log_softmax(self._scores(self.x_val), dim=-1)  # (N, K)
        logp = torch.where(self.pad, torch.zeros_like(logp), logp)  # 0 log 0 = 0 without nan gradients
        return (logp.exp() * logp).sum(-1).mean()  # minus mean entropy

    @property
    def alpha(self) -> list[torch.Tensor]:
        return list(self.head.parameters())

    @property
    def theta(self) -> list[torch.Tensor]:
        return list(self.linear.parameters())


@pytest.mark.parametrize("inner_steps", [1, 3])
def test_gradient_reuse_matches_naive(inner_steps: int) -> None:
    reuse, naive = SoftmaxProblem(), SoftmaxProblem()
    cfg = BilevelConfig(inner_steps=inner_steps, inner_lr=0.5, eta=0.5)
    opts = [torch.optim.SGD([{"params": p.alpha, "lr": 0.1}, {"params": p.theta, "lr": 0.05}]) for p in (reuse, naive)]
    for _ in range(3):
        log_r = bilevel_step(reuse.alpha, reuse.theta, reuse.lower, reuse.upper, opts[0], cfg)
        log_n = bilevel_step_naive(naive.alpha, naive.theta, naive.lower, naive.upper, opts[1], cfg)
        log_r.pop("step_time"), log_n.pop("step_time")
        assert log_r == pytest.approx(log_n, rel=1e-6, abs=1e-7)
        assert log_r["lambda"] > 0 and log_r["q"] > 0  # both gradient blocks matter
    for p, p_naive in zip(reuse.alpha + reuse.theta, naive.alpha + naive.theta):
        assert torch.isfinite(p).all()
        torch.testing.assert_close(p, p_naive, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("inner_steps", [1, 3])
def test_reuse_saves_closure_calls_and_the_graph_at_theta_tilde(inner_steps: int) -> None:
    """Reuse: L at theta once (full backward), T - 1 inner backwards, one alpha-only call at
    theta~ with theta's requires_grad off. Naive: 3 + T + 1 calls, all tracking theta."""
    reuse, naive = SoftmaxProblem(), SoftmaxProblem()
    cfg = BilevelConfig(inner_steps=inner_steps, inner_lr=0.5)
    bilevel_step(reuse.alpha, reuse.theta, reuse.lower, reuse.upper, torch.optim.SGD(reuse.alpha + reuse.theta), cfg)
    bilevel_step_naive(naive.alpha, naive.theta, naive.lower, naive.upper, torch.optim.SGD(naive.alpha + naive.theta), cfg)
    assert reuse.calls == [True] * inner_steps + [False]
    assert naive.calls == [True] * (inner_steps + 4)
    assert all(p.requires_grad for p in reuse.theta)


class RecordingOptimizer:
    """Stands in for a torch optimizer: records parameter values and .grad at step()."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params, self.seen, self.grads = params, [], []

    def step(self) -> None:
        self.seen = [p.detach().clone() for p in self.params]
        self.grads = [p.grad.clone() for p in self.params]


@pytest.mark.parametrize("step", [bilevel_step, bilevel_step_naive])
def test_theta_is_only_changed_by_the_optimizer(step: Callable[..., dict[str, float]]) -> None:
    prob = SoftmaxProblem()
    before = [p.detach().clone() for p in prob.alpha + prob.theta]
    pointers = [p.data_ptr() for p in prob.theta]
    opt = RecordingOptimizer(prob.alpha + prob.theta)
    step(prob.alpha, prob.theta, prob.lower, prob.upper, opt, BilevelConfig(inner_steps=2, inner_lr=0.5))
    for p, b, seen, g in zip(prob.alpha + prob.theta, before, opt.seen, opt.grads):
        assert torch.equal(seen, b) and torch.equal(p.detach(), b)  # untouched before and after step()
        assert g.shape == p.shape and torch.isfinite(g).all() and g.abs().sum() > 0
    assert [p.data_ptr() for p in prob.theta] == pointers
    assert all(p.requires_grad for p in prob.theta)


@pytest.mark.parametrize("inner_steps", [1, 2])
def test_theta_restored_when_a_closure_raises_at_theta_tilde(inner_steps: int) -> None:
    """Call 2 is at theta~: the inner step's backward (T = 2) or the alpha-only one (T = 1)."""
    prob = SoftmaxProblem()
    before = [p.detach().clone() for p in prob.theta]
    pointers = [p.data_ptr() for p in prob.theta]
    lower = prob.lower

    def failing_lower() -> torch.Tensor:
        if len(prob.calls) == 1:
            assert not torch.equal(prob.linear.weight.detach(), before[0])  # really at theta~
            raise RuntimeError("out of memory at theta~")
        return lower()

    with pytest.raises(RuntimeError, match="theta~"):
        bilevel_step(prob.alpha, prob.theta, failing_lower, prob.upper, torch.optim.SGD(prob.theta),
                     BilevelConfig(inner_steps=inner_steps, inner_lr=0.5))
    assert all(torch.equal(p.detach(), b) for p, b in zip(prob.theta, before))
    assert [p.data_ptr() for p in prob.theta] == pointers
    assert all(p.requires_grad for p in prob.theta)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"inner_steps": 0}, "Expected `inner_steps` to be an integer between 1 and 100, but got 0"),
    ({"inner_steps": 1.5}, "Expected `inner_steps` to be an integer between 1 and 100, but got 1.5"),
    ({"inner_steps": True}, "Expected `inner_steps` to be an integer between 1 and 100, but got True"),
    ({"inner_lr": 0.0}, "Expected `inner_lr` to be a number between 0.0001 and 100, but got 0.0"),
    ({"inner_lr": math.inf}, "Expected `inner_lr` to be a number between 0.0001 and 100, but got inf"),
    ({"eta": -0.5}, "Expected `eta` to be a number between 0.01 and 100, but got -0.5"),
    ({"eta": math.nan}, "Expected `eta` to be a number between 0.01 and 100, but got nan"),
    ({"phi": "norm"}, "Expected `phi` to be one of ['grad', 'value'], but got 'norm'"),
    ({"inner_rule": "adam"}, "Expected `inner_rule` to be one of ['fixed', 'polyak'], but got 'adam'"),
    ({"inner_start": "last"}, "Expected `inner_start` to be one of ['theta', 'persistent'], but got 'last'"),
    ({"inner_steps": 101}, "Expected `inner_steps` to be an integer between 1 and 100, but got 101"),  # max: enforced
    ({"max_update_norm": -1.0}, "Expected `max_update_norm` to be a number between 0 and 1000000, but got -1.0"),
])
def test_config_validation_names_the_field(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as err:
        BilevelConfig(**kwargs)  # type: ignore[arg-type]
    assert str(err.value) == message


def test_config_defaults_are_the_papers_T_with_a_scale_free_inner_step() -> None:
    cfg = BilevelConfig()
    assert (cfg.inner_steps, cfg.inner_rule, cfg.inner_start, cfg.eta, cfg.phi) == (10, "polyak", "theta", 0.5, "grad")


def test_parameter_lists_checked() -> None:
    toy = Quadratic([0.0], [1.0], b=[0.0], c=1.0)
    opt = toy.sgd(0.1, 0.1)
    with pytest.raises(ValueError, match="disjoint"):
        bilevel_step([toy.a], [toy.a, toy.theta], toy.lower, toy.upper, opt, BilevelConfig())
    with pytest.raises(ValueError, match="non-empty"):
        bilevel_step([toy.a], [], toy.lower, toy.upper, opt, BilevelConfig())
    assert toy.a.item() == 0.0 and toy.theta.item() == 1.0


def test_polyak_inner_step_is_loss_over_squared_gradient_capped() -> None:
    """Quadratic: L = 1/2 ||d||^2, grad = d, so Polyak's step L / ||g||^2 is 1/2 whatever
    the scale of d; the cap wins when it is smaller."""
    for scale in (1e-3, 1.0, 1e3):
        toy = Quadratic([0.0, 0.0], [scale, -2 * scale], b=[0.0, 0.0], c=1.0)
        log = toy.step(toy.sgd(1e-3, 1e-3), BilevelConfig(inner_steps=1, inner_lr=3.0))
        assert log["inner_lr"] == pytest.approx(0.5)
        assert log["inner_drop_frac"] == pytest.approx(0.75)  # (1 - (1 - 1/2)^2)
    toy = Quadratic([0.0], [1.0], b=[0.0], c=1.0)
    assert toy.step(toy.sgd(1e-3, 1e-3), BilevelConfig(inner_steps=1, inner_lr=0.2))["inner_lr"] == pytest.approx(0.2)


@pytest.mark.parametrize("inner_steps", [1, 4])
def test_an_overshooting_inner_step_is_undone(inner_steps: int) -> None:
    """A fixed step of 5 on L = 1/2 ||d||^2 multiplies d by -4: L grows 16x. The inner solve
    halves the step until L falls, and theta~ never ends above theta: q >= 0."""
    toy = Quadratic([0.0, 0.0], [1.0, 2.0], b=[0.0, 0.0], c=1.0)
    log = toy.step(toy.sgd(1e-3, 1e-3), BilevelConfig(inner_steps=inner_steps, inner_lr=5.0, inner_rule="fixed"))
    assert log["q"] >= 0.0
    if inner_steps > 1:
        assert log["inner_drop_frac"] > 0.5 and log["inner_lr"] < 5.0


def test_persistent_inner_iterate_continues_from_the_last_theta_tilde() -> None:
    """inner_start=persistent: theta~ is kept in the state and the next inner solve starts
    there; after one step from theta with r = 1/2, theta~ = (theta + a) / 2 on the quadratic."""
    toy = Quadratic([0.0], [2.0], b=[0.0], c=1.0)
    state = BilevelState()
    cfg = BilevelConfig(inner_steps=1, inner_lr=0.5, inner_rule="fixed", inner_start="persistent")
    toy.step_with = lambda: bilevel_step([toy.a], [toy.theta], toy.lower, toy.upper, toy.sgd(1e-6, 1e-6), cfg, state)
    toy.step_with()
    assert state.tilde is not None and state.tilde[0].item() == pytest.approx(1.0)
    toy.step_with()  # starts at 1.0, one step toward a ~ 0: 0.5
    assert state.tilde[0].item() == pytest.approx(0.5, abs=1e-5)
    restored = BilevelState()
    restored.load(state.tensors())
    torch.testing.assert_close(restored.tilde[0], state.tilde[0])
    fresh = BilevelState()
    bilevel_step([toy.a], [toy.theta], toy.lower, toy.upper, toy.sgd(1e-6, 1e-6),
                 BilevelConfig(inner_steps=1, inner_lr=0.5, inner_rule="fixed"), fresh)
    assert fresh.tilde is None  # BOME's own start keeps nothing between steps


def test_descent_guarantee_holds_for_a_plain_step_and_is_not_claimed_for_adam() -> None:
    """<-delta, grad q> >= xi phi for SGD with separate step sizes on the softmax problem;
    under Adam the ratio is not logged, since the guarantee does not hold there."""
    prob = SoftmaxProblem()
    opt = torch.optim.SGD([{"params": prob.alpha, "lr": 0.3}, {"params": prob.theta, "lr": 0.05}])
    cfg = BilevelConfig(inner_steps=3, inner_lr=0.5)
    for _ in range(5):
        log = bilevel_step(prob.alpha, prob.theta, prob.lower, prob.upper, opt, cfg)
        assert log["descent_ratio"] >= 1 - 1e-5 and log["descent"] > 0
    adam = SoftmaxProblem()
    log = bilevel_step(adam.alpha, adam.theta, adam.lower, adam.upper, torch.optim.Adam(adam.alpha + adam.theta), cfg)
    assert "descent_ratio" not in log and "descent" in log
    momentum = SoftmaxProblem()
    opt = torch.optim.SGD(momentum.alpha + momentum.theta, lr=0.1, momentum=0.9)
    assert plain_step_sizes(opt, momentum.alpha + momentum.theta) is None


def test_coupling_inert_flags_a_log_where_the_constraint_never_acts() -> None:
    inert = [{"bome/inner_drop_frac": 1e-4, "bome/lambda": 0.5 + 1e-3, "bome/coupling_ratio": 1e-3}] * 5
    assert coupling_inert(inert, eta=0.5)
    acting = inert[:4] + [{"bome/inner_drop_frac": 0.4, "bome/lambda": 1.3, "bome/coupling_ratio": 0.6}]
    assert not coupling_inert(acting, eta=0.5)
    assert not coupling_inert([{"train/lower_loss": 1.0}], eta=0.5)  # no BOME log (sft): not judged


def test_a_long_plain_step_is_cut_to_the_trust_region_with_its_direction_and_guarantee() -> None:
    """Gradients 1e3 times larger: the update is cut to max_update_norm, parallel to the
    uncut one, and still decreases q at first order by scale * xi * phi."""
    big = Quadratic([0.0, 0.0], [1e3, -2e3], b=[0.0, 0.0], c=1.0)
    cfg = BilevelConfig(inner_steps=2, inner_lr=0.5, inner_rule="fixed", max_update_norm=0.5)
    before = torch.cat([big.a, big.theta]).detach().clone()
    log = big.step(big.sgd(0.1, 0.2), cfg)
    delta = torch.cat([big.a, big.theta]).detach() - before
    assert delta.norm().item() == pytest.approx(0.5, rel=1e-3) and log["step_scale"] < 1  # float32 at 1e3
    assert log["descent_ratio"] >= 1 - 1e-5
    free = Quadratic([0.0, 0.0], [1e3, -2e3], b=[0.0, 0.0], c=1.0)
    free.step(free.sgd(0.1, 0.2), BilevelConfig(inner_steps=2, inner_lr=0.5, inner_rule="fixed", max_update_norm=0))
    uncut = torch.cat([free.a, free.theta]).detach() - before
    torch.testing.assert_close(delta / delta.norm(), uncut / uncut.norm(), rtol=1e-3, atol=1e-3)
    small = Quadratic([0.0], [0.1], b=[0.0], c=1.0)
    assert small.step(small.sgd(0.1, 0.1), cfg)["step_scale"] == 1.0  # inside the region: untouched


class NoDataParameter(torch.nn.Parameter):
    """A parameter whose `.data` may be neither read nor assigned: what a wrapper that keeps
    the values elsewhere (FSDP's shards, DeepSpeed ZeRO-3's partitions) makes of a swap."""

    @property
    def data(self) -> torch.Tensor:
        raise AssertionError("the step read .data")

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        raise AssertionError("the step assigned .data")


@pytest.mark.parametrize("step", [bilevel_step, bilevel_step_naive])
@pytest.mark.parametrize("constraint", ["theta", "joint"])
def test_the_step_never_touches_data(step: Callable[..., dict[str, float]], constraint: str) -> None:
    """The same step on parameters that refuse `.data` and on plain ones: identical logs and
    updates, so theta~ reaches the closures without a `.data` swap (substitution.at)."""
    plain, guarded = SoftmaxProblem(), SoftmaxProblem()
    guarded.linear.weight = NoDataParameter(guarded.linear.weight.detach().clone())
    guarded.linear.bias = NoDataParameter(guarded.linear.bias.detach().clone())
    cfg = BilevelConfig(inner_steps=3, inner_lr=0.5, constraint=constraint)
    logs = []
    for prob in (plain, guarded):
        opt = torch.optim.SGD([{"params": prob.alpha, "lr": 0.1}, {"params": prob.theta, "lr": 0.05}])
        log = step(prob.alpha, prob.theta, prob.lower, prob.upper, opt, cfg)
        log.pop("step_time")
        logs.append(log)
    assert logs[0] == logs[1] and logs[0]["q"] > 0  # q > 0: theta~ is not theta
    for p, g in zip(plain.alpha + plain.theta, guarded.alpha + guarded.theta):
        assert torch.equal(p.detach(), g.detach())


def test_at_evaluates_a_lora_model_at_other_weights(tiny_model_dir) -> None:
    """`at` on a PEFT LoRA model gives the logits of a copy whose LoRA weights hold the values,
    and leaves the model's own weights and requires_grad as they were."""
    import copy

    from calm_core.scoring.adapters import LoraSettings, attach_lora, lora_parameters
    from calm_core.scoring.models import ModelSpec, load_model
    from calm_core.training.substitution import at

    model, _ = attach_lora(load_model(ModelSpec(name=str(tiny_model_dir), device="cpu")).model, LoraSettings(r=4))
    theta = lora_parameters(model)
    before = [p.detach().clone() for p in theta]
    values = [torch.randn_like(p) * 0.1 for p in theta]
    copied = copy.deepcopy(model)
    with torch.no_grad():
        for p, v in zip(lora_parameters(copied), values):
            p.copy_(v)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with at(theta, values) as leaves:
        substituted = model(input_ids=ids).logits
        grads = torch.autograd.grad(substituted.sum(), leaves)
    expected = copied(input_ids=ids).logits
    torch.testing.assert_close(substituted, expected, rtol=0, atol=0)
    assert not torch.equal(substituted, model(input_ids=ids).logits)  # the values mattered
    assert all(g.abs().sum() > 0 for g in grads)  # gradients with respect to the values, through the model
    assert all(torch.equal(p.detach(), b) and p.requires_grad for p, b in zip(theta, before))
