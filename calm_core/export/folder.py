"""`calm export`: a trained run as a folder that loads with transformers + peft alone.

    folder = export_run(RunDir.at(run_id), Path("my-export"))   # refuses a non-empty target
    data = export_zip(run)                                       # the same folder as zip bytes (studio download)

The folder (from the step the calibrated stop selected, `selected/`, else the run's latest
complete checkpoint):
    adapter_model.safetensors, adapter_config.json   the PEFT adapter; base_model_name_or_path is a
                                                     hub id (`hub_id.portable_base_model`), not a path
    calibration_head.safetensors                     the head's (l, s), for runs whose method has one;
                                                     an adaptive head's (w, b, mean, projection) for
                                                     `--scope adaptive` runs and `--variant ats`
    thermometer.safetensors                          `--variant thermometer` instead of a head: the
                                                     thermometer's (w, b, mean, projection), float64
    calm_head.py                                     stand-alone head + option scoring (template/):
                                                     imports torch, safetensors, transformers only
    calm_export.json                                 base model hub id, public name and fingerprint, run,
                                                     step, method, scoring rule, head scope and centring,
                                                     TS temperature, the thermometer's model, rule and
                                                     training sets, calm_core version and commit
    calm_config.json                                 the run's config.json, the model and datasets by name
    README.md                                        Hugging Face model card: YAML front matter (base_model,
                                                     library_name: peft, tags, a model-index of the calibration
                                                     table from results.json), how to load it, the table
                                                     (model_card.py)

With `merged=True` (`calm export --merged`) the folder is a plain transformers model
instead: the adapter merged, the head folded into the LM head where it can be, the card's
formula where it cannot (export/merged.py; its card merged_card.py). It is
staged and renamed into place the same way.

No file of the folder holds a local path (runs/portable.py): the model is named by its
hub id, else its directory's name, with a fingerprint of its files; every other path the run
knows of becomes a name or a placeholder (`~`, `$CALM_WORKSPACE`).

It is written into a hidden sibling of the target and renamed into place, so a failure
leaves no half-written export. This module picks the step or variant and writes the folder;
the base model's hub id (`hub_id`), the model card (`model_card`) and the thermometer's
checks and file (`export_thermometer`) have their own modules.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from calm_core.calibration.head_base import HEAD_FILENAME, Head
from calm_core.calibration.posthoc import calibrators, from_results
from calm_core.export.model_card import export_card
from calm_core.export.record import EXPORT_FILE, export_record, variant_record
from calm_core.export.thermometer import (
    THERMOMETER,
    THERMOMETER_FILE,
    save_thermometer,
    thermometer_for_export,
)
from calm_core.io import default_mode
from calm_core.results.verdict import posthoc_exports, variant_label
from calm_core.runs.portable import Portable, portable_config
from calm_core.runs.records import RunResults
from calm_core.runs.rundir import RunDir

if TYPE_CHECKING:
    from calm_core.calibration.thermometer import Thermometer

HEAD_MODULE = Path(__file__).resolve().parent / "template" / "calm_head.py"


def export_run(
    run: RunDir, target: Path, variant: str | None = None, thermometer: Path | None = None, merged: bool = False
) -> Path:
    """Write the export folder of `run` at `target` (new, or an empty folder); returns it.

    `variant`: the trained model (None or its method name: the selected step), `base`
    (the untouched model: the adapter with its B matrices zeroed, no head), `ts` (the
    same with a scalar head at TS's temperature, which is exactly temperature scaling),
    `vs` (the same with an uncentred options head, which is exactly vector scaling), `ats`
    (the same with an adaptive head holding results.json's ATS fit: a temperature per
    question from its hidden state; an ATS that chose one temperature is a scalar head),
    `thermometer` (the same with `thermometer`, a file of calibration.thermometer, by
    default the embedded model's shipped one: one temperature per set of questions, from
    their mean hidden state) or `recommended` (results.json's recommendation). Every
    variant loads the same way.

    `merged`: a plain transformers folder instead, the adapter merged and the head folded
    into the LM head where it can be (export/merged.py)."""
    target = Path(target)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ValueError(
            f"Expected `target` to be a new or empty folder, but {target} "
            f"{'has files' if target.is_dir() else 'is a file'}"
        )
    if thermometer is not None and variant != THERMOMETER:
        raise ValueError(f"Expected `thermometer` only with the {THERMOMETER} variant, but the variant is {variant!r}")
    thermo = thermometer_for_export(run, thermometer) if variant == THERMOMETER else None  # refused before any write
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".export", dir=target.parent))
    try:
        os.chmod(staging, default_mode(directory=True))
        with tempfile.TemporaryDirectory(prefix="calm-variant-") as scratch:
            step, source, name = _variant_source(run, variant, Path(scratch), thermo)
            if merged:
                from calm_core.export.merged import write_merged_folder

                write_merged_folder(run, step, source, staging, name)
            else:
                _write_folder(run, step, source, staging, name)
        os.replace(staging, target)  # an empty target directory is replaced whole
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def recommended_export(run: RunDir) -> str | None:
    """The recommended variant when it is not the trained model and exports as a folder
    (`base`, `ts`, `vs`, `ats`), else None: the studio then offers it beside the trained model."""
    try:
        results = run.results_or_none()
        method = run.config.train_method
    except (OSError, ValueError):
        return None
    variant = results.recommended if results is not None else None
    if results is not None and variant in posthoc_exports() and variant != "base":
        try:
            posthoc_head(run, results, variant)
        except ValueError:  # a VS weight <= 0, an ATS recorded without its weights: the export says why
            return None
    return variant if variant in posthoc_exports() and variant != method else None


def saved_threshold_variant(run: RunDir, variant: str | None) -> tuple[str | None, str | None]:
    """(the variant to export, a line to show or None) given the `variant` asked for and the
    run's saved selective threshold (selective.json: `calm selective --save`), which an
    export carries only for the variant it was chosen for. Nothing asked: the saved
    threshold's variant where it exports as a folder, else the trained model; a threshold
    that is not in the export is said in one line, never dropped in silence."""
    saved = (run.selective() or {}).get("variant")
    method = run.config.train_method or "calm"
    if not isinstance(saved, str):
        return variant, None
    if variant is None and saved != method and saved in (*posthoc_exports(), THERMOMETER):
        return saved, (
            f"exporting {saved}: the saved selective threshold is {saved}'s (`calm selective --save`); "
            f"--variant {method} exports the trained model without it"
        )
    results = run.results_or_none()
    exported = (results.recommended if results is not None else None) if variant == "recommended" else variant
    exported = exported or method
    if exported == saved:
        return variant, None
    return variant, (
        f"note: the saved selective threshold belongs to {saved}, not {exported}: this export has none "
        f"(`--variant {saved}` carries it; `calm selective {run.run_id} --variant {exported} --save` saves one)"
    )


def _variant_source(
    run: RunDir, variant: str | None, scratch: Path, thermometer: "Thermometer | None" = None
) -> tuple[int, Path, str]:
    """(step, directory with the adapter and head (or thermometer) to export, variant name)."""
    import torch
    from safetensors.torch import load_file, save_file

    method = run.config.train_method or "calm"
    results = run.results_or_none() or RunResults(rows=())
    if variant == "recommended":
        variant = results.recommended

        if variant is None:
            raise ValueError(f"Expected a recommendation in results.json of run {run.run_id}, but it has none")
    step, checkpoint = run.exported_step()
    if variant in (None, method):
        return step, checkpoint, method
    if variant not in (*posthoc_exports(), THERMOMETER):
        raise ValueError(
            f"Expected `variant` to be one of {[method, *posthoc_exports(), THERMOMETER, 'recommended']}, "
            f"but got {variant!r}"
        )
    shutil.copyfile(checkpoint / "adapter_config.json", scratch / "adapter_config.json")
    adapter = load_file(str(checkpoint / "adapter_model.safetensors"))
    zeroed = {k: torch.zeros_like(v) if "lora_B" in k else v for k, v in adapter.items()}  # delta W = B A = 0
    save_file(zeroed, str(scratch / "adapter_model.safetensors"))
    if variant != "base" and variant in posthoc_exports():
        posthoc_head(run, results, variant).save(scratch)
    if variant == THERMOMETER:
        thermometer = thermometer_for_export(run) if thermometer is None else thermometer
        save_thermometer(thermometer, scratch / THERMOMETER_FILE)
    return step, scratch, variant


def posthoc_head(run: RunDir, results: RunResults, variant: str) -> Head:
    """The head of post-hoc calibrator `variant` as results.json records its fit: the
    calibrator's own `export_head` (calibration/posthoc/), or ValueError naming the run and
    why it has none (no fit and its note, a fit with no such head)."""
    cls = calibrators().get(variant)
    if cls is None or not cls.exports():
        raise ValueError(f"Expected a post-hoc calibrator that exports as a head, but got {variant!r}")
    label = variant_label(variant)
    record = results.calibrator(variant)
    if record is None or record.note is not None:
        why = (record.note if record is not None else None) or f"results.json has no `{variant}` fit"
        raise ValueError(f"Expected a fitted {label} in run {run.run_id}, but {why}")
    where = f"`{variant}` in results.json of run {run.run_id}"
    try:
        head = from_results(variant, record, where).export_head()
    except ValueError as exc:
        raise ValueError(f"Expected a {label} that exports in run {run.run_id}, but: {exc}") from None
    if head is None:
        raise ValueError(f"Expected a post-hoc calibrator that exports as a head, but {variant!r} built none")
    return head


def _write_folder(run: RunDir, step: int, checkpoint: Path, folder: Path, variant: str) -> None:
    """Every file of the export; each text file passes through the run's `Portable` last,
    so no local path leaves the machine (`calm_config.json` is config.json with the model
    and datasets by name)."""
    portable = Portable.of(run)
    record = portable.data({**export_record(run, step, checkpoint), **variant_record(run, variant)})
    adapter = json.loads((checkpoint / "adapter_config.json").read_text(encoding="utf-8"))
    adapter["base_model_name_or_path"] = record["base_model_hub_id"]
    _write_json(folder / "adapter_config.json", portable.data(adapter))
    shutil.copyfile(checkpoint / "adapter_model.safetensors", folder / "adapter_model.safetensors")
    if record["head_scope"] is not None:
        shutil.copyfile(checkpoint / HEAD_FILENAME, folder / HEAD_FILENAME)
    if record["thermometer"] is not None:
        shutil.copyfile(checkpoint / THERMOMETER_FILE, folder / THERMOMETER_FILE)
    shutil.copyfile(HEAD_MODULE, folder / "calm_head.py")
    _write_json(folder / "calm_config.json", portable.data(portable_config(run.config)))
    _write_json(folder / EXPORT_FILE, record)
    (folder / "README.md").write_text(portable.text(export_card(run, record)), encoding="utf-8")


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def export_zip(run: RunDir, variant: str | None = None, thermometer: Path | None = None) -> bytes:
    """The export folder as a zip archive in memory; its entries sit under `<run_id>/`."""
    buffer = io.BytesIO()
    with tempfile.TemporaryDirectory(prefix="calm-export-") as scratch:
        folder = export_run(run, Path(scratch) / run.run_id, variant, thermometer)
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(folder.iterdir()):
                archive.write(path, f"{run.run_id}/{path.name}")
    return buffer.getvalue()
