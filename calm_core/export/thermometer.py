"""`calm export RUN_ID DIR --variant thermometer`: the untouched model with a thermometer.

    thermo = thermometer_for_export(run)          # the shipped one, refused unless it fits the run
    save_thermometer(thermo, folder / THERMOMETER_FILE)
    thermometer_record(folder / THERMOMETER_FILE) # calm_export.json's `thermometer`

A thermometer (calibration.thermometer) is not a head: it gives one temperature to a whole
set of questions, read from the mean of their hidden states, so the folder holds it in its
own file and calm_head.py's `Thermometer` reads it (`set_probabilities` scores a set). It
is never a run's recommendation (it is not fitted on the run's S_V), so the studio does
not offer it; `export.folder.export_run` writes it on request. Its numbers are stored in float64
and its names by their public spelling (runs/portable.py): no local path in the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from safetensors import safe_open

from calm_core.runs.portable import public_dataset_name, public_model_name
from calm_core.runs.rundir import RunDir
from calm_core.scoring.prompts import ScoringConfig

if TYPE_CHECKING:
    from calm_core.calibration.thermometer import Thermometer

THERMOMETER = "thermometer"  # the variant: the untouched model and a thermometer
THERMOMETER_FILE = "thermometer.safetensors"  # read by calm_head.Thermometer.from_folder
_FORMAT = "calm_studio.thermometer"  # metadata tag, so another safetensors file is refused


def thermometer_for_export(run: RunDir, path: Path | None = None) -> "Thermometer":
    """The thermometer at `path` (default: the run's model's own, thermometer_path), refused unless
    it fits the run: a multiple-choice run, the model whose hidden states it reads (it must
    name one: an export says whose states it reads) and, where it records one, the scoring
    rule its logits and states came from (the state read is the rule's: cloze, the
    context's last token; letter, the answer position)."""
    from calm_core.calibration.thermometer import build_command, load_thermometer, mismatch, thermometer_path

    train = run.config.train
    model = train.model
    path = thermometer_path(model) if path is None else Path(path)
    if train.task != "mcqa":
        raise ValueError(
            f"Expected a multiple-choice run for the {THERMOMETER} variant, but run {run.run_id} is {train.task!r}"
        )
    if not path.is_file():
        raise ValueError(
            f"Expected a thermometer file at {path}, but there is none: build {model}'s with `{build_command(model)}`"
        )
    thermo = load_thermometer(path)
    if not thermo.model:
        raise ValueError(f"Expected the thermometer at {path} to name its model (`model`), but it names none")
    rule = ScoringConfig(rule=train.scoring or "cloze", chat_template=train.chat_template).name
    why = mismatch(thermo, model, rule)
    if why:
        raise ValueError(f"Expected a thermometer of run {run.run_id}'s model {model} under {rule}, but {path} {why}")
    return thermo


def save_thermometer(thermo: "Thermometer", file: Path) -> None:
    """thermometer.safetensors: feature_mean (d,), projection (k, d), weights (k,) and bias
    in float64 (the thermometer's own numbers: no rounding between studio and export); the
    floor, its model, rule and training sets by public name in the metadata. A thermometer
    that chose one temperature (k = 0) stores a mean and projection of width 0."""
    import torch
    from safetensors.torch import save_file

    from calm_core.calibration.thermometer import TAU_FLOOR

    k = len(thermo.weights)
    mean = np.asarray(thermo.mean if k else [], dtype=np.float64)  # (d,), or (0,) for k = 0
    tensors = {
        "feature_mean": torch.from_numpy(mean),
        "projection": torch.from_numpy(
            np.asarray(thermo.projection if k else [], dtype=np.float64).reshape(k, len(mean))
        ),
        "weights": torch.tensor(thermo.weights, dtype=torch.float64).reshape(k),
        "bias": torch.tensor(thermo.bias, dtype=torch.float64),  # a scalar
    }
    metadata = {
        "format": _FORMAT,
        "link": "softplus",
        "floor": repr(TAU_FLOOR),
        "model": public_model_name(thermo.model),
        "scoring": thermo.scoring,
        "trained_on": json.dumps([public_dataset_name(name) for name in thermo.trained_on]),
    }
    save_file({name: t.contiguous() for name, t in tensors.items()}, str(file), metadata=metadata)


def thermometer_record(file: Path) -> dict[str, Any] | None:
    """calm_export.json's `thermometer`: the file's model, rule, training sets and number of
    components; None without one."""
    if not file.is_file():
        return None
    with safe_open(str(file), framework="pt") as f:
        metadata, components = dict(f.metadata() or {}), f.get_slice("weights").get_shape()[0]
    return {
        "file": file.name,
        "model": metadata["model"],
        "scoring": metadata["scoring"] or None,
        "trained_on": json.loads(metadata["trained_on"]),
        "components": components,
        "floor": float(metadata["floor"]),
    }
