"""The final evaluation's post-hoc fits and the recommendation's cross-fitting as a part of
the time estimate (issue 49: they took 106 s of a final evaluation shown as 31 s, with no
line in "Where the time goes" and a full bar that said nothing): counted in item-fits,
timed by every run, learned as a rate, and told as they go."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from calm_core.calibration.posthoc import for_task
from calm_core.calibration.posthoc.ats import AdaptiveTemperature
from calm_core.calibration.posthoc.base import FIXED_FIT_WORK
from calm_core.calibration.posthoc.temperature import TemperatureScaler
from calm_core.calibration.posthoc.vector import VectorScaler
from calm_core.calibration.recommend import cross_fit_work, cross_fitted, fold_count
from calm_core.estimate.arithmetic import estimate_run
from calm_core.estimate.machine_load import MachineLoad
from calm_core.estimate.rates import DEFAULTS, PastRun, Rates, rates_from
from calm_core.training.config import TrainConfig
from calm_core.training.timings import PhaseTimes, RunSizes, calibrator_work

PLAIN = {"ts": TemperatureScaler, "vs": VectorScaler}
RATES = Rates(startup_s=3.0, load_s=2.0, fill_per_item=0.05, step_per_work=0.05, eval_fixed_s=1.0,
              eval_per_item=0.01, final_per_item=0.02, source="test", cross_fit_per_work=0.002)


def test_cross_fitting_tells_each_calibrator_and_fold_fit_as_it_goes() -> None:
    rng = np.random.default_rng(0)
    logits, gold = rng.normal(size=(30, 4)), rng.integers(0, 4, 30)
    told: list[tuple[int, int]] = []
    fitted, how = cross_fitted(logits, gold, PLAIN, progress=lambda done, total: told.append((done, total)))
    k = fold_count(30)
    assert how.startswith(f"{k}-fold") and set(fitted) == set(PLAIN)
    assert told == [(i, 2 * k) for i in range(2 * k + 1)]  # before each fit, and once at the end


def test_the_work_counts_what_cross_fitting_fits() -> None:
    """ATS is fitted in the folds only where each fold's training part reaches its minimum,
    and each ATS fit is its own cross-fitting over its grid: it dominates."""
    assert cross_fit_work(8, PLAIN) == 0.0  # too few items to fit anything
    assert cross_fit_work(30, PLAIN) == pytest.approx(2 * fold_count(30) * FIXED_FIT_WORK)
    with_ats = {**PLAIN, "ats": AdaptiveTemperature}
    k = fold_count(48)
    assert 48 - -(-48 // k) < AdaptiveTemperature.min_items
    assert cross_fit_work(48, with_ats) == cross_fit_work(48, PLAIN)
    k = fold_count(96)
    ats = k * AdaptiveTemperature.fit_work(96 - -(-96 // k))
    assert cross_fit_work(96, with_ats) == pytest.approx(cross_fit_work(96, PLAIN) + ats)
    assert AdaptiveTemperature.fit_work(96) > 50 * TemperatureScaler.fit_work(96)
    assert cross_fit_work(96, with_ats, features=False) == cross_fit_work(96, PLAIN)


def test_a_run_plans_its_calibrator_work_and_none_without_baselines() -> None:
    cfg = TrainConfig.preset("quick", method="calm")
    classes = {n: c for n, c in for_task("mcqa", defaults_only=False, with_features=True).items() if 96 >= c.min_items}
    expected = sum(c.fit_work(96) for c in classes.values()) + cross_fit_work(96, classes)
    assert calibrator_work(cfg, 200, 96) == pytest.approx(expected)
    pooled = TrainConfig.preset("quick", method="calm", calibrate_on="all")
    assert calibrator_work(pooled, 200, 96) > calibrator_work(cfg, 200, 96)  # fitted on S_T + S_V
    off = TrainConfig.preset("quick", method="calm", eval_baselines=False)
    assert calibrator_work(off, 200, 96) == 0.0


def test_the_estimate_has_a_cross_fitting_part_and_records_what_comes_after_the_steps() -> None:
    sizes = RunSizes(heldout=96, evals=300, probe=64, fill=0, final_variants=3, step_work=20.0, cross_fit=40_000.0)
    cfg = TrainConfig.preset("quick", method="calm", select="last", threads=1)
    estimate = estimate_run(cfg, sizes, RATES, MachineLoad(0.1, 2), selects=True)
    part = estimate.part("cross-fitting")
    assert part.seconds == pytest.approx(40_000 * 0.002) and "40,000 item-fits" in part.detail
    assert estimate.figure == pytest.approx(sum(p.seconds for p in estimate.parts))
    after = estimate.to_record()["after_steps_s"]
    assert after == pytest.approx((part.seconds + estimate.part("final evaluation").seconds) * estimate.spread.center,
                                  abs=1e-3)
    busy = estimate_run(cfg, sizes, RATES, MachineLoad(3.0, 2), selects=True)
    assert busy.part("cross-fitting").seconds == pytest.approx(2 * part.seconds)  # the machine's load counts


def test_a_runs_cross_fitting_time_teaches_its_rate_apart_from_the_final_forwards() -> None:
    sizes = RunSizes(heldout=96, evals=300, probe=64, fill=0, final_variants=3, step_work=20.0, cross_fit=40_000.0)
    times = PhaseTimes(load_average=0.0, cpus=2, sizes=sizes, load_s=3.0, steps=10, steps_s=5.0, final_s=100.0,
                       cross_fit_s=80.0, total_s=150.0)
    assert PhaseTimes.from_dict(times.to_dict()).cross_fit_s == 80.0
    run = PastRun(train={}, timings=times, wall_s=155.0, record=None, threads=1)
    rates = rates_from([run], "past")
    default = DEFAULTS[-1][1]  # one size cannot tell the fixed part from the rest: the defaults' line, scaled
    scale = 80.0 / (default.cross_fit_fixed_s + default.cross_fit_per_work * 40_000)
    assert rates.cross_fit_fixed_s == pytest.approx(default.cross_fit_fixed_s * scale)
    assert rates.cross_fit_per_work == pytest.approx(default.cross_fit_per_work * scale)
    quick = dataclasses.replace(times, cross_fit_s=1.0)  # quicker than the default's fixed part alone
    learned = rates_from([PastRun(train={}, timings=quick, wall_s=155.0, record=None, threads=1)], "past")
    assert learned.cross_fit_per_work > 0  # a larger run still counts its item-fits
    assert rates.final_per_item == pytest.approx(20.0 / sizes.final_items())  # the final evaluation less the fits
    small = dataclasses.replace(times, sizes=dataclasses.replace(sizes, cross_fit=4_000.0), cross_fit_s=12.0)
    both = rates_from([run, PastRun(train={}, timings=small, wall_s=155.0, record=None, threads=1)], "past")
    assert both.cross_fit_per_work == pytest.approx(68.0 / 36_000)  # a line through two sizes
    assert both.cross_fit_fixed_s == pytest.approx(12.0 - 4_000 * 68.0 / 36_000)
    old = times.to_dict()
    del old["cross_fit_s"]  # a record from before the part was timed
    assert PhaseTimes.from_dict(old).cross_fit_s is None
