"""A model card's metadata, built by huggingface_hub (`ModelCardData`, `EvalResult`).

    data = card_data(run, record, rows)        # ModelCardData; data.to_yaml() is the front matter
    hub_dataset("hf:allenai/ai2_arc:ARC-Easy:test")   # ("allenai/ai2_arc", "ARC-Easy", "test")

The Hub reads `base_model` (the card links to it), `license` (the base model's terms),
`pipeline_tag`, `library_name`, `tags`, `datasets` (Hub dataset ids, linked on the Hub) and
the `model-index` that `eval_results` become. Only sets the run read from the Hub
(`hf:<id>[:<config>]:<split>`) have a Hub id: they alone are in `datasets` and the
model-index, with config and split; built-in, uploaded and local sets are named in the
card's text (model_card.local_sets_note).
"""

from __future__ import annotations

import re
from typing import Any

from calm_core.calibration.metrics.columns import is_missing
from calm_core.runs.rundir import RunDir

CARD_TAGS = (
    "calibration",
    "calm",
    "calm-studio",
    "lora",
    "peft",
)  # every export's Hub tags; the task's and method's follow
CARD_METRICS = (("acc", "accuracy"), ("ece", "ece"), ("auroc", "roc_auc"))  # row key -> the Hub's metric id
PIPELINE_TAG = "text-generation"  # what the folder's model does on the Hub (a causal LM, adapter or merged)
HUB_LICENCES = {"apache-2.0": "apache-2.0", "mit": "mit", "gemma terms of use": "gemma"}  # stated -> Hub id
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
    named = [train.train_data, train.heldout_data, *train.eval_data]
    hub_ids = list(dict.fromkeys(found[0] for found in map(hub_dataset, filter(None, named)) if found))
    results = eval_results(record, rows)
    licence = hub_licence(record.get("base_model_licence"))
    return ModelCardData(
        base_model=record["base_model_hub_id"],
        license=licence["license"],
        license_name=licence.get("license_name"),
        pipeline_tag=PIPELINE_TAG,
        library_name=library,
        tags=tags,
        datasets=hub_ids or None,
        model_name=run.run_id if results else None,
        eval_results=results or None,
    )


def hub_licence(stated: str | None) -> dict[str, str]:
    """The card's `license` for the base model's terms as its source states them
    (named_models.NamedModel.licence, a README's `license`): the Hub's id where it has one,
    `other` with the stated name otherwise, `unknown` when nothing says."""
    if not stated:
        return {"license": "unknown"}
    key = stated.split("(")[0].strip().lower()
    if key in HUB_LICENCES:
        return {"license": HUB_LICENCES[key]}
    if re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", key):  # already an id (a README's `license: llama3`)
        return {"license": key}
    return {"license": "other", "license_name": re.sub(r"[^a-z0-9]+", "-", key).strip("-")}


def eval_results(record: dict[str, Any], rows: list[dict[str, Any]]) -> list[Any]:
    """EvalResult per evaluation set read from the Hub (the run's own, then those added after
    training, named `<set> (added)`) and metric: acc, ECE (15 bins) and AUROC of the exported
    variant (the Hub's metric ids accuracy, ece, roc_auc), results.json's values as they are;
    a missing value (an AUROC on a set with one class) is left out. A set that is not a Hub
    dataset (built-in, uploaded, a file) has no id for `dataset.type`, and the base model's
    figures are another model's: both are in the card's table, not here. Self-reported:
    not `verified`."""
    from huggingface_hub import EvalResult

    exported = record.get("variant", record["method"])
    task_type, task_name = CARD_TASKS[record["task"]]
    out = []
    for dataset, raw in dict.fromkeys((r["dataset"], r["dataset_raw"]) for r in rows):
        by_variant = {r["variant_raw"]: r for r in rows if r["dataset"] == dataset}
        hub = hub_dataset(raw)
        if hub is None:
            continue
        metrics = _card_metrics(by_variant.get(exported), exported)
        hub_id, config, split = hub
        out += [
            EvalResult(
                task_type=task_type,
                task_name=task_name,
                dataset_name=dataset,
                dataset_type=hub_id,
                dataset_config=config,
                dataset_split=split,
                **metric,
            )
            for metric in metrics
        ]
    return out


def _card_metrics(row: dict[str, Any] | None, variant: str) -> list[dict[str, Any]]:
    """One variant's EvalResult metric fields (its row's acc, ece, auroc), [] without a row."""
    if row is None:
        return []
    return [
        {"metric_type": kind, "metric_value": float(row[key]), "metric_name": f"{key} ({variant})"}
        for key, kind in CARD_METRICS
        if key in row and not is_missing(row[key])
    ]
