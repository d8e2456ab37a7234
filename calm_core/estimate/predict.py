"""How long a training run of a config will take on this machine now, before it exists.

    estimate = estimate_for(cfg)        # rates and error learned on this machine, else the defaults
    estimate.likely, estimate.low, estimate.high
    shown = launch_estimate(cfg)        # the same, None when it cannot be made; launch_training records it

The counts come from what the data layer knows of each dataset without loading it
(data/counts.py), the rates from this machine's finished runs of the same model, task and
scoring rule or the defaults for the model's size (rates.py), the error from the runs
whose launch recorded an estimate like this one (error.py); arithmetic.py sums the parts.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from calm_core.data.counts import item_count
from calm_core.data.schema import DataError
from calm_core.estimate.arithmetic import Estimate, estimate_run
from calm_core.estimate.error import spread_for, track_record
from calm_core.estimate.machine_load import MachineLoad
from calm_core.estimate.rates import default_rates, past_runs, rates_from, same_kind_runs, task_defaults
from calm_core.training.config import TrainConfig
from calm_core.training.tasks import get_task
from calm_core.training.timings import RunSizes

EMBEDDED_SHAPE = (134_515_008, 30)  # SmolLM2-135M: parameters and layers (its config.json)


def estimate_for(
    cfg: TrainConfig, root: str | Path | None = None, machine: MachineLoad | None = None, sizes: RunSizes | None = None
) -> Estimate:
    """The estimate of a fresh run of `cfg` in the runs root `root` at `machine`'s load
    (sampled now when None); `sizes`: `planned_sizes(cfg)`, when the caller keeps it."""
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


def launch_estimate(cfg: TrainConfig, root: str | Path | None = None) -> Estimate | None:
    """The estimate of a run of `cfg` launched now, as the Train page shows it and the CLI
    makes it before it launches (`launch_training` records what it is given), or None when
    it cannot be made (a dataset whose size only loading tells, or a name that names
    nothing: the run itself says why)."""
    try:
        return estimate_for(cfg, root)
    except (ValueError, OSError, KeyError, TypeError):  # DataError is a ValueError
        return None


def planned_sizes(cfg: TrainConfig) -> RunSizes:
    """The item counts a fresh run of `cfg` will have (an upper bound: held-out questions
    that repeat training ones are dropped only when the run loads them). DataError when a
    dataset's size is known only once it is loaded."""
    from calm_core.training.methods import get_method

    counts = SimpleNamespace(  # RunSizes.of reads only the sets' lengths
        train=range(_count(cfg.train_data, cfg.train_limit)),
        heldout=range(_count(cfg.heldout_data, cfg.heldout_limit)),
        evals={name: range(_count(name, cfg.eval_limit)) for name in cfg.eval_data},
    )
    shape = model_shape(cfg.model)
    fills = cfg.frozen_prefix and cfg.lora.layers is not None and (shape is None or cfg.lora.layers < shape[1])
    uses_head = bool(get_method(cfg.method).USES_HEAD)
    recommends = bool(getattr(_task(cfg), "RECOMMENDS", False))
    return RunSizes.of(cfg, counts, fills=fills, uses_head=uses_head, selects=task_selects(cfg), recommends=recommends)


def _count(name: str, limit: int | None) -> int:
    count = item_count(name, limit)
    if count is None:
        raise DataError(f"The size of `{name}` is known only once the run loads it: set a limit to estimate")
    return count


def task_selects(cfg: TrainConfig) -> bool:
    """Whether `cfg`'s task has a calibrated stop (step 0 evaluated, a probe, an early end)."""
    return bool(getattr(_task(cfg), "SELECTS", False))


def _task(cfg: TrainConfig) -> Any:
    return get_task(cfg.task)


def model_shape(name: str) -> tuple[int, int] | None:
    """(parameters, layers) from a local model's config.json, without loading the model;
    None when it cannot be read."""
    if name == "embedded":
        return EMBEDDED_SHAPE
    folder = _named_folder(name) or Path(name)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        h, layers, vocab = int(config["hidden_size"]), int(config["num_hidden_layers"]), int(config["vocab_size"])
        inter = int(config.get("intermediate_size", 4 * h))
        heads = int(config.get("num_attention_heads", 1))
        kv = h * int(config.get("num_key_value_heads", heads)) // heads
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * inter + 2 * h  # attention, MLP, norms
    embeddings = vocab * h * (1 if config.get("tie_word_embeddings", True) else 2)
    return layers * per_layer + embeddings + h, layers


def _named_folder(name: str) -> Path | None:
    """A named model's converted folder (gemma3-270m), once it has been converted."""
    from calm_core.scoring.models import converted_dir, named_model

    return converted_dir(name) if named_model(name) else None
