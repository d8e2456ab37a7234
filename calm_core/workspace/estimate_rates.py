"""The time estimate's rates: idle-machine seconds per unit of each part of a run,
learned from this machine's finished runs (status.json `timings`) or the measured defaults.

workspace/estimate.py multiplies these rates by a planned run's counts; this module says
where the rates come from: `rates_from` past runs (each divided by the load it started
under), `default_rates` by model size, and `task_defaults` for a task whose evaluation
costs more per item.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

from calm_core.runs.listing import list_runs
from calm_core.runs.rundir import RunDir
from calm_core.training.config import TrainConfig
from calm_core.training.timings import PhaseTimes
from calm_core.workspace.machine_load import MachineLoad

LEARN_FROM = 3  # the most recent finished runs of the same model, task and scoring rule


@dataclass(frozen=True)
class Rates:
    """Idle-machine seconds per unit of each part, and how far a part may fall from them.

    `spread` (low, high) multiplies every part: a run's items differ in length from the
    runs the rates come from, and the load moves while it runs."""

    load_s: float  # data, model and adapter: everything before the fill
    fill_per_item: float
    step_per_work: float  # one SFT-step item (RunSizes.step_work)
    eval_fixed_s: float  # per evaluation, whatever its size
    eval_per_item: float
    final_per_item: float  # per item the final evaluation forwards (RunSizes.final_items)
    spread: tuple[float, float]
    source: str

    def scaled(self, factor: float) -> "Rates":
        """Every rate times `factor` (a model's size against the measured one)."""
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
# machine. The spread is wide: the defaults come from other items than the run's.
# - The tiny random Llama of tests/conftest.py: `rates_from` of one run of
#   `bench/run_parts.py --model tiny` (the Train page's default run: quick preset, calm,
#   chemical symbols with units and animal classes out of domain) on the idle machine (load
#   average 1.0): bench/results/run_parts_tiny.json. An earlier measurement beside other
#   jobs (load average 5.7, divided out as a fair share) came out 9-12x slower per step and
#   item: contention costs far more than a fair share (see CONTENTION), so defaults are
#   measured idle.
#   It caches no frozen layers there (LoRA on the top 4 of its 2 layers), so its fill rate
#   comes from tests/test_estimate.py's real run (LoRA on its top layer): 40 items filled in
#   0.04-0.05 s on three idle runs here, and 0.047 s on the CI machine.
# - The embedded model, from idle measurements: the fill's and a step's rates from
#   bench/results/train_step.json (calm, T = 3, frozen prefix cached: 0.061 s per item on
#   ARC-Easy, whose items are longer than the default run's; 0.90 s per step of batch 4,
#   i.e. 20 SFT-step items); the evaluation's per item from bench/results/quick_run.json,
#   the default run idle with and without the calibrated stop: 26 more steps (23.4 s) and
#   302 fewer evaluated items made it 20.4 s longer, so an item costs 3.0 / 302 s. The
#   same run on the loaded machine spent 1186 s filling 317 items (load average 11):
#   61 times the idle rate, where a fair share says 6.5 (see CONTENTION).
DEFAULT_SPREAD = (0.5, 2.5)
DEFAULTS: tuple[tuple[int, Rates], ...] = (
    (
        3_219_776,
        Rates(
            load_s=1.34,
            fill_per_item=0.0011,
            step_per_work=0.0049,
            eval_fixed_s=0.0,
            eval_per_item=0.0015,
            final_per_item=0.0033,
            spread=DEFAULT_SPREAD,
            source="",
        ),
    ),
    (
        134_515_008,
        Rates(
            load_s=2.0,
            fill_per_item=0.061,
            step_per_work=0.045,
            eval_fixed_s=0.0,
            eval_per_item=0.0101,
            final_per_item=0.0101,
            spread=DEFAULT_SPREAD,
            source="",
        ),
    ),
)


def default_rates(parameters: int | None) -> Rates:
    """The measured defaults: linear in the parameter count between the two measured
    models (a small model's fixed costs stay), proportional to it beyond the larger one
    (compute grows with parameters); an unknown size gets the embedded model's rates and
    a wider high end."""
    (p_small, small), (p_large, large) = DEFAULTS
    if parameters is None:
        return replace(
            large,
            spread=(DEFAULT_SPREAD[0], 2 * DEFAULT_SPREAD[1]),
            source="defaults of the embedded model (this model's size is unknown until its first run)",
        )
    source = (
        f"measured defaults for a {parameters / 1e6:.0f}M-parameter model "
        "(no finished run of this model, task and scoring rule yet)"
    )
    if parameters >= p_large:
        return replace(large.scaled(parameters / p_large), source=source)
    t = max(0.0, (parameters - p_small) / (p_large - p_small))
    fields = ("load_s", "fill_per_item", "step_per_work", "eval_fixed_s", "eval_per_item", "final_per_item")
    return replace(
        small, **{f: getattr(small, f) + t * (getattr(large, f) - getattr(small, f)) for f in fields}, source=source
    )


def rates_from(timings: list[PhaseTimes], source: str) -> Rates | None:
    """Idle-machine rates from past runs' records (medians, each run divided by the load
    factor it started under), the spread from how far they differ; None without any."""
    usable = [t for t in timings if t.sizes is not None and t.total_s is not None and t.steps]
    if not usable:
        return None

    def idle(t: PhaseTimes, seconds: float) -> float:
        return seconds / MachineLoad(t.load_average, t.cpus).factor

    def median(values: Iterable[float], fallback: float) -> float:
        values = [v for v in values if v > 0]
        return statistics.median(values) if values else fallback

    steps = [idle(t, t.steps_s) / (t.steps * t.sizes.step_work) for t in usable]
    fixed, per_item = _linear_fit([(e.items, idle(t, e.seconds)) for t in usable for e in t.evaluations])
    finals = [idle(t, t.final_s) / t.sizes.final_items() for t in usable if t.final_s and t.sizes.final_items()]
    fills = [idle(t, t.fill_s) / t.sizes.fill for t in usable if t.fill_s and t.sizes.fill]
    default = DEFAULTS[-1][1]
    ratio = max(steps) / min(steps) if min(steps) > 0 else 2.0
    spread = (min(0.75, 1 / ratio), max(1.5, ratio))  # at least -25% / +50%: the load moves during a run
    return Rates(
        load_s=median((idle(t, t.load_s or 0.0) for t in usable), default.load_s),
        fill_per_item=median(fills, default.fill_per_item),
        step_per_work=statistics.median(steps),
        eval_fixed_s=fixed,
        eval_per_item=per_item,
        final_per_item=median(finals, per_item),
        spread=spread,
        source=source,
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


def past_timings(cfg: TrainConfig, root: str | Path | None = None) -> list[PhaseTimes]:
    """`timings` of this machine's most recent finished runs with the same model, task
    and scoring rule (the rates depend on those, not on the method: steps are counted in
    SFT-step items)."""
    found: list[PhaseTimes] = []
    for summary in list_runs(root):
        if summary.state != "finished":
            continue
        run = RunDir(summary.path)
        try:
            train = run.config.get("train", {})
            if (train.get("model"), train.get("task", "mcqa"), train.get("scoring")) != (
                cfg.model,
                cfg.task,
                cfg.scoring,
            ):
                continue
            found.append(PhaseTimes.from_dict(run.status["timings"]))
        except (KeyError, TypeError, ValueError, OSError):
            continue  # a run from before timings were recorded, or one that cannot be read
        if len(found) >= LEARN_FROM:
            break
    return found


def task_defaults(cfg: TrainConfig, rates: Rates) -> Rates:
    """The multiple-choice defaults for `cfg`'s task: a task whose evaluation costs more
    per item declares `evaluation_cost(cfg)` (open answers generate), unmeasured, so
    the high end doubles too."""
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
        spread=(rates.spread[0], 2 * rates.spread[1]),
        source=f"{rates.source}; {cfg.task} evaluations counted as {times:g} multiple-choice items each "
        "(unmeasured until the first run)",
    )
