"""How long a training run will take, part by part, with a range: the Train page's estimate.

    estimate = estimate_for(cfg)          # rates learned on this machine, else the defaults
    estimate.low, estimate.high           # seconds, every part included
    [(p.name, p.low, p.high, p.detail) for p in estimate.parts]
    estimate.machine.note()               # None on an idle machine

Why: the first estimate counted training steps only and said nothing of the machine; on
a busy machine it was 12x short (issue 23). A run is model load, the frozen-layer fill,
the steps, the evaluations (step 0, the dense early ones on S_V, every `eval_every`
steps, the last) and the final evaluation. Each part is a recorded rate (status.json
`timings`, training/timings.py) times the count that drives it, so the estimate learns
from this machine's finished runs of the same model, task and scoring rule, and starts
from measured defaults when there are none.

Rates are kept as idle-machine seconds: a past run's are divided by the load factor it
started under, and the estimate multiplies by the factor of the load now. The likely
figure takes the fair share of the CPU: a run that wants every core, beside other
processes whose demand is the 1-minute load average, gets cores / (load + cores) of the
machine, so it takes 1 + load / cores as long; the page then says the estimate assumes
that load goes on. The range's high end multiplies by CONTENTION too; its low end is an
idle machine's (the others may pause: under load, one run's evaluations varied 6x).

The step count is an upper bound: the calibrated stop may end the run early, so the low
end counts the steps and evaluations up to the earliest step the stop can end at.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable

from calm_core.runs.listing import list_runs
from calm_core.runs.rundir import RunDir
from calm_core.training.config import TrainConfig
from calm_core.training.timings import PhaseTimes, RunSizes

BUSY_LOAD = 0.5  # a 1-minute load average under this is an idle machine (the studio's own page rendering)
# On a busy machine a run takes longer than its fair share of the CPU says: the jobs'
# threads contend for the cores (a thread waits for its descheduled sibling). Measured:
# 11x the idle time with another job on both of the 2 cores (issue 23: 7.6 min against
# 41 s; a fair share says 2x), and a frozen-layer fill at load average 11 at 61x the idle
# rate (a fair share says 6.5x; DEFAULTS). The high end of a busy machine's range is the
# fair share times this.
CONTENTION = 10.0
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
# A process that has loaded the libraries and read the model files before (the page cache)
# loads in a fraction of a fresh one's time: the tiny model in 0.34 s against 2.0 s fresh
# (tests/test_estimate.py's real run, in a test process that had loaded models already).
WARM_LOAD = 0.25
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
EMBEDDED_SHAPE = (134_515_008, 30)  # SmolLM2-135M: parameters and layers (its config.json)


@dataclass(frozen=True)
class MachineLoad:
    """The 1-minute load average and the cores: how much of the CPU a run would get."""

    load_average: float
    cpus: int

    @classmethod
    def now(cls) -> "MachineLoad":
        return cls(round(os.getloadavg()[0], 2), os.cpu_count() or 1)

    @property
    def busy(self) -> bool:
        return self.load_average >= BUSY_LOAD

    @property
    def factor(self) -> float:
        """How many times an idle machine's time the run takes at this load (fair share)."""
        return 1.0 + self.load_average / self.cpus if self.busy else 1.0

    @property
    def high_factor(self) -> float:
        """The high end: the fair share times CONTENTION on a busy machine."""
        return self.factor * CONTENTION if self.busy else 1.0

    def note(self) -> str | None:
        """What the page says on a busy machine (None when idle)."""
        if not self.busy:
            return None
        return (
            f"Another process is using the CPU (load average {self.load_average:.1f} on {self.cpus} cores): "
            f"the estimate assumes that load continues, {self.factor:.1f}x an idle machine's time with a fair "
            f"share of the CPU, up to {self.high_factor:.0f}x when the jobs' threads contend for the cores"
        )


@dataclass(frozen=True)
class Part:
    """One part of a run (model load, fill, steps, evaluations, final evaluation): the
    seconds it may take on this machine now, and what it counts."""

    name: str
    low: float  # seconds
    high: float
    detail: str
    likely: float  # at the fair share of the CPU, every step: what the page calls likely if the load goes on


@dataclass(frozen=True)
class Estimate:
    """A run's parts; its range is their sum (low: the fewest steps on an idle machine
    and the low spread; high: every step, contention and the high spread)."""

    parts: tuple[Part, ...]
    machine: MachineLoad
    source: str  # where the rates come from
    steps: int
    earliest_stop: int  # the first step the calibrated stop can end the run at (= steps: it cannot stop early)

    @property
    def low(self) -> float:
        return sum(p.low for p in self.parts)

    @property
    def high(self) -> float:
        return sum(p.high for p in self.parts)

    @property
    def likely(self) -> float:
        return sum(p.likely for p in self.parts)

    def part(self, name: str) -> Part:
        return next(p for p in self.parts if p.name == name)

    def steps_note(self) -> str:
        """The step count is an upper bound: say so, and how early the run can end."""
        if self.earliest_stop >= self.steps:
            return f"all {self.steps} steps"
        return (
            f"up to {self.steps} steps: the calibrated stop can end the run from step {self.earliest_stop}, "
            "so the low end counts steps and evaluations up to there"
        )


def minutes(seconds: float) -> str:
    """`41 s` under two minutes, else `7.6 min`."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def span(low: float, high: float) -> str:
    return f"{minutes(low)} to {minutes(high)}"


# ---------------------------------------------------------------------------- the pure estimate


def earliest_stop(cfg: TrainConfig, selects: bool) -> int:
    """The first step the calibrated stop can end a run at: step 0 is selected, then
    `select_patience` evaluations without a better step (selection.Selector)."""
    if not selects or cfg.select != "best" or not cfg.select_patience:
        return cfg.steps
    evaluated = cfg.eval_schedule.steps_evaluated()
    return evaluated[cfg.select_patience - 1] if len(evaluated) >= cfg.select_patience else cfg.steps


def estimate_run(
    cfg: TrainConfig,
    sizes: RunSizes,
    rates: Rates,
    machine: MachineLoad,
    *,
    selects: bool,
    fill_may_be_stored: bool = False,
) -> Estimate:
    """Each part's (low, high) seconds for a fresh run of `cfg` with `sizes`, from idle
    `rates` at `machine`'s load. `selects`: the task has a calibrated stop (step 0 is
    evaluated, a probe is read and the run may end early); `fill_may_be_stored`: the
    frozen layers may already be on disk (frozen_prefix_store), so the fill may cost nothing."""
    # low: idle (other processes pause too: the same run's evaluations varied 6x under load,
    # bench/results/run_parts_tiny_loaded.json); high: contention; `likely`: the fair share, all steps
    lo, hi, likely = rates.spread[0], rates.spread[1] * machine.high_factor, machine.factor
    stop = earliest_stop(cfg, selects)
    schedule = cfg.eval_schedule

    def evaluations(until: int) -> tuple[int, float]:
        kinds = (["full"] if selects else []) + [k for s in range(1, until + 1) if (k := schedule.kind(s))]
        return len(kinds), sum(rates.eval_fixed_s + rates.eval_per_item * sizes.evaluation_items(k) for k in kinds)

    step_s = rates.step_per_work * sizes.step_work
    (n_low, eval_low), (n_high, eval_high) = evaluations(stop), evaluations(cfg.steps)
    fill = rates.fill_per_item * sizes.fill
    final = rates.final_per_item * sizes.final_items()
    parts = (
        Part(
            "model load",
            rates.load_s * lo * WARM_LOAD,
            rates.load_s * hi,
            "data, model and adapter",
            rates.load_s * likely,
        ),
        Part(
            "frozen-layer fill",
            0.0 if fill_may_be_stored else fill * lo,
            fill * hi,
            f"{sizes.fill} items" + (" (none if a past run stored them)" if fill_may_be_stored and sizes.fill else "")
            if sizes.fill
            else "no frozen layers to cache",
            fill * likely,
        ),
        Part(
            "steps",
            step_s * stop * lo,
            step_s * cfg.steps * hi,
            f"{stop}-{cfg.steps} steps at {step_s:.2f} s idle"
            if stop < cfg.steps
            else f"{cfg.steps} steps at {step_s:.2f} s idle",
            step_s * cfg.steps * likely,
        ),
        Part(
            "evaluations",
            eval_low * lo,
            eval_high * hi,
            f"{n_low}-{n_high} evaluations" if n_low < n_high else f"{n_high} evaluations",
            eval_high * likely,
        ),
        Part(
            "final evaluation",
            final * lo,
            final * hi,
            f"last checkpoint, {sizes.final_items()} item forwards",
            final * likely,
        ),
    )
    return Estimate(parts, machine, rates.source, cfg.steps, stop)


# ---------------------------------------------------------------------------- rates: learned or default


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


def model_shape(name: str) -> tuple[int, int] | None:
    """(parameters, layers) from a local model directory's config.json (the embedded
    model's are known), without loading it; None when they cannot be read."""
    if name == "embedded":
        return EMBEDDED_SHAPE
    try:
        config = json.loads((Path(name) / "config.json").read_text(encoding="utf-8"))
        h, layers, vocab = int(config["hidden_size"]), int(config["num_hidden_layers"]), int(config["vocab_size"])
        inter = int(config.get("intermediate_size", 4 * h))
        kv = (
            h
            * int(config.get("num_key_value_heads", config.get("num_attention_heads", 1)))
            // int(config.get("num_attention_heads", 1))
        )
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * inter + 2 * h  # attention, MLP, norms
    embeddings = vocab * h * (1 if config.get("tie_word_embeddings", True) else 2)
    return layers * per_layer + embeddings + h, layers


def planned_sizes(cfg: TrainConfig) -> RunSizes:
    """The item counts a fresh run of `cfg` will have, from the datasets' sizes (before
    held-out questions that repeat training ones are dropped: an upper bound). It reads
    every dataset: a page that reruns often keeps it a while."""
    from calm_core.scoring.evaluate import load_report
    from calm_core.training.methods import get_method
    from calm_core.training.tasks import get_task

    kind = get_task(cfg.task).ITEM_KIND

    def count(name: str, limit: int | None) -> int:
        return len(load_report(name, kind, limit, cfg.seed).items)

    counts = _Counts(
        train=range(count(cfg.train_data, cfg.train_limit)),
        heldout=range(count(cfg.heldout_data, cfg.heldout_limit)),
        evals={name: range(count(name, cfg.eval_limit)) for name in cfg.eval_data},
    )
    shape = model_shape(cfg.model)
    layers = shape[1] if shape else None
    fills = cfg.frozen_prefix and cfg.lora.layers is not None and (layers is None or cfg.lora.layers < layers)
    return RunSizes.of(
        cfg, counts, fills=fills, uses_head=bool(get_method(cfg.method).USES_HEAD), selects=task_selects(cfg)
    )


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


def task_selects(cfg: TrainConfig) -> bool:
    from calm_core.training.tasks import get_task

    return bool(getattr(get_task(cfg.task), "SELECTS", False))


@dataclass(frozen=True)
class _Counts:
    """Sized stand-ins for a run's item sets (RunSizes.of reads only their lengths)."""

    train: Any
    heldout: Any
    evals: dict[str, Any]


def estimate_for(
    cfg: TrainConfig, root: str | Path | None = None, machine: MachineLoad | None = None, sizes: RunSizes | None = None
) -> Estimate:
    """The estimate of a fresh run of `cfg` on this machine now: rates learned from its
    finished runs of the same model, task and scoring rule, else the measured defaults.
    `sizes`: `planned_sizes(cfg)`, when the caller keeps it."""
    shape = model_shape(cfg.model)
    model = str(cfg.model).replace("`", "'").replace("\n", " ")  # shown as inline code: nothing inside renders
    learned = rates_from(past_timings(cfg, root), f"your recent finished runs of `{model}` ({cfg.task}, {cfg.scoring})")
    rates = learned or task_defaults(cfg, default_rates(shape[0] if shape else None))
    return estimate_run(
        cfg,
        sizes or planned_sizes(cfg),
        rates,
        machine or MachineLoad.now(),
        selects=task_selects(cfg),
        fill_may_be_stored=cfg.frozen_prefix_store,
    )
