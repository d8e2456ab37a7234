"""The model card and the export say what happened, read back against the run's records.

Each test builds a run directory by hand (a tiny adapter in `selected/`, status.json,
results.json, selective.json: no training), exports it and checks one claim of the card,
calm_export.json or the folder against the record it comes from: what TS was fitted on
(k-fold on S_T + S_V), the steps run and the selected step of an early-stopped run, what a
merged folder merged (a zero adapter), the licence, pipeline_tag, Hub datasets and metric
names, the merged config's base model, the variant a saved threshold belongs to, and the
weight files' mode.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from calm_core.calibration.head import CalibrationHead
from calm_core.export.folder import export_run
from calm_core.launch import run_config_record
from calm_core.runs.records import ResultRow, RunResults
from calm_core.runs.rundir import RunDir
from tests.test_trainer import small_config

ARC = "hf:allenai/ai2_arc:ARC-Easy:test"
CAPITALS = "builtin/capitals/test"
POOLED_FIT = "builtin/capitals/train + builtin/capitals/validation"


def _rows() -> list[ResultRow]:
    rows = []
    for dataset in (CAPITALS, ARC):
        for variant, acc in (("calm", 0.6), ("base", 0.5), ("ts", 0.5), ("calm_theta_only", 0.55)):
            rows.append(ResultRow.from_json({"dataset": dataset, "variant": variant, "acc": acc, "ece": 0.1,
                                             "auroc": 0.7, "nll": 1.2, "brier": 0.6, "n": 6}))
    return rows


def make_run(root: Path, model: Path, *, name: str = "run", steps: int = 40, ran: int = 16, selected: int = 8,
             calibrate_on: str = "all", moved: bool = True, saved_variant: str | None = None) -> RunDir:
    """A finished run that stopped early at `ran` of `steps` with `selected` exported, TS
    fitted k-fold on S_T + S_V (`calibrate_on` all) or on S_V, a scalar head, and an
    adapter whose B matrices are zero unless `moved`."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    cfg = small_config(model=str(model), steps=steps, scope="scalar", calibrate_on=calibrate_on,
                       eval_data=(CAPITALS, ARC))
    run = RunDir.create(root, name, run_config_record(cfg))
    torch.manual_seed(3)
    net = get_peft_model(AutoModelForCausalLM.from_pretrained(model), LoraConfig(r=2, target_modules=["q_proj"]))
    if moved:
        for key, p in net.named_parameters():
            if "lora_B" in key:
                torch.nn.init.normal_(p, std=0.05)
    with run.writing_selected(selected) as directory:
        net.save_pretrained(directory)
        CalibrationHead("scalar").save(directory)
    selection = {"rule": "nll", "rule_text": "lowest S_V NLL", "selected_step": selected,
                 "selected": {"score": 1.1, "ece": 0.05, "acc": 0.6}, "reference": None,
                 "stopped_early": ran if ran < steps else None, "patience": 4, "lower_tolerance": 0.0}
    run.write_status("finished", step=ran, total_steps=steps, selection=selection)
    fit_on = POOLED_FIT if calibrate_on == "all" else "builtin/capitals/validation"
    run.write_results(RunResults(rows=tuple(_rows()), selection=selection, calibrators={
        "ts": {"temperature": 1.7, "fit_on": fit_on, "calibrate_on": calibrate_on}}))
    if saved_variant:
        run.write_selective({"variant": saved_variant, "rule": "ltt", "rule_text": "learn then test",
                             "target_error": 0.1, "delta": 0.1, "threshold": 0.8, "coverage": 0.9, "qhat": None,
                             "n_heldout": 30, "guarantee": "Error at most 10%.", "assumption": "Exchangeable."})
    return run


def _front(folder: Path) -> dict:
    return yaml.safe_load((folder / "README.md").read_text().split("---\n")[1])


def test_the_card_says_ts_was_fitted_on_s_t_and_s_v_when_it_was(tiny_model_dir: Path, tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs", tiny_model_dir)
    folder = export_run(run, tmp_path / "out", "ts")
    record = json.loads((folder / "calm_export.json").read_text())
    assert record["fit"] == {"data": POOLED_FIT, "calibrate_on": "all"}  # the record the card reads
    card = (folder / "README.md").read_text()
    assert "fitted on S_V" not in card
    assert f"fitted on S_T + S_V (`{POOLED_FIT}`, calibrate_on = all" in card


def test_the_card_says_the_steps_run_and_the_selected_step(tiny_model_dir: Path, tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs", tiny_model_dir, steps=40, ran=16, selected=8)
    folder = export_run(run, tmp_path / "out")
    record = json.loads((folder / "calm_export.json").read_text())
    assert (record["steps_run"], record["step_limit"], record["stopped_early"], record["step"]) == (16, 40, 16, 8)
    card = (folder / "README.md").read_text()
    assert "40 steps" not in card
    assert "16 steps (stopped early; the limit was 40)" in card and "of step 8" in card


@pytest.mark.parametrize("variant, selected", [("ts", 8), (None, 0)])
def test_the_merged_card_says_a_zero_adapter_merged_nothing(tiny_model_dir: Path, tmp_path: Path,
                                                           variant: str | None, selected: int) -> None:
    """TS over the zeroed adapter, and a run whose selected step is 0 (its adapter never moved)."""
    run = make_run(tmp_path / "runs", tiny_model_dir, selected=selected, moved=selected != 0)
    folder = export_run(run, tmp_path / "out", variant, merged=True)
    card = (folder / "README.md").read_text()
    assert json.loads((folder / "calm_export.json").read_text())["adapter_zero"] is True
    assert "with its LoRA adapter merged" not in card
    assert "the base model's own weights: the adapter is zero" in card


def test_the_card_has_the_base_models_licence(tiny_model_dir: Path, tmp_path: Path) -> None:
    named = tmp_path / "licensed"
    shutil.copytree(tiny_model_dir, named)
    (named / "README.md").write_text("---\nlicense: mit\n---\n# A model\n")
    folder = export_run(make_run(tmp_path / "runs", named, name="mit"), tmp_path / "out")
    assert _front(folder)["license"] == "mit"
    bare = export_run(make_run(tmp_path / "runs", tiny_model_dir, name="bare"), tmp_path / "bare")
    assert _front(bare)["license"] == "unknown"


def test_the_licence_of_a_named_model_is_its_hub_licence() -> None:
    from calm_core.export.card_data import hub_licence

    assert hub_licence("Apache-2.0") == {"license": "apache-2.0"}
    assert hub_licence("Gemma Terms of Use (https://ai.google.dev/gemma/terms)") == {"license": "gemma"}
    assert hub_licence(None) == {"license": "unknown"}


def test_the_card_has_a_pipeline_tag(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = export_run(make_run(tmp_path / "runs", tiny_model_dir), tmp_path / "out")
    assert _front(folder)["pipeline_tag"] == "text-generation"


def test_only_hub_datasets_are_named_as_hub_datasets(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = export_run(make_run(tmp_path / "runs", tiny_model_dir), tmp_path / "out")
    front = _front(folder)
    assert front["datasets"] == ["allenai/ai2_arc"]
    types = {result["dataset"]["type"] for result in front["model-index"][0]["results"]}
    assert types == {"allenai/ai2_arc"}  # builtin/capitals/test is no Hub dataset id
    card = (folder / "README.md").read_text()
    assert "`builtin/capitals/test` (a CALM Studio built-in set, not on the Hub)" in card


def test_metric_types_are_standard_names(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = export_run(make_run(tmp_path / "runs", tiny_model_dir), tmp_path / "out")
    metrics = [m for result in _front(folder)["model-index"][0]["results"] for m in result["metrics"]]
    assert {m["type"] for m in metrics} == {"accuracy", "ece", "roc_auc"}
    assert {m["value"] for m in metrics if m["type"] == "accuracy"} == {0.6}  # the exported model's, not base's


def test_the_merged_config_names_the_real_base_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    converted = tmp_path / "converted"
    shutil.copytree(tiny_model_dir, converted)
    config = json.loads((converted / "config.json").read_text())
    (converted / "config.json").write_text(json.dumps({**config, "_model_name_or_path": "Smollm2 135M 8k Mix1"}))
    (converted / "calm_conversion.json").write_text(json.dumps({"name": "embedded"}))  # a named model's copy
    folder = export_run(make_run(tmp_path / "runs", converted), tmp_path / "out", merged=True)
    hub = json.loads((folder / "calm_export.json").read_text())["base_model_hub_id"]
    saved = json.loads((folder / "config.json").read_text())
    assert hub == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert saved.get("_model_name_or_path") == hub and saved.get("_name_or_path") == hub


def test_a_plain_export_takes_the_variant_whose_threshold_was_saved(tiny_model_dir: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    from calm_core.cli import main

    run = make_run(tmp_path / "runs", tiny_model_dir, saved_variant="ts")
    assert main(["export", run.run_id, str(tmp_path / "out"), "--runs-root", str(tmp_path / "runs")]) == 0
    record = json.loads((tmp_path / "out" / "calm_export.json").read_text())
    assert record["variant"] == "ts" and record["selective"]["threshold"] == 0.8
    assert "the saved selective threshold is ts's" in capsys.readouterr().out
    main(["export", run.run_id, str(tmp_path / "calm"), "--variant", "calm", "--runs-root", str(tmp_path / "runs")])
    assert "the saved selective threshold belongs to ts, not calm" in capsys.readouterr().out


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_merged_weight_files_get_the_umasks_mode(tiny_model_dir: Path, tmp_path: Path, umask: int) -> None:
    run = make_run(tmp_path / "runs", tiny_model_dir)
    old = os.umask(umask)
    try:
        folder = export_run(run, tmp_path / "out", merged=True)
    finally:
        os.umask(old)
    weights = sorted(folder.glob("*.safetensors"))
    assert weights and {oct(p.stat().st_mode & 0o777) for p in weights} == {oct(0o666 & ~umask)}
