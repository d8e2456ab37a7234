"""The time estimate's rates: idle-machine seconds per unit of each part of a run,
learned from this machine's finished runs (status.json `timings`) or the measured defaults.

estimate/predict.py multiplies these rates by a planned run's counts; this module says
where the rates come from: `rates_from` past runs (each divided by the load it started
under), `default_rates` by model size, and `task_defaults` for a task whose evaluation
costs more per item. `past_runs` reads this machine's finished runs once for both the
rates and the estimate's learned error (estimate/error.py).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

from calm_core.estimate.machine_load import MachineLoad
from calm_core.runs.listing import list_runs
from calm_core.runs.records import RunStatus
from calm_core.runs.rundir import RunDir
from calm_core.training.config import TrainConfig
from calm_core.training.timings import PhaseTimes

LEARN_FROM = 3  # the most recent finished runs of the same model, task and scoring rule
READ_AT_MOST = 40  # finished runs read per estimate (the rates' and the error's together)


@dataclass(frozen=True)
class Rates:
    """Idle-machine seconds per unit of each part. `learned`: from this machine's past runs
    of the same model, task and scoring rule (else the measured defaults, which the
    estimate's error prior treats as less certain when the model was not measured)."""

    startup_s: float  # the job's process: Python and its libraries, before the run's own clock starts
    load_s: float  # data, model and adapter: everything before the fill
    fill_per_item: float
    step_per_work: float  # one SFT-step item (RunSizes.step_work)
    eval_fixed_s: float  # per evaluation, whatever its size
    eval_per_item: float
    final_per_item: float  # per item the final evaluation forwards (RunSizes.final_items)
    source: str
    learned: bool = False
    measured_model: bool = True  # False: defaults for a model of another or unknown size

    def scaled(self, factor: float) -> "Rates":
        """Every rate but the start-up's (the libraries, not the model) times `factor` (a
        model's size against the measured one)."""
        return replace(
            self,
            load_s=self.load_s * factor,
            fill_per_item=self.fill_per_item * factor,
            step_per_work=self.step_per_work * factor,
            eval_fixed_s=self.eval_fixed_s * factor,
            eval_per_item=self.eval_per_item * factor,
            final_per_item=self.final_per_item * factor,
        )


# Defaults, (parameters, idle rates), for the two models measured on this project's 2-core
# machine.
# - The tiny random Llama of tests/conftest.py: `rates_from` of one run of
#   `bench/run_parts.py --model tiny` (the Train page's default run: quick preset, calm,
#   chemical symbols with units and animal classes out of domain) on the idle machine (load
#   average 1.0): bench/results/run_parts_tiny.json. It caches no frozen layers there (LoRA
#   on the top 4 of its 2 layers), so its fill rate comes from tests/test_estimate.py's real
#   run (LoRA on its top layer): 40 items filled in 0.04-0.05 s.
# - The embedded model: the fill's and a step's rates from bench/results/train_step.json
#   (calm, T = 3, frozen prefix cached: 0.061 s per item on ARC-Easy, whose items are
#   longer than the default run's; 0.90 s per step of batch 4, i.e. 20 SFT-step items).
#   The model load, the evaluations and the final evaluation from the four idle runs of a
#   `bench/estimate_accuracy.py --fresh` on the quiet machine (load average 0.7-0.9, no busy
#   process, a job on one thread; chemical symbols): model load 3.6-4.0 s; evaluations
#   0.017-0.022 s per item read, final evaluations 0.014-0.022 s per item forward. The
#   earlier defaults (2.0 s, 0.0101 s per item, from differences of bench/quick_run.py's
#   runs) made every first run there 1.3-1.5x longer than its likely figure.
# - Both: the job's start-up (a fresh Python importing torch, transformers and peft), the
#   wall time of the same runs less their `total_s`: 1.7-2.1 s.
DEFAULTS: tuple[tuple[int, Rates], ...] = (
    (
        3_219_776,
        Rates(
            startup_s=1.8,
            load_s=1.34,
            fill_per_item=0.0011,
            step_per_work=0.0049,
            eval_fixed_s=0.0,
            eval_per_item=0.0015,
            final_per_item=0.0033,
            source="",
        ),
    ),
    (
        134_515_008,
        Rates(
            startup_s=1.8,
            load_s=3.8,
            fill_per_item=0.061,
            step_per_work=0.045,
            eval_fixed_s=0.0,
            eval_per_item=0.02,
            final_per_item=0.02,
            source="",
        ),
    ),
)
SIZED = ("load_s", "fill_per_item", "step_per_work", "eval_fixed_s", "eval_per_item", "final_per_item")


def default_rates(parameters: int | None) -> Rates:
    """The measured defaults: linear in the parameter count between the two measured
    models (a small model's fixed costs stay), proportional to it beyond the larger one
    (compute grows with parameters); an unknown size gets the embedded model's rates. A
    model that is neither measured model is marked so: its error is less certain."""
    (p_small, small), (p_large, large) = DEFAULTS
    if parameters is None:
        return replace(
            large,
            measured_model=False,
            source="defaults of the embedded model (this model's size is unknown until its first run)",
        )
    source = (
        f"measured defaults for a {parameters / 1e6:.0f}M-parameter model "
        "(no finished run of this model, task and scoring rule yet)"
    )
    measured = parameters in (p_small, p_large)
    if parameters >= p_large:
        return replace(large.scaled(parameters / p_large), source=source, measured_model=measured)
    t = max(0.0, (parameters - p_small) / (p_large - p_small))
    return replace(
        small,
        **{f: getattr(small, f) + t * (getattr(large, f) - getattr(small, f)) for f in SIZED},
        source=source,
        measured_model=measured,
    )


@dataclass(frozen=True)
class PastRun:
    """A finished run as the estimate reads it: its config's `train` section, what each part
    took (`timings`), its wall time from the job's start to its end (None when unknown or
    resumed: a resumed run's record covers its last start only), the estimate recorded at
    its launch (estimate/error.py), and the torch threads it ran on."""

    train: dict
    timings: PhaseTimes | None
    wall_s: float | None
    record: dict | None
    threads: int

    @property
    def startup_s(self) -> float | None:
        """The job's start-up: its wall time less the run's own clock (`total_s`)."""
        if self.wall_s is None or self.timings is None or self.timings.total_s is None:
            return None
        return max(0.0, self.wall_s - self.timings.total_s)

    @property
    def machine(self) -> MachineLoad | None:
        """The load the run met: as sampled at its launch, else the load average at its start."""
        recorded = MachineLoad.from_record(self.record) if self.record else None
        if recorded is not None or self.timings is None:
            return recorded
        return MachineLoad(self.timings.load_average, self.timings.cpus)

    def idle(self, seconds: float) -> float:
        """`seconds` of this run as an idle machine's: divided by its load's fair share."""
        machine = self.machine
        return seconds / machine.factor(self.threads) if machine else seconds

    def same_kind(self, cfg: TrainConfig) -> bool:
        """Same model, task and scoring rule: the rates depend on those, not on the method
        (steps are counted in SFT-step items)."""
        key = (self.train.get("model"), self.train.get("task", "mcqa"), self.train.get("scoring"))
        return key == (cfg.model, cfg.task, cfg.scoring)


def wall_seconds(status: RunStatus) -> float | None:
    """A finished run's wall time from its job's start (else its creation: a run trained in
    the `calm train` process starts there) to its end; None for a run resumed from a
    checkpoint (its stamps cover the last start only) or a record without the stamps."""
    if status.state != "finished" or status.resumed_from:  # continued from a checkpoint
        return None
    start, end = status.started or status.created, status.ended
    if not isinstance(start, (int, float)) or not isinstance(end, (int, float)) or end <= start:
        return None
    return float(end - start)


def read_past_run(run: RunDir) -> PastRun | None:
    """One finished run's record, None when it cannot be read."""
    try:
        config, status = run.config, run.status
        train = dict(config.train)
        timings = PhaseTimes.from_dict(dict(status.timings)) if status.timings is not None else None
        threads = status.thread_count
        if threads is None or threads < 1:
            threads = max(1, (timings.cpus if timings else 1) - 1)  # TrainConfig.job_threads' default
        record = dict(config.estimate) if config.estimate is not None else None
        return PastRun(train, timings, wall_seconds(status), record, threads)

    except (KeyError, TypeError, ValueError, OSError, AttributeError):
        return None  # a run that cannot be read, or one from before timings were recorded


def past_runs(root: str | Path | None = None, limit: int = READ_AT_MOST) -> list[PastRun]:
    """This machine's most recent finished runs, newest first (at most `limit`)."""
    found: list[PastRun] = []
    for summary in list_runs(root):
        if summary.state != "finished":
            continue
        run = read_past_run(RunDir(summary.path))
        if run is not None:
            found.append(run)
        if len(found) >= limit:
            break
    return found


def rates_from(runs: list[PastRun], source: str) -> Rates | None:
    """Idle-machine rates from past runs' records (medians, each run divided by the load
    it started under); None without any usable record."""
    usable = [
        r
        for r in runs
        if r.timings and r.timings.sizes is not None and r.timings.total_s is not None and r.timings.steps
    ]
    if not usable:
        return None

    def median(values: Iterable[float | None], fallback: float) -> float:
        values = [v for v in values if v is not None and v > 0]
        return statistics.median(values) if values else fallback

    default = DEFAULTS[-1][1]
    steps = [r.idle(r.timings.steps_s) / (r.timings.steps * r.timings.sizes.step_work) for r in usable]
    fixed, per_item = _linear_fit([(e.items, r.idle(e.seconds)) for r in usable for e in r.timings.evaluations])
    finals = [
        r.idle(r.timings.final_s) / r.timings.sizes.final_items()
        for r in usable
        if r.timings.final_s and r.timings.sizes.final_items()
    ]
    fills = [
        r.idle(r.timings.fill_s) / r.timings.sizes.fill for r in usable if r.timings.fill_s and r.timings.sizes.fill
    ]
    return Rates(
        startup_s=median((r.idle(r.startup_s) if r.startup_s else None for r in usable), default.startup_s),
        load_s=median((r.idle(r.timings.load_s or 0.0) for r in usable), default.load_s),
        fill_per_item=median(fills, default.fill_per_item),
        step_per_work=statistics.median(steps),
        eval_fixed_s=fixed,
        eval_per_item=per_item,
        final_per_item=median(finals, per_item),
        source=source,
        learned=True,
    )


def _linear_fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(fixed, per item) of seconds = fixed + per_item * items by least squares, both >= 0;
    all points of one size: no fixed part."""
    if not points:
        return DEFAULTS[-1][1].eval_fixed_s, DEFAULTS[-1][1].eval_per_item
    xs, ys = [float(x) for x, _ in points], [y for _, y in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mean_x) ** 2 for x in xs)
    if var == 0 or mean_x == 0:
        return 0.0, mean_y / max(mean_x, 1.0)
    slope = max(0.0, sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var)
    fixed = mean_y - slope * mean_x
    if fixed < 0:
        return 0.0, sum(ys) / sum(xs)
    return fixed, slope


def same_kind_runs(runs: list[PastRun], cfg: TrainConfig) -> list[PastRun]:
    """The LEARN_FROM most recent of `runs` with `cfg`'s model, task and scoring rule."""
    return [r for r in runs if r.same_kind(cfg)][:LEARN_FROM]


def task_defaults(cfg: TrainConfig, rates: Rates) -> Rates:
    """The multiple-choice defaults for `cfg`'s task: a task whose evaluation costs more
    per item declares `evaluation_cost(cfg)` (open answers generate), unmeasured, so
    its error counts as an unmeasured model's."""
    from calm_core.training.tasks import get_task

    cost = getattr(get_task(cfg.task), "evaluation_cost", None)
    if cost is None:
        return rates
    times = float(cost(cfg))
    return replace(
        rates,
        eval_fixed_s=rates.eval_fixed_s * times,
        eval_per_item=rates.eval_per_item * times,
        final_per_item=rates.final_per_item * times,
        measured_model=False,
        source=f"{rates.source}; {cfg.task} evaluations counted as {times:g} multiple-choice items each "
        "(unmeasured until the first run)",
    )
