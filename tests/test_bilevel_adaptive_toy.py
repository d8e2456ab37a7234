"""The adaptive head on a toy whose right temperature depends on a feature
(AdaptiveTemperatureToy, docs/bilevel.md "A temperature that depends on the input").

Labels are drawn at tau*(f) = softplus(0.8 f + 0.5) + 0.05, f one of the two features the
head reads; the base model's weights are the generating ones. With `constraint: joint` the
project's `calm` step reaches the joint lower-level optimum, which is tau* up to the
sample; with the paper's constraint, and with `iterate`, the head loses the shape and its
scale runs upward, because F(alpha, theta*(alpha)) keeps falling as tau grows.
"""

from __future__ import annotations

import math

import pytest
import torch

from bench.bilevel_toy_tables import AdaptiveRun, adaptive_run, temperature_fit
from bench.bilevel_toys import AdaptiveTemperatureToy

# Tolerances (docs/bilevel.md states the same): the solver against the joint optimum, and
# the joint optimum (or the solver) against tau* on S_V, n = 4000 training rows. The
# sample's own miss, the joint optimum's, over seeds 0-2: rel. error <= 0.032, shape error
# <= 0.024, ratio within 12%, scale within 4%; the tolerances cover it, and a head that
# ignored the feature (ratio 1 against 5.1, shape error 0.31) fails each by far.
SOLVER_TOL = 0.03  # median |tau - tau_joint| / tau_joint
REL_ERR_TOL = 0.05  # median |tau - tau*| / tau*
SHAPE_TOL = 0.03  # median |r - mean r|, r = log(tau / tau*): error left after the best scale
RATIO_TOL = 0.15  # |log(ratio / true ratio)|, ratio = tau's high-to-low tenth ratio
SCALE_TOL = 0.05  # |log scale|


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tensors of a few thousand numbers: extra threads only contend."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def toy() -> AdaptiveTemperatureToy:
    return AdaptiveTemperatureToy()


@pytest.fixture(scope="module")
def joint(toy: AdaptiveTemperatureToy) -> tuple[torch.Tensor, torch.Tensor]:
    return toy.joint_solution()


def _recovers(fit: dict[str, float]) -> None:
    assert fit["corr"] > 0.99
    assert fit["rel_err"] < REL_ERR_TOL
    assert fit["shape_err"] < SHAPE_TOL
    assert abs(math.log(fit["ratio"] / fit["true_ratio"])) < RATIO_TOL
    assert abs(math.log(fit["scale"])) < SCALE_TOL


def test_the_head_can_be_exactly_right(toy: AdaptiveTemperatureToy) -> None:
    """tau* is in the head's family: alpha* through the head's own forward gives tau* on
    S_V (to the float32 rounding of h inside the head), so a miss is the solver's or the
    sample's, never the family's. The head starts at tau = 1 for every row."""
    assert torch.allclose(toy.temperatures(toy.alpha_star()), toy.data.tau_heldout, rtol=1e-5)
    assert torch.allclose(
        toy.temperatures(toy.alpha_init()), torch.ones(len(toy.data.tau_heldout), dtype=torch.float64)
    )
    assert temperature_fit(toy, toy.alpha_init())["true_ratio"] > 4.0  # a shape worth recovering


def test_the_joint_lower_level_optimum_is_tau_star_up_to_the_sample(
    toy: AdaptiveTemperatureToy, joint: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """The labels' likelihood identifies tau's shape (the head's noise feature gets no
    weight) and, with the ridge on theta = W - W_base, its scale: joint constraint's
    feasible point."""
    _recovers(temperature_fit(toy, joint[1]))


def test_calm_with_the_joint_constraint_recovers_tau(
    toy: AdaptiveTemperatureToy, joint: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """The project's calm step, constraint joint, lr 0.3 / 0.1, 300 steps from theta = 0 and
    tau = 1: within SOLVER_TOL of the exact joint optimum and within the stated tolerances
    of tau* (the iterates circle the optimum; 0.004-0.02 from 250 to 500 steps)."""
    (fit,) = adaptive_run(toy, AdaptiveRun("", "calm", "joint", 0.3, 0.1, (300,)), joint[1])
    assert fit["to_ref"] < SOLVER_TOL
    _recovers(fit)


@pytest.mark.parametrize("method", ["calm", "iterate"])
def test_the_papers_constraint_loses_the_shape_and_heats_without_bound(
    toy: AdaptiveTemperatureToy, method: str
) -> None:
    """constraint theta (the paper's), and iterate: 100 steps at lr 0.3 / 0.1. The head's
    high-to-low ratio stays near 1 (tau* has 5.1), the scale passes 3x and is still rising,
    and F ends far below F at tau*: the solver does its job, the objective prefers a flat,
    hot forecast to the truth."""
    fits = adaptive_run(toy, AdaptiveRun("", method, "theta", 0.3, 0.1, (30, 100)))
    assert all(f["ratio"] < 1.5 for f in fits)
    assert fits[-1]["scale"] > 3.0 and fits[-1]["scale"] > fits[0]["scale"]
    assert fits[-1]["F"] < toy.value(toy.alpha_star()) - 0.3


def test_the_papers_objective_descends_from_tau_star_by_raising_the_scale(toy: AdaptiveTemperatureToy) -> None:
    """The exact hypergradient of F(alpha, theta*(alpha)) at alpha* (implicit function
    theorem): descent raises the bias b (every temperature) and moves the shape weights
    w far less, so tau* is not a stationary point of the paper's problem."""
    grad = toy.hypergradient(toy.alpha_star())
    assert float(grad[-1]) < 0  # -grad raises b
    assert abs(float(grad[-1])) > 5 * float(grad[:-1].norm())
