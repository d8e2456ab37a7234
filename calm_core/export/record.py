"""calm_export.json: what an export folder (folder.py) or a merged model (merged.py)
holds and everything needed to use it. A module of its own, so both writers import it
and neither imports the other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from calm_core.export.hub_id import portable_base_model
from calm_core.export.thermometer import THERMOMETER_FILE, thermometer_record
from calm_core.runs.portable import Portable
from calm_core.runs.rundir import RunDir

EXPORT_FILE = "calm_export.json"  # read by calm_head.read_export


def export_record(run: RunDir, step: int, checkpoint: Path) -> dict[str, Any]:
    """calm_export.json: what the folder holds and everything needed to use it. The base
    model by hub id, public name and fingerprint (runs/portable.py), never its path."""
    import calm_core
    from calm_core.calibration.head import CalibrationHead
    from calm_core.calibration.head_base import HEAD_FILENAME
    from calm_core.provenance import git_commit
    from calm_core.scoring.prompts import ScoringConfig

    config = run.config
    train = config.train
    if not train:
        raise ValueError(f"Expected the training settings (`train`) in config.json of run {run.run_id}, but found none")
    hub_id, how = portable_base_model(str(train.get("model", "embedded")))
    portable = Portable.of(run)
    has_head = (checkpoint / HEAD_FILENAME).is_file()
    head = CalibrationHead.load(checkpoint) if has_head else None
    scope = head.scope if head is not None else None
    results = run.results_or_none()
    ts = (results.calibrator("ts") if results is not None else None) or {}
    environment = config.environment or {}
    return {
        "format": "calm_studio.export",
        "format_version": 1,
        "run_id": run.run_id,
        "step": step,
        "method": train["method"],
        "task": train.get("task", "mcqa"),
        "base_model_hub_id": hub_id,
        "base_model_hub_id_from": portable.text(how),
        "base_model_setting": portable.model_name,  # `embedded`, a hub id, or a local model's base name
        "base_model_fingerprint": portable.fingerprint,  # its files' hash (provenance.model_fingerprint)
        "base_model_dtype": _model_dtype(run),  # how the run loaded it
        "base_model_local_copy": local_copy(str(train.get("model", "embedded"))),  # under CALM Studio's cache
        "head_scope": scope,
        "center": None if head is None else head.centred,  # as CalibrationHead.forward applies it
        "scoring": ScoringConfig(rule=train["scoring"], chat_template=bool(train.get("chat_template"))).to_dict(),
        "ts_temperature": ts.get("temperature"),
        "ts_fit_on": portable.data(ts.get("fit_on")),
        "thermometer": thermometer_record(checkpoint / THERMOMETER_FILE),
        "calm_core": {"version": calm_core.__version__, "git": git_commit()},
        "trained_with": {"git": environment.get("git"), "versions": environment.get("versions")},
    }


def _model_dtype(run: RunDir) -> str | None:
    """The dtype the run loaded its base model in, None when its status cannot tell."""
    status = run.status_or_none()
    return status.model_dtype if status is not None else None


def local_copy(model: str) -> str | None:
    """A named model's converted folder relative to CALM Studio's cache (`models/<slug>-<key>`),
    which the card's snippet loads offline; None for other models or before its first load."""
    from calm_core.paths import cache_dir
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
