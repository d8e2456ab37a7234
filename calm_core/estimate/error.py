"""How far the estimate's own figure falls from real runs on this machine: its likely
value and range, learned from the runs it was made for.

    spread = learn_spread(ratios, prior_for(busy, measured_model))   # ratios: actual / figure
    spread.center, spread.low, spread.high                           # multiply the figure
    record = launch_record(estimate)                                 # config.json `estimate`

Why: an estimate summed from part rates and a load factor is a model, and its error on a
shared machine is mostly what the rates cannot see (other processes coming and going,
how the load average counts them, where the calibrated stop ends the run). A range made
by multiplying worst cases (every part at its slowest, under contention) was hundreds of
times wide and said nothing. So every launch records the figure it showed (`launch_record`,
in config.json), and later estimates learn the ratio of real wall time to that figure
from this machine's finished runs: its centre corrects a steady bias, its spread sets the
range. Runs beside other processes are learned apart from idle ones, so the range widens
for load only as far as such runs have actually varied; and estimates made from the
defaults (a model's first runs) apart from those made from learned rates, which err less:
a new model's range is not narrowed by the old one's track record.

Before there are enough runs, the ratios start from a prior (PRIORS) set from what
bench/estimate_accuracy.py measured, worth PRIOR_WEIGHT runs: a few unusual runs move
it, and many replace it. The range is the central COVER share of a log-normal fit,
limited to MAX_WIDTH times from end to end; when the runs have varied more than that,
the limited range is shown and `covered` says how many of them it would have held.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    from calm_core.estimate.rates import PastRun

COVER = 0.9  # the share of runs the range is meant to hold
MAX_WIDTH = 4.0  # the range's high end over its low end, at most
PRIOR_WEIGHT = 3.0  # the prior counts as this many past runs
LEARN_RUNS = 20  # the most recent runs of the same condition (idle or busy) that the spread learns from
CLIP = math.log(8.0)  # a ratio beyond 8x either way counts as 8x (a suspended machine, a sleeping laptop)
RECORD_VERSION = 1


@dataclass(frozen=True)
class ErrorPrior:
    """What the ratio of real wall time to the estimate's figure is before any past run:
    its median (`center`) and the standard deviation of its logarithm (`sigma`)."""

    center: float
    sigma: float


# From bench/estimate_accuracy.py (docs/performance.md). Busy: its runs on a machine shared
# with other jobs at load average 3-5.5 had ratios with a log standard deviation of 0.31
# while learning and 0.37 from the defaults. Idle: narrower; its idle runs on the quiet
# machine fell at 0.94-1.18x their likely figure. A model that is not one of the two
# measured ones (another size, another task's evaluation) starts from the widest range.
PRIORS = {
    (False, True): ErrorPrior(1.0, 0.25),
    (True, True): ErrorPrior(1.0, 0.35),
}
UNMEASURED_SIGMA = math.log(MAX_WIDTH) / (2 * NormalDist().inv_cdf(0.5 + COVER / 2))


def prior_for(busy: bool, measured_model: bool) -> ErrorPrior:
    """The prior for a run on an idle or busy machine, of a measured model or not."""
    prior = PRIORS[(busy, True)]
    return prior if measured_model else ErrorPrior(prior.center, max(prior.sigma, UNMEASURED_SIGMA))


@dataclass(frozen=True)
class Spread:
    """The estimate's figure times `center` is the likely duration, times `low` and `high`
    its range; `runs`: the past runs it learned from (0: the prior alone); `covered`: how
    many of them fall inside it; `limited`: the runs varied more than MAX_WIDTH allows."""

    center: float
    low: float
    high: float
    runs: int
    covered: int
    limited: bool


def learn_spread(ratios: Sequence[float], prior: ErrorPrior, cover: float = COVER) -> Spread:
    """The spread of `ratios` (real wall time / the figure made at launch) shrunk toward
    `prior`: the mean and variance of their logarithms with the prior counted as
    PRIOR_WEIGHT runs, and a prediction interval for the next run holding `cover` of them."""
    logs = [max(-CLIP, min(CLIP, math.log(r))) for r in ratios if r > 0 and math.isfinite(r)]
    n, k = len(logs), PRIOR_WEIGHT
    mu = (k * math.log(prior.center) + sum(logs)) / (k + n)
    variance = (k * prior.sigma**2 + sum((x - mu) ** 2 for x in logs)) / (k + n)
    z = NormalDist().inv_cdf(0.5 + cover / 2)
    half = z * math.sqrt(variance * (1 + 1 / (k + n)))
    limit = math.log(MAX_WIDTH) / 2
    low, high = math.exp(mu - min(half, limit)), math.exp(mu + min(half, limit))
    covered = sum(1 for x in logs if math.log(low) <= x <= math.log(high))
    return Spread(math.exp(mu), low, high, n, covered, half > limit)


def spread_for(runs: Iterable[PastRun], busy: bool, measured_model: bool, learned: bool) -> Spread:
    """The spread learned from the LEARN_RUNS most recent past runs whose launch recorded an
    estimate like this one: on a machine as busy (or idle), from rates as learned (or not)."""
    kind = rates_kind(learned)
    ratios = [ratio for run in runs if (ratio := recorded_ratio(run, busy, kind)) is not None][:LEARN_RUNS]
    return learn_spread(ratios, prior_for(busy, measured_model))


def rates_kind(learned: bool) -> str:
    """How a launch record names where its rates came from."""
    return "learned" if learned else "defaults"


def recorded_ratio(run: PastRun, busy: bool | None = None, rates: str | None = None) -> float | None:
    """A past run's real wall time over the figure recorded at its launch (None without
    both, or when its launch was on a machine of another condition than `busy`, or its
    estimate came from other `rates` than asked)."""
    record = run.record
    if run.wall_s is None or not record or record.get("version") != RECORD_VERSION:
        return None
    figure = record.get("figure_s")
    if not isinstance(figure, (int, float)) or figure <= 0:
        return None
    if busy is not None and bool(record.get("busy")) != busy:
        return None
    if rates is not None and record.get("rates") != rates:
        return None
    return run.wall_s / figure


@dataclass(frozen=True)
class TrackRecord:
    """Of this machine's recent runs with a recorded estimate, how many finished inside the
    range shown at their launch."""

    inside: int
    runs: int


def track_record(runs: Iterable[PastRun], most: int = LEARN_RUNS) -> TrackRecord | None:
    """The `most` most recent runs' record against the range shown at their launch; None
    when no run recorded one."""
    inside = total = 0
    for run in runs:
        record = run.record
        if run.wall_s is None or not record or record.get("version") != RECORD_VERSION:
            continue
        low, high = record.get("low_s"), record.get("high_s")
        if not isinstance(low, (int, float)) or not isinstance(high, (int, float)):
            continue
        total += 1
        inside += low <= run.wall_s <= high
        if total >= most:
            break
    return TrackRecord(inside, total) if total else None
