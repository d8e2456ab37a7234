"""How long a training run will take: one likely duration, a range, and the parts behind them.

    estimate = estimate_for(cfg)          # rates and error learned on this machine, else the defaults
    estimate.likely                       # seconds: what the Train page leads with
    estimate.low, estimate.high           # the range that COVER of runs should fall into
    [(p.name, p.seconds, p.detail) for p in estimate.parts]
    estimate.machine.note(estimate.threads)   # None on an idle machine

Why parts: counting training steps alone misses most of a short run (model load, the
frozen-layer fill, the evaluations), and multiplying worst cases gives ranges too wide to
use. So the parts give one figure (`figure`): each part is a recorded
rate (status.json `timings`, training/timings.py) times the count that drives it, at the
fair share of the CPU the job gets at the load now (estimate/machine_load.py); the rates
are learned from this machine's finished runs of the same model, task and scoring rule,
else measured defaults. How far real runs fall from that figure is learned too
(estimate/error.py): the likely value is the figure times the runs' typical
ratio, and the range is where COVER of them fall, limited to MAX_WIDTH from end to end.

The calibrated stop ends a run at a step that is not known in advance: the figure counts
the steps and evaluations up to `likely_steps` (the geometric mean of the earliest step it
can stop at and the last step), and `early` says what the run takes if it stops first.

The rates (`Rates`, learned or default) live in estimate/rates.py and the
machine's load (`MachineLoad`) in estimate/machine_load.py; this module adds up the parts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calm_core.estimate.error import (
    Spread,
    TrackRecord,
    learn_spread,
    prior_for,
    spread_for,
    track_record,
)
from calm_core.estimate.machine_load import MachineLoad
from calm_core.estimate.rates import (
    Rates,
    default_rates,
    past_runs,
    rates_from,
    same_kind_runs,
    task_defaults,
)
from calm_core.estimate.record import Estimate, Part, launch_record
from calm_core.training.config import TrainConfig
from calm_core.training.timings import RunSizes

EMBEDDED_SHAPE = (134_515_008, 30)  # SmolLM2-135M: parameters and layers (its config.json)


# ---------------------------------------------------------------------------- the pure estimate


def earliest_stop(cfg: TrainConfig, selects: bool) -> int:
    """The first step the calibrated stop can end a run at: step 0 is selected, then
    `select_patience` evaluations without a better step (selection.Selector)."""
    if not selects or cfg.select != "best" or not cfg.select_patience:
        return cfg.steps
    evaluated = cfg.eval_schedule.steps_evaluated()
    return evaluated[cfg.select_patience - 1] if len(evaluated) >= cfg.select_patience else cfg.steps


def likely_steps(cfg: TrainConfig, selects: bool) -> int:
    """The steps the figure counts: all of them without an early stop, else the geometric
    mean of the earliest stop and the last step (the stop's step depends on the data; the
    geometric mean keeps the figure within the same factor of both ends)."""
    first = earliest_stop(cfg, selects)
    return cfg.steps if first >= cfg.steps else max(first, round(math.sqrt(first * cfg.steps)))


@dataclass(frozen=True)
class _Costs:
    """Idle-machine seconds of a run's parts as functions of where it stops."""

    cfg: TrainConfig
    sizes: RunSizes
    rates: Rates
    selects: bool

    def evaluations(self, until: int) -> tuple[int, float]:
        """(count, idle seconds) of the evaluations up to step `until`, step 0 included."""
        schedule = self.cfg.eval_schedule
        kinds = (["full"] if self.selects else []) + [k for s in range(1, until + 1) if (k := schedule.kind(s))]
        seconds = sum(
            self.rates.eval_fixed_s + self.rates.eval_per_item * self.sizes.evaluation_items(k) for k in kinds
        )
        return len(kinds), seconds

    @property
    def step_s(self) -> float:
        return self.rates.step_per_work * self.sizes.step_work

    def fixed(self) -> float:
        """Start-up, model load, fill and final evaluation: what does not depend on the stop."""
        r, z = self.rates, self.sizes
        return r.startup_s + r.load_s + r.fill_per_item * z.fill + r.final_per_item * z.final_items()

    def total(self, until: int) -> float:
        return self.fixed() + self.step_s * until + self.evaluations(until)[1]


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
    """The parts of a fresh run of `cfg` with `sizes`, from idle `rates` at `machine`'s load,
    and `spread` (the learned error; the prior for the machine's condition when None).
    `selects`: the task has a calibrated stop (step 0 is evaluated, a probe is read and the
    run may end early); `fill_may_be_stored`: the frozen layers may already be on disk
    (frozen_prefix_store), so the fill may cost nothing (the figure still counts it)."""
    threads = cfg.job_threads(machine.cpus)[0]
    factor = machine.factor(threads)
    costs = _Costs(cfg, sizes, rates, selects)
    first, until = earliest_stop(cfg, selects), likely_steps(cfg, selects)
    n_evals, eval_s = costs.evaluations(until)
    fill = rates.fill_per_item * sizes.fill
    fill_detail = f"{sizes.fill} items" if sizes.fill else "no frozen layers to cache"
    if fill_may_be_stored and sizes.fill:
        fill_detail += " (none if a past run stored them)"
    steps_detail = f"{until} steps at {costs.step_s:.2f} s idle" + (
        f" (the run may stop from step {first} to step {cfg.steps})" if first < cfg.steps else ""
    )
    parts = (
        Part("start-up", rates.startup_s * factor, "the job's process: Python and its libraries"),
        Part("model load", rates.load_s * factor, "data, model and adapter"),
        Part("frozen-layer fill", fill * factor, fill_detail),
        Part("steps", costs.step_s * until * factor, steps_detail),
        Part("evaluations", eval_s * factor, f"{n_evals} evaluations"),
        Part(
            "final evaluation",
            rates.final_per_item * sizes.final_items() * factor,
            f"last checkpoint, {sizes.final_items()} item forwards",
        ),
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
        early_figure=costs.total(first) * factor,
    )


def model_shape(name: str) -> tuple[int, int] | None:
    """(parameters, layers) from a local model directory's config.json (the embedded
    model's are known), without loading it; None when they cannot be read."""
    if name == "embedded":
        return EMBEDDED_SHAPE
    folder = _named_folder(name) or Path(name)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
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


def _named_folder(name: str) -> Path | None:
    """A named model's converted folder (gemma3-270m), once it has been converted."""
    from calm_core.scoring.models import converted_dir, named_model

    return converted_dir(name) if named_model(name) else None


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
    finished runs of the same model, task and scoring rule, else the measured defaults; the
    error learned from the finished runs whose launch recorded an estimate like this one (on
    a machine as busy as this one is now, from rates as learned). `sizes`:
    `planned_sizes(cfg)`, when the caller keeps it."""
    shape = model_shape(cfg.model)
    model = str(cfg.model).replace("`", "'").replace("\n", " ")  # shown as inline code: nothing inside renders
    runs = past_runs(root)
    learned = rates_from(
        same_kind_runs(runs, cfg), f"your recent finished runs of `{model}` ({cfg.task}, {cfg.scoring})"
    )
    rates = learned or task_defaults(cfg, default_rates(shape[0] if shape else None))
    machine = machine or MachineLoad.now()
    return estimate_run(
        cfg,
        sizes or planned_sizes(cfg),
        rates,
        machine,
        selects=task_selects(cfg),
        fill_may_be_stored=cfg.frozen_prefix_store,
        spread=spread_for(runs, machine.busy, rates.measured_model, rates.learned),
        track=track_record(runs),
    )


def launch_estimate(cfg: TrainConfig, root: str | Path | None = None) -> dict[str, Any] | None:
    """config.json's `estimate` for a run of `cfg` launched now (estimate_error.launch_record),
    or None when it cannot be made (a dataset that cannot be read: the run itself says why)."""

    try:
        return launch_record(estimate_for(cfg, root))
    except (ValueError, OSError, KeyError, TypeError):  # DataError is a ValueError
        return None
