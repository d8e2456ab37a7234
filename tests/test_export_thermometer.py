"""calm export --variant thermometer: the untouched model with a thermometer, one temperature per set.

Two tiny runs (cloze and letter) are exported with a thermometer of the tiny model, and
each folder's calm_head.py scores the run's evaluation items as one set in a python that
cannot import calm_core (test_export.score_without_calm_core, with THERMO_FRESH below): it
must give the studio's thermometer probabilities (`Thermometer.probs` on the set's logits
and features from `Scorer.score`, what `calm eval --thermometer` applies) to 1e-5.

The thermometer is set by hand, not trained: a tiny random model's sets give a trained one
nothing to learn. Its centre is another set's mean state and its components the top
principal directions of this set's item states (unit variance across items), so the
temperature moves with the mean state read, and its bias puts the right state's T at
T_SET, far from 1. Reading another state (the option's last token instead of the
context's, or not averaging) gives another T and fails the comparison.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from calm_core.calibration.adaptive_head import bias_for
from calm_core.calibration.projection import principal_projection
from calm_core.calibration.thermometer import TAU_FLOOR, Thermometer
from calm_core.runs.rundir import RunDir
from calm_core.scoring.evaluate import load_mc_items
from calm_core.scoring.scorer import Capture, Scorer
from calm_core.scoring.prompts import ScoringConfig
from calm_core.training.loop import train
from calm_core.export.folder import export_run
from calm_core.export.template import calm_head
from calm_core.launch import run_config_record
from tests.test_cli import run_cli
from tests.test_export import FRESH_LOAD, TOLERANCE, _eval_items, score_without_calm_core
from tests.test_trainer import fresh_lm, small_config

RULES = ("cloze", "letter")
T_SET = 2.5  # the thermometer's temperature for the run's evaluation set: far from 1, so it shows
WEIGHTS = [0.5, -0.5]  # on components of unit variance across the set's items
CENTRE_SET = "builtin/units/test"  # the thermometer's centre: another domain's mean state
FOLDER = {"adapter_model.safetensors", "adapter_config.json", "thermometer.safetensors", "calm_head.py",
          "calm_export.json", "calm_config.json", "README.md"}

THERMO_FRESH = FRESH_LOAD + r"""    thermometer = module.Thermometer.from_folder(job["folder"])
    questions = [(item["question"], item["choices"]) for item in job["items"]]
    probs = module.set_probabilities(model, tokenizer, questions, thermometer)  # the items as one set
    out[job["name"]] = {item["id"]: p.tolist() for item, p in zip(job["items"], probs)}
print(json.dumps(out))
"""


def _cfg(rule: str) -> ScoringConfig:
    return ScoringConfig(rule=rule)


@pytest.fixture(scope="module")
def runs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunDir]:
    root = tmp_path_factory.mktemp("runs")
    out = {}
    with pytest.MonkeyPatch.context() as patch:  # module scope: set up before the autouse workspace fixture
        patch.setenv("CALM_WORKSPACE", str(tmp_path_factory.mktemp("workspace")))
        for rule in RULES:
            cfg = small_config(model=str(tiny_model_dir), scoring=rule, select="last")
            run = RunDir.create(root, f"thermo-{rule}", run_config_record(cfg))
            train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
            out[rule] = run
    return out


@pytest.fixture(scope="module")
def studio(runs: dict[str, RunDir], tiny_lm) -> dict[str, object]:
    """Each run's evaluation set scored by the untouched model as `calm eval` scores it:
    float64 logits (N, K_max) and float32 features (N, d)."""
    return {rule: Scorer.of(tiny_lm, progress=False).score(_eval_items(run), _cfg(rule), capture=Capture.FEATURES)
            for rule, run in runs.items()}


def _thermometer(model: str, rule: str, states: np.ndarray, centre: np.ndarray) -> Thermometer:
    """T = T_SET on the set whose item states are `states`; another mean state, another T."""
    _, projection = principal_projection(states, len(WEIGHTS), standardise=True)  # (k, d), unit variance
    x = (states.mean(axis=0) - centre) @ projection.T  # (k,)
    weights = WEIGHTS[: len(projection)]
    return Thermometer(mean=centre.tolist(), projection=projection.tolist(), weights=weights,
                       bias=bias_for(T_SET, TAU_FLOOR) - float(x @ weights), trained_on=["a/x", "b/y", "c/z"],
                       model=model, scoring=rule)


@pytest.fixture(scope="module")
def thermometers(studio, tiny_lm, tiny_model_dir: Path) -> dict[str, Thermometer]:
    out = {}
    for rule, scores in studio.items():
        other = Scorer.of(tiny_lm, progress=False).score(load_mc_items(CENTRE_SET, 6), _cfg(rule), capture=Capture.FEATURES)
        centre = np.asarray(other.features, dtype=np.float64).mean(axis=0)
        out[rule] = _thermometer(str(tiny_model_dir), rule, np.asarray(scores.features, dtype=np.float64), centre)
    return out


@pytest.fixture(scope="module")
def exports(runs, thermometers, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exports")
    out = {}
    for rule in RULES:
        thermometers[rule].save(root / f"{rule}.json")
        out[rule] = export_run(runs[rule], root / rule, "thermometer", root / f"{rule}.json")
    return out


@pytest.fixture(scope="module")
def fresh(runs, exports, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    jobs = {rule: (folder, _eval_items(runs[rule])) for rule, folder in exports.items()}
    return score_without_calm_core(jobs, tiny_model_dir, tmp_path_factory.mktemp("fresh"), THERMO_FRESH)


@pytest.mark.parametrize("rule", RULES)
def test_the_exported_thermometer_reproduces_the_studios_probabilities(runs, studio, thermometers, fresh,
                                                                       rule: str) -> None:
    """set_probabilities on the run's evaluation items, in a python without calm_core,
    against Thermometer.probs on the studio's logits and features of the same items."""
    scores, thermo = studio[rule], thermometers[rule]
    expected = thermo.probs(scores.logits, scores.features)  # (N, K_max), 0 where an option is absent
    got = fresh[rule]
    assert list(got) == list(scores.ids) and len(got) == 6
    worst = max(abs(a - b) for i, key in enumerate(scores.ids) for a, b in zip(got[key], expected[i], strict=False))
    assert all(len(got[key]) == int(np.isfinite(z).sum()) for key, z in zip(scores.ids, scores.logits, strict=True))
    assert worst <= TOLERANCE, f"{rule}: max |p_export - p_studio| = {worst:.2e}"
    # Not vacuous: the set's T is far from 1 and moves the probabilities far more than the
    # tolerance, and another set's mean state gives another T.
    assert thermo.temperature(scores.features) == pytest.approx(T_SET)
    base = np.exp(scores.logits - scores.logits.max(axis=1, keepdims=True))
    base /= base.sum(axis=1, keepdims=True)
    assert np.abs(expected - base).max() > 100 * TOLERANCE
    assert abs(thermo.temperature(scores.features[:3]) - T_SET) > 0.05  # half the set: another mean, another T


def test_the_folder_says_what_it_holds_and_how_to_use_it(runs, exports, tiny_model_dir: Path) -> None:
    folder = exports["letter"]
    assert {p.name for p in folder.iterdir()} == FOLDER  # no calibration head: the thermometer is not one
    record = json.loads((folder / "calm_export.json").read_text())
    assert record["variant"] == "thermometer" and record["head_scope"] is None
    assert record["thermometer"] == {"file": "thermometer.safetensors", "model": tiny_model_dir.name,
                                     "scoring": "letter", "trained_on": ["a/x", "b/y", "c/z"],
                                     "components": len(WEIGHTS), "floor": TAU_FLOOR}
    card = (folder / "README.md").read_text()
    for phrase in ("a **thermometer** over the base model", "not the trained adapter", "**no answers**",
                   "set_probabilities(model, tokenizer, questions, thermometer)", "the thermometer lives in"):
        assert phrase in card, phrase
    for path in folder.iterdir():  # no local path, the thermometer's metadata included
        assert str(tiny_model_dir).encode() not in path.read_bytes(), path.name
    with pytest.raises(FileNotFoundError, match="holds a thermometer: Thermometer.from_folder"):
        calm_head.CalibrationHead.from_folder(folder)
    thermometer = calm_head.Thermometer.from_folder(folder)
    with pytest.raises(ValueError, match="a thermometer reads a set: set_probabilities"):
        calm_head.option_probabilities(None, None, "q", ["a", "b"], thermometer)
    with pytest.raises(ValueError, match="thermometer reads a set of questions"):
        thermometer.logits_processor()


def test_the_exported_thermometer_is_calm_cores(exports, thermometers, tmp_path: Path, runs) -> None:
    """calm_head.Thermometer against calibration.thermometer on states far from the centre,
    and a thermometer that chose one temperature (k = 0) exports as that temperature."""
    thermo = thermometers["cloze"]
    ours = calm_head.Thermometer.from_folder(exports["cloze"])
    rng = np.random.default_rng(4)
    for _ in range(3):
        states = np.asarray(thermo.mean) + 3 * rng.normal(size=(7, len(thermo.mean)))
        assert float(ours.temperature(torch.from_numpy(states))) == pytest.approx(thermo.temperature(states), rel=1e-12)
    flat = Thermometer(bias=bias_for(1.7, TAU_FLOOR), trained_on=["a/x", "b/y", "c/z"], model=thermo.model,
                       scoring="cloze")
    flat.save(tmp_path / "flat.json")
    folder = export_run(runs["cloze"], tmp_path / "flat", "thermometer", tmp_path / "flat.json")
    assert json.loads((folder / "calm_export.json").read_text())["thermometer"]["components"] == 0
    assert "It chose one temperature for every set" in (folder / "README.md").read_text()
    z = torch.tensor([[1.0, -2.0, float("-inf")]], dtype=torch.float64)
    got = calm_head.Thermometer.from_folder(folder)(z, torch.randn(4, 64))
    torch.testing.assert_close(got, torch.tensor([[1.0 / 1.7, -2.0 / 1.7, float("-inf")]], dtype=torch.float64))


def _refusals(runs: dict[str, RunDir], thermometers: dict[str, Thermometer]) -> dict[str, tuple]:
    """name -> (run, thermometer, variant, the error it must give)."""
    cloze = thermometers["cloze"]
    def named(**change) -> Thermometer:
        return Thermometer(**{**cloze.__dict__, **change})
    return {
        "another model": (runs["cloze"], named(model="someone/else"), "thermometer",
                          r"Expected a thermometer of run thermo-cloze's model .*, but .* reads someone/else's hidden states"),
        "no model": (runs["cloze"], named(model=""), "thermometer", r"to name its model \(`model`\)"),
        "another rule": (runs["letter"], cloze, "thermometer",
                         "Expected a thermometer of run thermo-letter's model .* under letter, but .* was trained under cloze scoring"),
        "not the variant": (runs["cloze"], cloze, "ts", "Expected `thermometer` only with the thermometer variant"),
    }


@pytest.mark.parametrize("case", ["another model", "no model", "another rule", "not the variant"])
def test_a_thermometer_that_does_not_fit_the_run_is_refused_and_nothing_is_written(runs, thermometers,
                                                                                   tmp_path: Path, case) -> None:
    run, thermo, variant, message = _refusals(runs, thermometers)[case]
    thermo.save(tmp_path / "thermo.json")
    with pytest.raises(ValueError, match=message):
        export_run(run, tmp_path / "new" / "export", variant, tmp_path / "thermo.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thermo.json"]  # no folder, no staging, no parent


def test_calm_export_variant_thermometer_from_the_command_line(runs, thermometers, tmp_path: Path) -> None:
    """The default is the run's model's own thermometer (thermometer_path): a tiny-model run
    has none built, said in one line with the command that builds it; the embedded model's
    shipped one is refused for it; with --thermometer FILE of its own model the folder is written."""
    root = str(runs["cloze"].path.parent)
    rc, _, stderr = run_cli(["export", "thermo-cloze", str(tmp_path / "a"), "--variant", "thermometer",
                             "--runs-root", root])
    assert rc == 2 and "thermometer_build --model" in stderr and len(stderr.strip().splitlines()) == 1
    from calm_core.calibration.thermometer import SHIPPED

    rc, _, stderr = run_cli(["export", "thermo-cloze", str(tmp_path / "a"), "--variant", "thermometer",
                             "--thermometer", str(SHIPPED), "--runs-root", root])
    assert rc == 2 and "reads embedded's hidden states" in stderr and len(stderr.strip().splitlines()) == 1
    assert not (tmp_path / "a").exists()
    thermometers["cloze"].save(tmp_path / "thermo.json")
    rc, stdout, stderr = run_cli(["export", "thermo-cloze", str(tmp_path / "b"), "--variant", "thermometer",
                                  "--thermometer", str(tmp_path / "thermo.json"), "--runs-root", root])
    assert rc == 0, stderr
    assert "(thermometer, step 2)" in stdout and (tmp_path / "b" / "thermometer.safetensors").is_file()
