"""How far the estimate's figure falls from real runs on this machine, learned from the runs
it was made for: the likely value is the figure times their typical ratio, the range where
COVER of them fall.

    spread = learn_spread(ratios, prior_for(busy, measured_model))   # ratios: actual / figure
    spread.center, spread.low, spread.high                           # multiply the figure

Every launch records the figure it showed (config.json `estimate`); a finished run's wall
time over it is one ratio. Runs beside other processes are learned apart from idle ones,
and estimates from the defaults apart from those from learned rates, which err less. Before
there are enough runs the ratios start from a prior (PRIORS, from bench/estimate_accuracy.py;
docs/performance.md) worth PRIOR_WEIGHT runs. The range is the central COVER share of a
log-normal fit, at most MAX_WIDTH from end to end; `covered` says how many runs a range
cut to that width holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Iterable, Sequence

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
    """The ratio of real wall time to the figure before any past run: its median (`center`)
    and the standard deviation of its logarithm (`sigma`)."""

    center: float
    sigma: float


# (busy, measured model) -> prior; busy runs varied more (docs/performance.md, "The Train
# page's time estimate"). A model that was not measured starts from the widest range.
PRIORS = {(False, True): ErrorPrior(1.0, 0.25), (True, True): ErrorPrior(1.0, 0.35)}
UNMEASURED_SIGMA = math.log(MAX_WIDTH) / (2 * NormalDist().inv_cdf(0.5 + COVER / 2))


def prior_for(busy: bool, measured_model: bool) -> ErrorPrior:
    """The prior for a run on an idle or busy machine, of a measured model or not."""
    prior = PRIORS[(busy, True)]
    return prior if measured_model else ErrorPrior(prior.center, max(prior.sigma, UNMEASURED_SIGMA))


@dataclass(frozen=True)
class Spread:
    """The figure times `center` is the likely duration, times `low` and `high` its range;
    `runs`: the past runs learned from (0: the prior alone); `covered`: how many of them fall
    inside; `limited`: they varied more than MAX_WIDTH allows."""

    center: float
    low: float
    high: float
    runs: int
    covered: int
    limited: bool


def learn_spread(ratios: Sequence[float], prior: ErrorPrior, cover: float = COVER) -> Spread:
    """The mean and variance of the ratios' logarithms with `prior` counted as PRIOR_WEIGHT
    runs, and a prediction interval for the next run holding `cover` of them."""
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
    """The spread of the LEARN_RUNS most recent runs whose launch recorded an estimate like
    this one: on a machine as busy (or idle), from rates as learned (or not)."""
    kind = rates_kind(learned)
    ratios = [ratio for run in runs if (ratio := recorded_ratio(run, busy, kind)) is not None][:LEARN_RUNS]
    return learn_spread(ratios, prior_for(busy, measured_model))


def rates_kind(learned: bool) -> str:
    """How a launch record names where its rates came from."""
    return "learned" if learned else "defaults"


def _recorded(run: PastRun) -> tuple[dict[str, Any], float] | None:
    """(launch record, wall seconds) when the run has a record of this version and a wall time."""
    if run.wall_s is None or not run.record or run.record.get("version") != RECORD_VERSION:
        return None
    return run.record, run.wall_s


def recorded_ratio(run: PastRun, busy: bool | None = None, rates: str | None = None) -> float | None:
    """A past run's wall time over the figure recorded at its launch; None without both, or
    when its launch was on a machine of another condition than `busy`, or from other `rates`."""
    record, wall = _recorded(run) or ({}, 0.0)
    figure = record.get("figure_s")
    if not isinstance(figure, (int, float)) or figure <= 0:
        return None
    if (busy is not None and bool(record.get("busy")) != busy) or (rates is not None and record.get("rates") != rates):
        return None
    return wall / figure


@dataclass(frozen=True)
class TrackRecord:
    """Of this machine's recent runs with a recorded estimate, how many finished inside the
    range shown at their launch."""

    inside: int
    runs: int


def track_record(runs: Iterable[PastRun], most: int = LEARN_RUNS) -> TrackRecord | None:
    """The `most` most recent runs against the range shown at their launch; None when no
    run recorded one."""
    judged = [
        (record["low_s"], wall, record["high_s"])
        for record, wall in filter(None, map(_recorded, runs))
        if isinstance(record.get("low_s"), (int, float)) and isinstance(record.get("high_s"), (int, float))
    ][:most]
    return TrackRecord(sum(low <= wall <= high for low, wall, high in judged), len(judged)) if judged else None
