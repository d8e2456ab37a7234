"""A run's time as a sum of parts, each an idle-machine rate times the count that drives it,
scaled by the machine's load, then corrected by the estimate's learned error.

    estimate = estimate_run(cfg, sizes, rates, machine, selects=True)
    estimate.likely, estimate.low, estimate.high    # seconds: figure x spread.center, .low, .high
    estimate.early                                  # the likely time if the calibrated stop ends it first

The calibrated stop ends a run at a step nobody knows in advance: the figure counts the
steps and evaluations up to `likely_steps`, the geometric mean of the earliest step it
can stop at and the last one, which keeps the figure within the same factor of both.
Pure: no file, clock or dataset is read here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from calm_core.estimate.error import RECORD_VERSION, Spread, TrackRecord, learn_spread, prior_for, rates_kind
from calm_core.estimate.machine_load import MachineLoad
from calm_core.estimate.rates import Rates
from calm_core.training.config import TrainConfig
from calm_core.training.timings import RunSizes


@dataclass(frozen=True)
class Part:
    """One part of a run: its seconds at the machine's load, before the learned correction,
    and what it counts."""

    name: str
    seconds: float
    detail: str


@dataclass(frozen=True)
class Estimate:
    """A run's parts and the error learned for figures like theirs: `likely` leads, `low`
    and `high` bound it, `early` is the run ended at its earliest calibrated stop."""

    parts: tuple[Part, ...]
    machine: MachineLoad
    threads: int  # the job's torch threads (TrainConfig.job_threads)
    source: str  # where the rates come from, in words
    rates_learned: bool
    steps: int
    earliest_stop: int  # = steps when the run cannot stop early
    likely_steps: int
    spread: Spread
    track: TrackRecord | None
    early_figure: float  # the parts' sum if the run ends at `earliest_stop`

    @property
    def figure(self) -> float:
        """The parts' sum: what the learned error is measured against."""
        return sum(p.seconds for p in self.parts)

    @property
    def likely(self) -> float:
        return self.figure * self.spread.center

    @property
    def low(self) -> float:
        return self.figure * self.spread.low

    @property
    def high(self) -> float:
        return self.figure * self.spread.high

    @property
    def early(self) -> float:
        return self.early_figure * self.spread.center

    def part(self, name: str) -> Part:
        return next(p for p in self.parts if p.name == name)

    def steps_note(self) -> str:
        """The step count is an upper bound: say so, and how early the run can end."""
        if self.earliest_stop >= self.steps:
            return f"all {self.steps} steps"
        return (
            f"about {self.likely_steps} of up to {self.steps} steps: the calibrated stop ends the run at a step "
            f"it cannot know in advance, from step {self.earliest_stop} on"
        )

    def to_record(self) -> dict[str, object]:
        """config.json's `estimate`: what the launch showed, so that later estimates learn
        their error from it (error.recorded_ratio) against `figure_s`, the uncorrected sum;
        `after_steps_s`: the likely final evaluation and cross-fitting, which the Monitor adds
        to the steps left at the run's own pace (estimate/remaining.py)."""
        return {
            "version": RECORD_VERSION,
            "figure_s": round(self.figure, 3),
            "likely_s": round(self.likely, 3),
            "low_s": round(self.low, 3),
            "high_s": round(self.high, 3),
            **self.machine.to_record(),
            "threads": self.threads,
            "busy": self.machine.busy,
            "rates": rates_kind(self.rates_learned),
            "spread_runs": self.spread.runs,
            "after_steps_s": round(sum(self.part(name).seconds for name in AFTER_STEPS) * self.spread.center, 3),
        }


def earliest_stop(cfg: TrainConfig, selects: bool) -> int:
    """The first step the calibrated stop can end a run at: step 0 is selected, then
    `select_patience` evaluations pass without a better step (selection.Selector)."""
    if not selects or cfg.select != "best" or not cfg.select_patience:
        return cfg.steps
    evaluated = cfg.eval_schedule.steps_evaluated()
    return evaluated[cfg.select_patience - 1] if len(evaluated) >= cfg.select_patience else cfg.steps


def likely_steps(cfg: TrainConfig, selects: bool) -> int:
    """All the steps without an early stop, else the geometric mean of the earliest and the last."""
    first = earliest_stop(cfg, selects)
    return cfg.steps if first >= cfg.steps else max(first, round(math.sqrt(first * cfg.steps)))


def evaluations(cfg: TrainConfig, sizes: RunSizes, rates: Rates, selects: bool, until: int) -> tuple[int, float]:
    """(count, idle seconds) of the evaluations up to step `until`; step 0's when the run selects."""
    schedule = cfg.eval_schedule
    kinds = (["full"] if selects else []) + [k for s in range(1, until + 1) if (k := schedule.kind(s))]
    return len(kinds), sum(rates.eval_fixed_s + rates.eval_per_item * sizes.evaluation_items(k) for k in kinds)


def idle_seconds(cfg: TrainConfig, sizes: RunSizes, rates: Rates, selects: bool, until: int) -> float:
    """A run ending at step `until`, on an idle machine: every part summed."""
    r, z = rates, sizes
    fixed = r.startup_s + r.load_s + r.fill_per_item * z.fill + r.final_per_item * z.final_items()
    fixed += cross_fit_seconds(r, z)
    return fixed + r.step_per_work * z.step_work * until + evaluations(cfg, sizes, rates, selects, until)[1]


AFTER_STEPS = ("final evaluation", "cross-fitting")  # the parts that run once the steps are over


def cross_fit_seconds(rates: Rates, sizes: RunSizes) -> float:
    """The post-hoc fits and the recommendation's cross-fitting on an idle machine (none
    when the run fits no calibrator)."""
    return rates.cross_fit_fixed_s + rates.cross_fit_per_work * sizes.cross_fit if sizes.cross_fit else 0.0


def cross_fit_detail(sizes: RunSizes) -> str:
    """What the cross-fitting part counts, in words."""
    if not sizes.cross_fit:
        return "no post-hoc calibrator to fit (no baselines, or too few S_V items)"
    return (
        f"post-hoc calibrators fitted on S_V, then cross-fitted for the recommendation: "
        f"{sizes.cross_fit:,.0f} item-fits (ATS cross-fits its own choices in each fit)"
    )


def estimate_run(
    cfg: TrainConfig,
    sizes: RunSizes,
    rates: Rates,
    machine: MachineLoad,
    *,
    selects: bool,
    fill_may_be_stored: bool = False,
    spread: Spread | None = None,
    track: TrackRecord | None = None,
) -> Estimate:
    """The parts of a fresh run of `cfg` with `sizes` at `machine`'s load. `selects`: the
    task has a calibrated stop; `fill_may_be_stored`: the frozen layers may already be on
    disk (the figure still counts the fill); `spread`: the learned error (the prior when None)."""
    threads = cfg.job_threads(machine.cpus)[0]
    factor = machine.factor(threads)
    first, until = earliest_stop(cfg, selects), likely_steps(cfg, selects)
    n_evals, eval_s = evaluations(cfg, sizes, rates, selects, until)
    step_s = rates.step_per_work * sizes.step_work
    fill_detail = f"{sizes.fill} items" if sizes.fill else "no frozen layers to cache"
    fill_detail += " (none if a past run stored them)" if fill_may_be_stored and sizes.fill else ""
    stop = f" (the run may stop from step {first} to step {cfg.steps})" if first < cfg.steps else ""
    final = sizes.final_items()
    parts = (
        Part("start-up", rates.startup_s * factor, "the job's process: Python and its libraries"),
        Part("model load", rates.load_s * factor, "data, model and adapter"),
        Part("frozen-layer fill", rates.fill_per_item * sizes.fill * factor, fill_detail),
        Part("steps", step_s * until * factor, f"{until} steps at {step_s:.2f} s idle{stop}"),
        Part("evaluations", eval_s * factor, f"{n_evals} evaluations"),
        Part("final evaluation", rates.final_per_item * final * factor, f"last checkpoint, {final} item forwards"),
        Part("cross-fitting", cross_fit_seconds(rates, sizes) * factor, cross_fit_detail(sizes)),
    )
    return Estimate(
        parts=parts,
        machine=machine,
        threads=threads,
        source=rates.source,
        rates_learned=rates.learned,
        steps=cfg.steps,
        earliest_stop=first,
        likely_steps=until,
        spread=spread or learn_spread([], prior_for(machine.busy, rates.measured_model)),
        track=track,
        early_figure=idle_seconds(cfg, sizes, rates, selects, first) * factor,
    )
