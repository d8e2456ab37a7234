"""Property: every interval a result row carries holds its own figure (issue 49).

On Gemma 3 a Compare row read `vs 0.074 [0.078, 0.240]`: a binned ECE resampled is
biased upwards on small sets, so its plain percentile interval lay wholly above the
figure. `result_row` is where every interval shown is made (Compare's evidence, the HTML
report, `calm eval`'s table, `calm train`'s lines all read its `ci90`); here it runs on
random small sets, sharp and flat forecasts, right and wrong, ties and repeats, at both
bin counts, and each declared interval metric must lie inside its interval.

    pytest tests/test_fuzz_intervals.py -q           # the default budget
    pytest tests/test_fuzz_intervals.py -q -m slow   # the long one (minutes)
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from calm_core.calibration.metrics.columns import interval_names
from calm_core.scoring.evaluate import result_row
from calm_core.scoring.options import OptionScores

BUDGETS = [pytest.param(40, id="fast"), pytest.param(400, id="long", marks=pytest.mark.slow)]  # examples per property
# Sets where the plain percentile interval of the ECE lies wholly above it (found by this
# test's generator): a calibrated forecast of 40 and 50 items, as on Gemma 3.
ABOVE_ITS_POINT = (
    {"n": 40, "k": 2, "seed": 3, "scale": 1.0, "accuracy": None, "grid": None},
    {"n": 50, "k": 4, "seed": 5, "scale": 3.0, "accuracy": None, "grid": None},
)

small_sets = st.fixed_dictionaries(
    {
        "n": st.integers(5, 60),
        "k": st.integers(2, 5),
        "seed": st.integers(0, 2**32 - 1),
        "scale": st.sampled_from([0.0, 0.1, 1.0, 3.0, 10.0]),  # uniform, flat, moderate, sharp, near one-hot
        "accuracy": st.none() | st.floats(0.0, 1.0),  # how often the gold is the favourite; None: drawn from p
        "grid": st.sampled_from([None, 1.0]),  # logits rounded: many repeated confidences
    }
)


def _scores(case: dict) -> OptionScores:
    """A random set: logits of `scale`, the gold the top option with probability `accuracy`,
    or drawn from the forecast itself (a calibrated model: the ECE's bias is largest there)."""
    rng = np.random.default_rng(case["seed"])
    n, k = case["n"], case["k"]
    logits = rng.normal(0.0, 1.0, size=(n, k)) * case["scale"]  # (N, K)
    if case["grid"]:
        logits = np.round(logits / case["grid"]) * case["grid"]
    top = logits.argmax(axis=1)
    other = (top + rng.integers(1, k, size=n)) % k  # a wrong option per item
    if case["accuracy"] is None:
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))  # (N, K)
        cumulative = np.cumsum(probs / probs.sum(axis=1, keepdims=True), axis=1)  # (N, K)
        gold = np.minimum((cumulative < rng.random((n, 1))).sum(axis=1), k - 1)
    else:
        gold = np.where(rng.random(n) < case["accuracy"], top, other)
    return OptionScores([f"q{i}" for i in range(n)], logits, gold, {"rule": "cloze"})


def _check(case: dict) -> None:
    """Each declared interval metric of the set's row inside its row's interval, at 15 and 10 bins."""
    scores = _scores(case)
    for n_bins in (15, 10):
        row = result_row(scores, "set", "base", n_bins=n_bins)
        for name in interval_names():
            lo, hi = row["ci90"][name]
            if math.isnan(row[name]):  # AUROC of a set all right or all wrong: no figure, no interval
                assert math.isnan(lo) and math.isnan(hi)
                continue
            assert lo <= row[name] <= hi, (name, n_bins, row[name], lo, hi)


@pytest.mark.parametrize("case", ABOVE_ITS_POINT)
def test_the_ece_of_a_calibrated_small_set_is_inside_its_interval(case: dict) -> None:
    _check(case)


@pytest.mark.parametrize("budget", BUDGETS)
def test_every_interval_of_a_result_row_holds_its_figure(budget: int) -> None:
    run = settings(max_examples=budget, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    check = given(small_sets)(_check)
    for case in ABOVE_ITS_POINT:
        check = example(case)(check)
    run(check)()
