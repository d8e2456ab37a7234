"""Evaluate a finished run on more data, after training: `calm eval --run` and Compare's
"Evaluate on more data".

    rows = evaluate_run(RunDir.at(run_id), ["arc/easy_test"], limit=run_eval_limit(run))

A run's final evaluation measures it on the sets chosen before training; whether a model
calibrated on one domain stays calibrated on another is the question the paper asks, so
any set can be added later. The rows are the run's own table, computed the same way:

- the trained model at its selected step (`selected/`, else the latest checkpoint, as
  `RunDir.exported_step` picks it), put back into the context its training built
  (`training.run_context.restored_context`) and scored by the task's `added_evaluation`, the
  final evaluation's own code (mcqa and openqa alike);
- `base` and the post-hoc calibrators (`ts`, `vs`) with the parameters the run fitted on
  S_V (results.json), never refitted on the new set;
- items loaded as the run loaded its evaluation sets (`batches.load_data`: its seed, the
  training questions dropped, `limit` defaulting to its `eval_limit`), so the run's own
  evaluation set gives its own rows back (to float32 rounding).

They are stored apart from the final evaluation (`RunDir.add_results`: added_results.json,
predictions under added/eval/), each row marked `added_after_training: true` with the
fingerprint of the items it measured (`data.schema.items_fingerprint`), their number, the
step and the time; `results.tables.compare_rows` shows them as `<set> (added)`.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from calm_core.calibration.posthoc import PosthocCalibrator, calibrators, from_results
from calm_core.data.schema import items_fingerprint
from calm_core.data.stream import max_choices
from calm_core.runs.lifecycle import RunState
from calm_core.runs.records import RunResults
from calm_core.runs.rundir import RunDir
from calm_core.training.tasks import get_task

log = logging.getLogger(__name__)


def check_finished(run: RunDir) -> None:
    """Refuse, in one line, a run that has no final model to measure yet."""
    state = run.state().state
    if state != RunState.FINISHED or not run.has_results():
        raise ValueError(
            f"Expected a finished run, but {run.run_id} is {state}: it can be evaluated on more data "
            f"once its final evaluation has written results.json ({_until_finished(run.run_id, state)})"
        )


def _until_finished(run_id: str, state: str) -> str:
    """What gets a run of `state` to finished: waiting for it, or resuming it."""
    if state in (RunState.QUEUED, RunState.RUNNING, RunState.STOPPING):
        return "wait for it: `calm runs` shows its state, the Monitor page its progress"
    return f"`calm resume {run_id}` continues it from its last checkpoint"


def run_eval_limit(run: RunDir) -> int | None:
    """The run's `eval_limit`: added sets default to as many items as its own sets had."""
    return run.config.train.limit("eval")  # not TrainConfig: from_dict would refuse an older config


def saved_calibrators(results: RunResults) -> dict[str, PosthocCalibrator]:
    """The post-hoc calibrators whose rows the run's table holds, as the run fitted them on
    S_V (their records in results.json); a calibrator missing there (its note) is left out,
    and so is one whose record an older studio wrote without what it now needs (a warning
    says which): the others' rows are still added."""
    variants = {row["variant"] for row in results.rows}
    out: dict[str, PosthocCalibrator] = {}
    for name in calibrators():
        record = results.calibrator(name)
        if name in variants and record is not None and record.note is None:
            try:
                out[name] = from_results(name, record, f"`{name}` in results.json")
            except ValueError as refused:
                log.warning("`%s` is left out of the added rows: %s", name, refused)
    return out


def evaluate_run(
    run: RunDir,
    datasets: Sequence[str],
    limit: int | None,
    device: str = "auto",
    lm: Any = None,
    mappings: Mapping[str, Any] | None = None,
    encoding: str | None = None,
    encodings: Mapping[str, str | None] | None = None,
) -> list[dict[str, Any]]:
    """Score the run's variants on `datasets` (first `limit` items of each), store the rows
    with the run (`RunDir.add_results`, predictions under added/) and return them.

    `lm`: a freshly loaded base model to use (LoRA wraps it in place: never a shared one);
    by default the run's model is loaded on `device` as its training loaded it.
    `mappings` (dataset -> ColumnMapping or its text) and `encoding` (or per dataset,
    `encodings`) read files among `datasets` as `calm eval --mapping --encoding` reads them; the run's own sets, read to
    drop its training questions, are read as it read them."""
    from calm_core.training.autocast import autocast_for
    from calm_core.training.batches import load_data
    from calm_core.training.config import TrainConfig
    from calm_core.training.run_context import restored_context

    check_finished(run)
    names = list(dict.fromkeys(datasets))
    if not names:
        raise ValueError("Expected at least one dataset to evaluate the run on, but got none")
    cfg = dataclasses.replace(TrainConfig.from_dict(run.config.train), eval_data=tuple(names), eval_limit=limit)
    task = get_task(cfg.task)
    fitted = saved_calibrators(run.results())
    reading = {
        name: {"mapping": (mappings or {}).get(name), "encoding": (encodings or {}).get(name, encoding)}
        for name in names
    }
    evals = load_data(cfg, task.ITEM_KIND, reading).evals  # training questions dropped, as from the run's own sets
    for name, items in evals.items():
        if not items:
            raise ValueError(
                f"Expected items in `{name}`, but none is left after removing the run's training questions: "
                "evaluate the run on questions it did not train on (its test split, or another set)"
            )
    step, directory = run.exported_step()
    lm = lm if lm is not None else _load_base(cfg, device)
    ctx = restored_context(cfg, lm, directory, max(max_choices(items) for items in evals.values()))
    with autocast_for(cfg.autocast, lm.device):
        rows = task.added_evaluation(ctx, evals, fitted, run.added_dir)
    added_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    marks = {
        name: {
            "added_after_training": True,
            "fingerprint": items_fingerprint(items),
            "n_items": len(items),
            "limit": limit,
            "step": step,
            "added_at": added_at,
        }
        for name, items in evals.items()
    }
    rows = [{**row, **marks[row["dataset"]]} for row in rows]
    run.add_results(rows)
    return rows


def _load_base(cfg: Any, device: str) -> Any:
    """The run's base model, loaded as `train` loads it (4-bit where the run chose QLoRA)."""
    import torch

    from calm_core.scoring.adapters import quantization_choice
    from calm_core.scoring.models import ModelSpec, load_model

    target = torch.device("cuda" if device != "cpu" and torch.cuda.is_available() else "cpu")
    use_4bit, _ = quantization_choice(cfg.load_in_4bit, target)
    return load_model(ModelSpec(name=cfg.model, device=device, dtype=cfg.dtype, load_in_4bit=use_4bit))
