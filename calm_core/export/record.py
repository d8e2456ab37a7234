"""calm_export.json: what an export folder (folder.py) or a merged model (merged.py)
holds and everything needed to use it. A module of its own, so both writers import it
and neither imports the other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from safetensors import safe_open

import calm_core
from calm_core.export.hub_id import base_licence, portable_base_model
from calm_core.export.thermometer import THERMOMETER_FILE, thermometer_record
from calm_core.paths import cache_dir
from calm_core.provenance import git_commit
from calm_core.runs.portable import Portable
from calm_core.runs.records import RunEnvironment
from calm_core.runs.rundir import RunDir
from calm_core.scoring.prompts import ScoringConfig

EXPORT_FILE = "calm_export.json"  # read by calm_head.read_export


def export_record(run: RunDir, step: int, checkpoint: Path) -> dict[str, Any]:
    """calm_export.json: what the folder holds and everything needed to use it. The base
    model by hub id, public name and fingerprint (runs/portable.py), never its path."""
    from calm_core.calibration.head import CalibrationHead
    from calm_core.calibration.head_base import HEAD_FILENAME

    config = run.config
    train = config.train
    if not train:
        raise ValueError(f"Expected the training settings (`train`) in config.json of run {run.run_id}, but found none")
    hub_id, how = portable_base_model(train.model)
    portable = Portable.of(run)
    has_head = (checkpoint / HEAD_FILENAME).is_file()
    head = CalibrationHead.load(checkpoint) if has_head else None
    scope = head.scope if head is not None else None
    results = run.results_or_none()
    ts = results.calibrator("ts") if results is not None else None
    environment = config.environment
    model = train.model
    return {
        "format": "calm_studio.export",
        "format_version": 1,
        "run_id": run.run_id,
        "step": step,
        "method": train.required("method"),
        "task": train.task,
        "base_model_hub_id": hub_id,
        "base_model_hub_id_from": portable.text(how),
        "base_model_setting": portable.model_name,  # `embedded`, a hub id, or a local model's base name
        "base_model_fingerprint": portable.fingerprint,  # its files' hash (provenance.model_fingerprint)
        "base_model_dtype": _model_dtype(run),  # how the run loaded it
        "base_model_local_copy": local_copy(model),  # under CALM Studio's cache
        "base_model_licence": base_licence(model),  # as the model's source states it; None: nothing says
        "adapter_zero": adapter_is_zero(checkpoint),  # delta W = B A = 0: the base model's own weights
        **steps_record(run),
        "head_scope": scope,
        "center": None if head is None else head.centred,  # as CalibrationHead.forward applies it
        "scoring": ScoringConfig(rule=train.required("scoring"), chat_template=train.chat_template).to_dict(),
        "ts_temperature": ts.temperature if ts is not None else None,
        "ts_fit_on": portable.data(ts.fit_on if ts is not None else None),
        "thermometer": thermometer_record(checkpoint / THERMOMETER_FILE),
        "calm_core": {"version": calm_core.__version__, "git": git_commit()},
        "trained_with": _trained_with(environment),
    }


def _trained_with(environment: RunEnvironment | None) -> dict[str, Any]:
    """The commit and package versions the run was trained with (config.json's `environment`)."""
    if environment is None:
        return {"git": None, "versions": None}
    versions = dict(environment.versions) if environment.versions is not None else None
    return {"git": environment.git, "versions": versions}


def steps_record(run: RunDir) -> dict[str, Any]:
    """How far the run went: `steps_run` (status.json's last step; None when it has no
    status), `step_limit` (config.json's `steps`) and `stopped_early` (the calibrated stop's
    step, None when the run went to its limit). The card says these, never the limit alone."""
    status = run.status_or_none()
    results = run.results_or_none()
    selection = (status.selection if status is not None else None) or (results.selection if results else None)
    return {
        "steps_run": status.step if status is not None else None,
        "step_limit": run.config.train.steps,
        "stopped_early": selection.stopped_early if selection is not None else None,
    }


def adapter_is_zero(checkpoint: Path) -> bool:
    """Whether every LoRA B matrix of `checkpoint`'s adapter is zero (a post-hoc variant's
    zeroed adapter, or step 0's untrained one): merged, it changes no weight."""
    file = checkpoint / "adapter_model.safetensors"
    if not file.is_file():
        return False
    with safe_open(str(file), framework="pt") as tensors:
        return all(not tensors.get_tensor(key).any() for key in tensors.keys() if "lora_B" in key)


def variant_record(run: RunDir, variant: str) -> dict[str, Any]:
    """The exported variant's part of calm_export.json: its name, what its post-hoc
    calibrator was fitted on (`fit`: results.json's `fit_on` and `calibrate_on`, None for
    the trained model and the untouched one) and its saved selective threshold."""
    results = run.results_or_none()
    fitted = results.calibrator(variant) if results is not None else None
    fit = (
        {"data": fitted.fit_on, "calibrate_on": fitted.calibrate_on}
        if fitted is not None and fitted.fit_on is not None
        else None
    )
    return {"variant": variant, "fit": fit, "selective": selective_record(run, variant)}


def _model_dtype(run: RunDir) -> str | None:
    """The dtype the run loaded its base model in, None when its status cannot tell."""
    status = run.status_or_none()
    return status.model_dtype if status is not None else None


def local_copy(model: str) -> str | None:
    """A named model's converted folder relative to CALM Studio's cache (`models/<slug>-<key>`),
    which the card's snippet loads offline; None for other models or before its first load."""
    from calm_core.scoring.models import converted_dir, named_model

    if named_model(model) is None:
        return None
    folder = converted_dir(model.strip())
    return folder.relative_to(cache_dir()).as_posix() if folder is not None else None


def selective_record(run: RunDir, variant: str) -> dict[str, Any] | None:
    """The selective-answering threshold saved with the run (`calm selective --save`, or
    Compare's button: selective.json) when it was chosen for the variant being exported;
    None otherwise, since another variant's threshold means nothing for these scores."""
    saved = run.selective()
    if not saved or saved.get("variant") != variant:
        return None
    keys = ("rule", "rule_text", "target_error", "delta", "threshold", "coverage", "qhat", "n_heldout", "guarantee")
    return {key: saved.get(key) for key in (*keys, "assumption")}
