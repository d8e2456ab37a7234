"""calm export of the heads that read the question: `--variant ats` and a `--scope adaptive` run.

Two tiny adaptive CALM runs (cloze and letter; S_V of 40 items, ATS's minimum, so their
final evaluation fits ATS as well) are exported as the trained model and as `ats`, and
each folder's calm_head.py scores the run's evaluation items in a python that cannot
import calm_core (test_export.score_without_calm_core): it must give the run's own
probabilities to 1e-5.

The tiny random model is at chance, so the ATS its runs fit is degenerate (one very
high temperature, near-uniform forecasts that almost any head reproduces). So a copy of
each run holds a hand-set ATS whose temperature varies from question to question, and
its export is checked against the studio's own probabilities for that copy (the
Playground's, results.playground, computed here from the same model).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from calm_core.calibration.adaptive_head import AdaptiveHead, bias_for
from calm_core.calibration.head import CalibrationHead
from calm_core.calibration.posthoc.ats import MIN_ITEMS, AdaptiveTemperature
from calm_core.calibration.projection import principal_projection
from calm_core.runs.layout import predictions_path
from calm_core.runs.records import RunResults
from calm_core.runs.rundir import RunDir
from calm_core.training.loop import train
from calm_core.export import folder as export
from calm_core.export.folder import export_run, recommended_export
from calm_core.export.template import calm_head
from calm_core.launch import run_config_record
from tests.test_export import TOLERANCE, _eval_items, score_without_calm_core
from tests.test_trainer import fresh_lm, small_config

RULES = ("cloze", "letter")
ATS_WEIGHTS = [0.6, -0.5, 0.4, 0.3]  # on unit-variance components: temperatures from about 0.3 to 3


@pytest.fixture(scope="module")
def runs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunDir]:
    root = tmp_path_factory.mktemp("runs")
    out = {}
    with pytest.MonkeyPatch.context() as patch:  # module scope: set up before the autouse workspace fixture
        patch.setenv("CALM_WORKSPACE", str(tmp_path_factory.mktemp("workspace")))
        for rule in RULES:
            cfg = small_config(model=str(tiny_model_dir), scoring=rule, scope="adaptive", select="last",
                               heldout_data="builtin/chemical_symbols/validation", heldout_limit=MIN_ITEMS)
            run = RunDir.create(root, f"adaptive-{rule}", run_config_record(cfg))
            train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
            out[rule] = run
    return out


def _dataset(run: RunDir) -> str:
    return run.config.train["eval_data"][0]


def _predictions(run: RunDir, variant: str) -> pd.DataFrame:
    return pd.read_parquet(predictions_path(run.path, variant, _dataset(run)))


def _states(frame: pd.DataFrame) -> np.ndarray:
    """(N, d) hidden states of a predictions frame (stored float16: enough to spread temperatures)."""
    return np.stack([np.asarray(h, dtype=np.float64) for h in frame["features"]])


def _varying_ats(run: RunDir) -> AdaptiveTemperature:
    """An ATS whose temperature varies over the run's evaluation items: the top principal
    directions of their base states (unit variance there) with ATS_WEIGHTS."""
    mean, projection = principal_projection(_states(_predictions(run, "base")), len(ATS_WEIGHTS), standardise=True)
    return AdaptiveTemperature.fitted(mean=mean.tolist(), projection=projection.tolist(),
                               weights=ATS_WEIGHTS[: len(projection)], bias=bias_for(1.0))


@pytest.fixture(scope="module")
def varying(runs: dict[str, RunDir], tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunDir]:
    """Each run, copied, with `_varying_ats` as results.json's ATS (as a fit records it)."""
    root = tmp_path_factory.mktemp("varying")
    out = {}
    for rule, run in runs.items():
        copy = RunDir(shutil.copytree(run.path, root / run.path.name))
        results = copy.results().to_json()
        results["ats"] = {**_varying_ats(run).params(), "fit_on": results["ats"].get("fit_on")}
        (copy.path / "results.json").write_text(json.dumps(results))
        out[rule] = copy
    return out


@pytest.fixture(scope="module")
def exports(runs: dict[str, RunDir], varying: dict[str, RunDir],
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exports")
    out = {}
    for rule in RULES:
        out[f"{rule}-calm"] = export_run(runs[rule], root / f"{rule}-calm")
        out[f"{rule}-ats"] = export_run(runs[rule], root / f"{rule}-ats", "ats")
        out[f"{rule}-varying"] = export_run(varying[rule], root / f"{rule}-varying", "ats")
    return out


@pytest.fixture(scope="module")
def fresh(runs: dict[str, RunDir], exports: dict[str, Path], tiny_model_dir: Path,
          tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list[float]]]:
    jobs = {name: (folder, _eval_items(runs[name.split("-")[0]])) for name, folder in exports.items()}
    return score_without_calm_core(jobs, tiny_model_dir, tmp_path_factory.mktemp("fresh"))


def _worst(got: dict[str, list[float]], expected: dict[str, list[float]]) -> float:
    assert got.keys() == expected.keys() and len(got) == 6
    return max(abs(a - b) for key in got for a, b in zip(got[key], expected[key], strict=True))


@pytest.mark.parametrize("rule", RULES)
def test_an_adaptive_calm_run_exports_a_head_that_reproduces_the_run(runs, exports, fresh, rule: str) -> None:
    """The trained model's export: its adaptive head reads h from the pass that scores the
    options (the adapted model's state) and divides by tau(h), as the run's evaluation did."""
    run, folder = runs[rule], exports[f"{rule}-calm"]
    record = json.loads((folder / "calm_export.json").read_text())
    assert record["head_scope"] == "adaptive" and record["scoring"]["rule"] == rule and record["variant"] == "calm"
    frame = _predictions(run, "calm")
    worst = _worst(fresh[f"{rule}-calm"], dict(zip(frame["id"], frame["probs"])))
    assert worst <= TOLERANCE, f"{rule}: max |p_export - p_run| = {worst:.2e}"
    # Not vacuous: the trained head gives these questions temperatures that differ, and the
    # head moves the probabilities far more than the tolerance.
    head = CalibrationHead.load(run.latest_checkpoint()[1])
    tau = head.temperatures(torch.from_numpy(_states(frame)))
    assert isinstance(head, AdaptiveHead) and float(tau.max() - tau.min()) > 0.01
    theta = _predictions(run, "calm_theta_only")
    moved = max(abs(a - b) for p, q in zip(frame["probs"], theta["probs"]) for a, b in zip(p, q))
    assert moved > 100 * TOLERANCE
    card = (folder / "README.md").read_text()
    assert "The head is adaptive" in card and "option_scores_and_state" in card


@pytest.mark.parametrize("rule", RULES)
def test_the_runs_own_ats_exports_as_the_head_of_its_fit(runs, exports, fresh, rule: str) -> None:
    """`--variant ats`: the zeroed adapter and results.json's ATS as a head; one that chose
    no feature (k = 0) is a scalar head at its temperature. The run's `ats` predictions back."""
    run, folder = runs[rule], exports[f"{rule}-ats"]
    fitted = AdaptiveTemperature.from_json(run.results().calibrators["ats"].to_json())
    record = json.loads((folder / "calm_export.json").read_text())
    assert record["variant"] == "ats" and record["head_scope"] == ("adaptive" if fitted.weights_ else "scalar")
    frame = _predictions(run, "ats")
    worst = _worst(fresh[f"{rule}-ats"], dict(zip(frame["id"], frame["probs"])))
    assert worst <= TOLERANCE, f"{rule}: max |p_export - p_run| = {worst:.2e}"
    card = (folder / "README.md").read_text()
    assert "**adaptive temperature scaling**" in card and "not the trained adapter" in card


@pytest.mark.parametrize("rule", RULES)
def test_an_ats_whose_temperature_varies_reproduces_the_studios_probabilities(varying, exports, fresh,
                                                                              rule: str) -> None:
    """The export of a hand-set ATS against the Playground's `ats` for the same run (base
    model, this question's state, ATS from results.json), item by item."""
    from calm_core.results.playground import load_trained, option_probabilities

    run = varying[rule]
    trained = load_trained(run, device="cpu")
    items = _eval_items(run)
    studio = {item.id: option_probabilities(trained, item) for item in items}
    base = _predictions(run, "base")  # the Playground's base is the run's, one item at a time
    assert _worst({i: p["base"].tolist() for i, p in studio.items()}, dict(zip(base["id"], base["probs"]))) <= TOLERANCE
    worst = _worst(fresh[f"{rule}-varying"], {i: p["ats"].tolist() for i, p in studio.items()})
    assert worst <= TOLERANCE, f"{rule}: max |p_export - p_studio| = {worst:.2e}"
    assert json.loads((exports[f"{rule}-varying"] / "calm_export.json").read_text())["head_scope"] == "adaptive"
    tau = _varying_ats(run).temperatures(_states(base))  # not vacuous: the temperatures differ widely
    assert tau.max() / tau.min() > 1.5
    assert max(abs(a - b) for p in studio.values() for a, b in zip(p["ats"], p["base"])) > 100 * TOLERANCE


def test_the_exported_adaptive_head_is_calm_cores(exports) -> None:
    """calm_head.AdaptiveHead (float64 on the stored float32 numbers) against the head it was
    saved from, on states far from the mean and with an absent option."""
    folder = exports["letter-varying"]
    ours = calm_head.CalibrationHead.from_folder(folder)
    theirs = CalibrationHead.load(folder)
    assert isinstance(ours, calm_head.AdaptiveHead) and isinstance(theirs, AdaptiveHead)
    torch.manual_seed(2)
    h = theirs.feature_mean + 3 * torch.randn(5, theirs.width)
    z = torch.randn(5, 4, dtype=torch.float64) * 5
    z[1, -1] = float("-inf")
    torch.testing.assert_close(ours.temperatures(h).float(), theirs.temperatures(h), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ours(z, h), theirs(z, h).double(), rtol=1e-6, atol=1e-6)
    assert torch.isneginf(ours(z, h)[1, -1])
    with pytest.raises(ValueError, match="adaptive head reads the question"):
        ours.logits_processor()


def _results(calibrators: dict) -> RunResults:
    """A results.json holding only these calibrators' records, as the record export reads."""
    return RunResults.from_json({"results": [], **calibrators})


def test_ats_export_says_why_it_cannot_write_a_head(runs, tmp_path: Path) -> None:
    """No fit (too few S_V items: its note), or a record from before results.json kept the
    weights (it would silently be one temperature): refused with the reason; the studio
    then offers no `ats` export."""
    run = runs["cloze"]
    with pytest.raises(ValueError, match=r"fitted adaptive temperature scaling \(ATS\).*at least 40"):
        export.posthoc_head(run, _results({"ats": {"note": "needs at least 40 S_V items"}}), "ats")
    with pytest.raises(ValueError, match="results.json has no `ats` fit"):
        export.posthoc_head(run, _results({}), "ats")
    old = {"components": 4, "weight_decay": 0.1, "bias": 0.5, "fit_on": "x"}
    with pytest.raises(ValueError, match="before results.json kept them"):
        export.posthoc_head(run, _results({"ats": old}), "ats")
    copy = RunDir(shutil.copytree(run.path, tmp_path / "copy"))
    results = copy.results().to_json()
    results["recommendation"] = {**results.get("recommendation", {}), "variant": "ats"}
    (copy.path / "results.json").write_text(json.dumps(results))
    assert recommended_export(copy) == "ats"
    (copy.path / "results.json").write_text(json.dumps({**results, "ats": old}))
    assert recommended_export(copy) is None
