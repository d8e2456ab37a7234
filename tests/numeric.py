"""Numeric tolerances derived from the magnitudes involved (issue 13): shared by the tests
that compare two float32 computations of one number whose sums run in another order."""

from __future__ import annotations

import math

import torch

EPS32 = torch.finfo(torch.float32).eps  # 1.19e-7, the spacing of float32 numbers at 1


def float32_noise(magnitude: float, terms: int) -> float:
    """How far two float32 evaluations of one number may lie apart when only the order of
    their sums differs: sqrt(terms) * eps32 * magnitude.

    A float32 sum of n terms is off by at most n u sum|terms| (u = eps32 / 2, one rounding
    per addition); the roundings are independent and of mean zero, so in practice they add
    like a random walk, to about sqrt(n) u sum|terms| (Higham and Mary, "A new approach to
    probabilistic rounding error analysis", SIAM J. Sci. Comput. 2019). Two runs round
    independently, so they differ by up to twice that: sqrt(n) eps32 sum|terms|.

    `magnitude` is sum|terms| of the number's last operation, not the number itself: q =
    L(theta) - L(theta~) is a difference of two losses of about |L| each, so its noise is
    that of |L| + |L~| even where q is a thousand times smaller than L (the flaky run of
    issue 13: q 0.0030094 from two losses near 1.4 came out 2.3e-6 apart, 7 eps32 (|L| +
    |L~|), above the fixed 2e-6 the test then allowed).

    `terms` is the widest sum in the chain that computes the number, which dominates
    sqrt(n): for the tiny model the log-softmax over its 49152-word vocabulary (sqrt 222, a
    relative 2.6e-5). The factor 222 also covers the narrower sums (hidden width 64, the
    batch, the tokens of an option) and an option score (a sum of token log-probabilities,
    tens) being larger than the loss made from it. Seen (two ranks against one, and one
    process on 2 threads against two on 1): the losses and q at most 7 eps32 magnitude, a
    30-fold margin; ||grad F|| 49 eps32 of itself (step 2 of the frozen-prefix case, where
    the items' gradients cancel to a third of the step before), a 4.5-fold margin. A
    relative error of 1e-3 is 38 times the bound wherever the magnitude is the number itself.
    """
    return math.sqrt(terms) * EPS32 * abs(magnitude)
