"""The calibrated stop on the embedded model (real weights), with the quick preset's
defaults, trained on built-in capitals as the issue's failing runs were:

- the lower level stays solved: at every evaluation the S_T cross-entropy of theta
  (adapter on, no head) stays within the documented tolerance of step 0's, and S_V
  accuracy within one item of step 0's;
- the selected step is the one recorded everywhere: status.json, results.json,
  `selected/`, the export, and the `calm` row equals that step's evaluation;
- the model handed back keeps capitals accuracy (at most one item lost), is not a
  near-uniform forecast (mean confidence > 1/K + 0.05), and its ECE is within 0.02 of
  temperature scaling's or better (docs/bilevel.md, "The calibrated stop").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calm_core.runs.rundir import RunDir
from calm_core.scoring.models import load_model
from calm_core.training.config import TrainConfig
from calm_core.training.loop import train
from calm_core.launch import run_config_record

pytestmark = pytest.mark.embedded
CAPITALS = dict(train_data="builtin/capitals/train", heldout_data="builtin/capitals/validation",
                eval_data=("builtin/capitals/test",))
K = 4  # capitals has four options


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    cfg = TrainConfig.preset("quick", method="calm", **CAPITALS)
    run = RunDir.create(tmp_path_factory.mktemp("stop"), "capitals", run_config_record(cfg))
    train(cfg, run=run, lm=load_model("embedded"))
    return run


def test_the_lower_level_stays_solved(finished: RunDir) -> None:
    selection = finished.status.selection
    tolerance = TrainConfig.preset("quick").lower_tolerance
    start = selection.reference.lower
    probes = [(r["step"], r["lower/st_nll"]) for r in finished.read_metrics() if "lower/st_nll" in r]
    assert len(probes) >= 4 and probes[0][0] == 0 and probes[0][1] == pytest.approx(start)
    risen = [(step, value) for step, value in probes if value > start * (1 + tolerance)]
    assert not risen, f"S_T cross-entropy of theta rose past {start:.3f} * (1 + {tolerance}): {risen}"
    # The failure the issue saw (lr_theta 1.0, lr_alpha 0.05, run to the end) shows on S_V
    # instead: theta overfits S_T (its cross-entropy falls 0.90 -> 0.09) while S_V accuracy
    # falls 0.647 -> 0.559 by step 20 (docs/bilevel.md). Every evaluation keeps it here.
    reference = selection.reference
    lost = [(r["step"], r["eval/heldout/acc"]) for r in finished.read_metrics() if "eval/heldout/acc" in r
            and r["eval/heldout/acc"] < reference.acc - 1 / reference.n - 1e-9]
    assert not lost, f"S_V accuracy fell by more than one item below step 0's {reference.acc:.3f}: {lost}"


def test_the_selected_step_is_the_recorded_one(finished: RunDir, tmp_path: Path) -> None:
    from calm_core.export.folder import export_run

    step = finished.status.selection.selected_step
    results = finished.results()
    assert results.selection.selected_step == step == finished.selected_step()
    at_step = next(r for r in finished.read_metrics() if r["step"] == step)
    assert at_step["select/selected_step"] == step
    chosen = results.selection.selected
    assert (chosen.score, chosen.ece, chosen.acc) == pytest.approx(
        (at_step["eval/heldout/nll"], at_step["eval/heldout/ece"], at_step["eval/heldout/acc"]))
    if "eval/builtin/capitals/test/acc" in at_step:  # a full evaluation (a dense one reads S_V alone)
        calm = next(r for r in results.rows if r.variant == "calm")
        for key in ("acc", "ece", "confidence"):
            assert calm[key] == pytest.approx(at_step[f"eval/builtin/capitals/test/{key}"], abs=1e-6)
    folder = export_run(finished, tmp_path / "export")
    assert json.loads((folder / "calm_export.json").read_text())["step"] == step


def test_the_model_handed_back_is_calibrated_and_keeps_accuracy(finished: RunDir) -> None:
    rows = {r["variant"]: r for r in finished.results().rows}
    base, ts, calm = rows["base"], rows["ts"], rows["calm"]
    assert calm["acc"] >= base["acc"] - 1 / calm["n"] - 1e-9  # at most one item lost
    assert calm["confidence"] > 1 / K + 0.05  # not the near-uniform forecast
    assert calm["ece"] <= ts["ece"] + 0.02
    assert finished.results().recommended in rows
