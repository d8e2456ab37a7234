"""The estimate's rates: idle-machine seconds per unit of each part of a run, learned from this
machine's finished runs (status.json `timings`, each divided by the load it ran under) or
the defaults for the model's size.

    runs = past_runs(root)                                   # read once: the rates and the error learn from them
    rates = rates_from(same_kind_runs(runs, cfg), "...") or task_defaults(cfg, default_rates(parameters))
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable

from calm_core.estimate.machine_load import MachineLoad
from calm_core.runs.lifecycle import RunState
from calm_core.runs.listing import list_runs
from calm_core.runs.records import RunStatus
from calm_core.runs.rundir import RunDir
from calm_core.training.config import TrainConfig
from calm_core.training.tasks import get_task
from calm_core.training.timings import PhaseTimes, RunSizes

LEARN_FROM = 3  # the most recent finished runs of the same model, task and scoring rule
READ_AT_MOST = 40  # finished runs read per estimate (the rates' and the error's together)


@dataclass(frozen=True)
class Rates:
    """Idle-machine seconds per unit of each part. `learned`: from this machine's past runs
    of the same model, task and scoring rule; `measured_model`: False for defaults of a model
    nobody measured (its error prior is then the widest)."""

    startup_s: float  # the job's process: Python and its libraries, before the run's own clock starts
    load_s: float  # data, model and adapter: everything before the fill
    fill_per_item: float
    step_per_work: float  # one SFT-step item (RunSizes.step_work)
    eval_fixed_s: float  # per evaluation, whatever its size
    eval_per_item: float
    final_per_item: float  # per item the final evaluation forwards (RunSizes.final_items)
    source: str
    cross_fit_per_work: float = 0.0  # per item-fit of the post-hoc fits and cross-fitting (RunSizes.cross_fit)
    cross_fit_fixed_s: float = 0.0  # the recommendation's bootstrap and files, whatever the fits
    learned: bool = False
    measured_model: bool = True


SIZED = ("load_s", "fill_per_item", "step_per_work", "eval_fixed_s", "eval_per_item", "final_per_item")
# The cross-fitting's rates are not SIZED: ATS's fits read hidden states (64 wide, 576 wide),
# not the parameters. The embedded model's: a line through the first two runs of
# bench/estimate_accuracy.py (2,240 and 21,700 item-fits, each divided by its load's factor
# as `rates_from` does; docs/performance.md); the tiny model's are those times
# bench/cross_fit_cost.py's ratio of width 64 to width 576 (0.45).
# (parameters, idle rates) of the two models measured on this project's 2-core machine: the
# tiny random Llama of tests/conftest.py and the embedded model. Where each figure comes
# from: docs/performance.md, "The Train page's time estimate".
DEFAULTS: tuple[tuple[int, Rates], ...] = (
    (3_219_776, Rates(1.8, 1.34, 0.0011, 0.0049, 0.0, 0.0015, 0.0033, "", 1e-4, 0.6)),
    (134_515_008, Rates(1.8, 3.8, 0.061, 0.045, 0.0, 0.02, 0.02, "", 2.2e-4, 1.3)),
)


def default_rates(parameters: int | None) -> Rates:
    """The defaults for a model of `parameters`: linear between the two measured models (a
    small model's fixed costs stay), proportional beyond the larger one (compute grows with
    parameters), the embedded model's for an unknown size."""
    (p_small, small), (p_large, large) = DEFAULTS
    if parameters is None:
        source = "defaults of the embedded model (this model's size is unknown until its first run)"
        return replace(large, measured_model=False, source=source)
    source = (
        f"measured defaults for a {parameters / 1e6:.0f}M-parameter model "
        "(no finished run of this model, task and scoring rule yet)"
    )
    if parameters >= p_large:
        base, sized = large, {f: getattr(large, f) * (parameters / p_large) for f in SIZED}
    else:
        t = max(0.0, (parameters - p_small) / (p_large - p_small))
        base, sized = small, {f: getattr(small, f) + t * (getattr(large, f) - getattr(small, f)) for f in SIZED}
    return replace(base, **sized, source=source, measured_model=parameters in (p_small, p_large))


def task_defaults(cfg: TrainConfig, rates: Rates) -> Rates:
    """The defaults for `cfg`'s task: one whose evaluation costs more per item declares
    `evaluation_cost(cfg)` (open answers generate); unmeasured, so its error is widest."""
    cost = getattr(get_task(cfg.task), "evaluation_cost", None)
    if cost is None:
        return rates
    times = float(cost(cfg))
    evaluation = ("eval_fixed_s", "eval_per_item", "final_per_item")
    return replace(
        rates,
        **{f: getattr(rates, f) * times for f in evaluation},
        measured_model=False,
        source=f"{rates.source}; {cfg.task} evaluations counted as {times:g} multiple-choice items each "
        "(unmeasured until the first run)",
    )


@dataclass(frozen=True)
class PastRun:
    """A finished run as the estimate reads it: its config's `train` section, its `timings`,
    its wall time from the job's start to its end (None when unknown or resumed), the
    estimate recorded at its launch, and its torch threads."""

    train: dict[str, Any]
    timings: PhaseTimes | None
    wall_s: float | None
    record: dict[str, Any] | None
    threads: int

    @property
    def startup_s(self) -> float | None:
        """The job's start-up: its wall time less the run's own clock (`total_s`)."""
        if self.wall_s is None or self.timings is None or self.timings.total_s is None:
            return None
        return max(0.0, self.wall_s - self.timings.total_s)

    @property
    def machine(self) -> MachineLoad | None:
        """The load sampled at its launch, else the load average at its start."""
        recorded = MachineLoad.from_record(self.record) if self.record else None
        if recorded is not None or self.timings is None:
            return recorded
        return MachineLoad(self.timings.load_average, self.timings.cpus)

    def idle(self, seconds: float) -> float:
        """`seconds` of this run as an idle machine's: divided by its load's fair share."""
        machine = self.machine
        return seconds / machine.factor(self.threads) if machine else seconds

    def same_kind(self, cfg: TrainConfig) -> bool:
        """Same model, task and scoring rule (steps are counted in SFT-step items, so the
        method does not matter). A rule still `auto` is the one its job will choose, which
        for the same model on its S_V is the rule its earlier runs took: any of them counts."""
        if (self.train.get("model"), self.train.get("task", "mcqa")) != (cfg.model, cfg.task):
            return False
        return cfg.scoring == "auto" or self.train.get("scoring") == cfg.scoring


def wall_seconds(status: RunStatus) -> float | None:
    """A finished run's job start (else creation) to its end; None for a resumed run (its
    stamps cover the last start only) or a record without the stamps."""
    if status.state != RunState.FINISHED or status.resumed_from:
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
        return None


def past_runs(root: str | Path | None = None, limit: int = READ_AT_MOST) -> list[PastRun]:
    """This machine's most recent finished runs, newest first (at most `limit`)."""
    found: list[PastRun] = []
    for summary in list_runs(root):
        run = read_past_run(RunDir(summary.path)) if summary.state == RunState.FINISHED else None
        found += [run] if run is not None else []
        if len(found) >= limit:
            break
    return found


def same_kind_runs(runs: list[PastRun], cfg: TrainConfig) -> list[PastRun]:
    """The LEARN_FROM most recent of `runs` with `cfg`'s model, task and scoring rule."""
    return [r for r in runs if r.same_kind(cfg)][:LEARN_FROM]


def _median(values: Iterable[float | None], fallback: float) -> float:
    kept = [v for v in values if v is not None and v > 0]
    return statistics.median(kept) if kept else fallback


def _timed(runs: list[PastRun]) -> list[tuple[PastRun, PhaseTimes, RunSizes]]:
    """The runs whose timings can teach rates: sizes, a total and at least one step."""
    return [
        (r, r.timings, r.timings.sizes)
        for r in runs
        if r.timings is not None and r.timings.sizes is not None and r.timings.total_s is not None and r.timings.steps
    ]


def rates_from(runs: list[PastRun], source: str) -> Rates | None:
    """Idle-machine rates from past runs' timings (medians; the evaluations a line through
    their sizes); None without any usable record."""
    times = _timed(runs)
    if not times:
        return None
    default = DEFAULTS[-1][1]
    cross_fits = [(r, t, z) for r, t, z in times if t.cross_fit_s is not None]  # older records lack the part
    fixed, per_item = _linear_fit([(e.items, r.idle(e.seconds)) for r, t, _ in times for e in t.evaluations])
    return Rates(
        startup_s=_median((r.idle(r.startup_s) if r.startup_s else None for r, _, _ in times), default.startup_s),
        load_s=_median((r.idle(t.load_s or 0.0) for r, t, _ in times), default.load_s),
        fill_per_item=_median(
            (r.idle(t.fill_s) / z.fill for r, t, z in times if t.fill_s and z.fill), default.fill_per_item
        ),
        step_per_work=statistics.median(r.idle(t.steps_s) / (t.steps * z.step_work) for r, t, z in times),
        eval_fixed_s=fixed,
        eval_per_item=per_item,
        final_per_item=_median(
            (r.idle(t.final_forward_s() or 0.0) / z.final_items() for r, t, z in times if z.final_items()),
            per_item,
        ),
        **_cross_fit_rates([(z.cross_fit, r.idle(t.cross_fit_s or 0.0)) for r, t, z in cross_fits], default),
        source=source,
        learned=True,
    )


def _cross_fit_rates(points: list[tuple[float, float]], default: Rates) -> dict[str, float]:
    """The cross-fitting's fixed seconds and seconds per item-fit: a line through the runs'
    (item-fits, idle seconds) when they differ in size; else the defaults' line scaled to
    what the runs took (one size cannot tell the fixed part from the rest: taking the fixed
    part as known and the rest per item-fit left nothing per item-fit when a small run beat
    the default, and a large run then got the fixed part alone); the defaults without any
    run that timed it."""
    fixed, per = default.cross_fit_fixed_s, default.cross_fit_per_work
    sized = [(x, y) for x, y in points if x > 0]
    if len({x for x, _ in sized}) > 1:
        fixed, per = _linear_fit(sized)
    elif sized:
        scale = statistics.median(y / (fixed + per * x) for x, y in sized)
        fixed, per = fixed * scale, per * scale
    return {"cross_fit_fixed_s": fixed, "cross_fit_per_work": per}


def _linear_fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(fixed, per item) of seconds = fixed + per_item * items by least squares, both >= 0;
    points all of one size have no fixed part."""
    if not points:
        return DEFAULTS[-1][1].eval_fixed_s, DEFAULTS[-1][1].eval_per_item
    xs, ys = [float(x) for x, _ in points], [y for _, y in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mean_x) ** 2 for x in xs)
    if var == 0 or mean_x == 0:
        return 0.0, mean_y / max(mean_x, 1.0)
    slope = max(0.0, sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var)
    fixed = mean_y - slope * mean_x
    return (0.0, sum(ys) / sum(xs)) if fixed < 0 else (fixed, slope)
