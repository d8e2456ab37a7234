"""A model card's metadata, built by huggingface_hub (`ModelCardData`, `EvalResult`).

    data = card_data(run, record, rows)        # ModelCardData; data.to_yaml() is the front matter
    hub_dataset("hf:allenai/ai2_arc:ARC-Easy:test")   # ("allenai/ai2_arc", "ARC-Easy", "test")

The Hub reads `base_model` (the card links to it), `library_name`, `tags`, `datasets` (Hub
dataset ids, linked on the Hub) and the `model-index` that `eval_results` become. A
dataset's `type` is its Hub id where the run read it from the Hub (`hf:<id>[:<config>]:<split>`),
with its config and split; built-in, uploaded and local data keep the project's name, which
names no Hub dataset.
"""

from __future__ import annotations

import re
from typing import Any

from calm_core.runs.rundir import RunDir

CARD_TAGS = (
    "calibration",
    "calm",
    "calm-studio",
    "lora",
    "peft",
)  # every export's Hub tags; the task's and method's follow
CARD_METRICS = (("acc", "accuracy"), ("ece", "ece"), ("auroc", "auroc"))  # row key -> model-index metric type
CARD_TASKS = {"mcqa": ("multiple-choice", "Multiple choice QA"), "openqa": ("question-answering", "Open-answer QA")}
_HUB_DATASET = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")  # "org/name" or a canonical "name"
_SLICE = re.compile(r"\[\d*:\d*\]$")  # catalog slices: `name[0:100]`


def hub_dataset(name: str) -> tuple[str, str | None, str | None] | None:
    """(Hub id, config, split) of a catalog name read from the Hub (`hf:<id>`,
    `hf:<id>:<split>`, `hf:<id>:<config>:<split>`, a slice allowed), else None: built-in,
    uploaded, split and file data, and `hf:` of a local `save_to_disk` folder."""
    if not name.startswith("hf:"):
        return None
    parts = _SLICE.sub("", name[len("hf:") :]).split(":")
    if len(parts) > 3 or not all(parts) or not _HUB_DATASET.match(parts[0]):
        return None
    return parts[0], parts[1] if len(parts) == 3 else None, parts[-1] if len(parts) > 1 else None


def card_data(run: RunDir, record: dict[str, Any], rows: list[dict[str, Any]], library: str = "peft") -> Any:
    """ModelCardData: `base_model` (the hub id), `library_name` (peft for the adapter folder,
    transformers for a merged one), tags, the run's Hub datasets and `eval_results`."""
    from huggingface_hub import ModelCardData

    tags = [*CARD_TAGS, CARD_TASKS[record["task"]][0], f"method-{record['method']}"]
    if library != "peft":
        tags.append("merged")
    train = run.config.train
    named = [train.get("train_data"), train.get("heldout_data"), *(train.get("eval_data") or [])]
    hub_ids = list(dict.fromkeys(found[0] for found in map(hub_dataset, filter(None, named)) if found))
    results = eval_results(record, rows)
    return ModelCardData(
        base_model=record["base_model_hub_id"],
        library_name=library,
        tags=tags,
        datasets=hub_ids or None,
        model_name=run.run_id if results else None,
        eval_results=results or None,
    )


def eval_results(record: dict[str, Any], rows: list[dict[str, Any]]) -> list[Any]:
    """EvalResult per evaluation set (the run's own, then those added after training, named
    `<set> (added)`) and metric: acc, ECE (15 bins) and AUROC of the exported variant (types
    accuracy, ece, auroc) and of the untouched base model (base_accuracy, ...), results.json's
    values as they are; a missing value (an AUROC on a set with one class) is left out.
    Self-reported: not `verified`."""
    from huggingface_hub import EvalResult

    exported = record.get("variant", record["method"])
    task_type, task_name = CARD_TASKS[record["task"]]
    out = []
    for dataset, raw in dict.fromkeys((r["dataset"], r["dataset_raw"]) for r in rows):
        by_variant = {r["variant_raw"]: r for r in rows if r["dataset"] == dataset}
        metrics = _card_metrics(by_variant.get(exported), exported, "")
        if exported != "base":
            metrics += _card_metrics(by_variant.get("base"), "base", "base_")
        hub = hub_dataset(raw)
        keys = ("dataset_type", "dataset_config", "dataset_split")
        where = {"dataset_type": raw} if hub is None else dict(zip(keys, hub, strict=True))
        out += [
            EvalResult(task_type=task_type, task_name=task_name, dataset_name=dataset, **where, **metric)
            for metric in metrics
        ]
    return out


def _card_metrics(row: dict[str, Any] | None, variant: str, prefix: str) -> list[dict[str, Any]]:
    """One variant's EvalResult metric fields (its row's acc, ece, auroc), [] without a row."""
    from calm_core.calibration.metrics.columns import is_missing

    if row is None:
        return []
    return [
        {"metric_type": prefix + kind, "metric_value": float(row[key]), "metric_name": f"{key} ({variant})"}
        for key, kind in CARD_METRICS
        if key in row and not is_missing(row[key])
    ]
