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

The rates (`Rates`, learned or default) live in workspace/estimate_rates.py and the
machine's load (`MachineLoad`) in workspace/machine_load.py; this module adds up the parts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calm_core.training.config import TrainConfig
from calm_core.training.timings import RunSizes
from calm_core.workspace.estimate_rates import Rates, default_rates, past_timings, rates_from, task_defaults
from calm_core.workspace.machine_load import MachineLoad

# A process that has loaded the libraries and read the model files before (the page cache)
# loads in a fraction of a fresh one's time: the tiny model in 0.34 s, and once 0.14 s,
# against 2.0 s fresh (tests/test_estimate.py's real run, in a test process that had loaded
# models already; the 0.14 s fell under a low end of 0.25 x the fast spread).
WARM_LOAD = 0.1
EMBEDDED_SHAPE = (134_515_008, 30)  # SmolLM2-135M: parameters and layers (its config.json)


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
