"""Thermometer (calm_core/calibration/thermometer.py): a dataset's temperature from the
mean hidden state of its unlabelled inputs, trained on other labelled datasets."""

from __future__ import annotations

import numpy as np
import pytest

from calm_core.calibration import metrics
from calm_core.calibration.thermometer import Labelled, Thermometer, leave_one_domain_out, load_thermometer


def _domain(name: str, shift: float, n: int = 150, dim: int = 6, seed: int = 0) -> tuple[Labelled, float]:
    """A dataset whose inputs sit at `shift` along feature 0 and whose right temperature
    grows with it: labels from softmax(u), the model reports u * T."""
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(n, dim))
    h[:, 0] += shift
    temperature = float(np.logaddexp(0.0, 1.2 * shift)) + 0.05
    u = rng.normal(scale=2.0, size=(n, 4))
    gold = np.array([rng.choice(4, p=p) for p in metrics.softmax(u)])
    return Labelled(f"{name}/test", u * temperature, gold, h), temperature


def test_a_thermometer_predicts_a_left_out_domains_temperature_from_its_inputs() -> None:
    shifts = [-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0]
    made = [_domain(f"d{i}", s, seed=i) for i, s in enumerate(shifts)]
    held, true_t = _domain("new", 1.75, seed=99)
    thermo = Thermometer.train([d for d, _ in made])
    assert thermo.weights, thermo.cv_nll  # the mean features were used
    assert thermo.temperature(held.features) == pytest.approx(true_t, rel=0.25)
    pooled = np.mean([t for _, t in made])  # about what one temperature for every domain is
    assert abs(thermo.temperature(held.features) - true_t) < 0.5 * abs(pooled - true_t)
    assert np.array_equal(thermo.probs(held.logits, held.features).argmax(1), held.logits.argmax(1))


def test_leave_one_domain_out_never_trains_on_the_domain_it_predicts() -> None:
    made = [_domain(f"d{i}", s, seed=i)[0] for i, s in enumerate([-1.0, 0.0, 1.0, 2.0])]
    twin = Labelled("d0/dev", made[0].logits, made[0].gold, made[0].features)  # another split of d0
    rows = leave_one_domain_out([*made, twin])
    for row in rows:
        domain = row["dataset"].split("/")[0]
        assert all(not name.startswith(domain + "/") for name in row["thermometer"].trained_on), row


def test_a_thermometer_needs_three_datasets_and_round_trips(tmp_path) -> None:
    made = [_domain(f"d{i}", s, seed=i)[0] for i, s in enumerate([-1.0, 0.0, 1.0])]
    with pytest.raises(ValueError, match="at least 3"):
        Thermometer.train(made[:2])
    thermo = Thermometer.train(made)
    thermo.save(tmp_path / "t.json")
    again = load_thermometer(tmp_path / "t.json")
    assert again.temperature(made[0].features) == pytest.approx(thermo.temperature(made[0].features))


def test_the_build_commands_table_compares_thermometer_with_ts_carried_over_and_the_oracle() -> None:
    from calm_core.training.thermometer_build import TEST_OF, lodo_rows, markdown

    names = list(TEST_OF)[:5]
    shifts = [-1.0, 0.0, 1.0, 2.0, -0.5]
    train, tests = [], {}
    for i, (name, shift) in enumerate(zip(names, shifts, strict=True)):
        made, _ = _domain(name.rsplit("/", 1)[0], shift, seed=i)
        train.append(Labelled(name, made.logits, made.gold, made.features))
        held, _ = _domain(name.rsplit("/", 1)[0], shift, seed=100 + i)
        tests[TEST_OF[name]] = Labelled(TEST_OF[name], held.logits, held.gold, held.features)
    rows = lodo_rows(train, tests)
    assert [r["domain"] for r in rows] == [TEST_OF[n] for n in names]
    for row in rows:
        assert set(row["ece"]) == {"base", "ts_other_domains", "thermometer", "oracle_ts"}
        assert row["ece"]["oracle_ts"] <= row["ece"]["base"] + 0.05  # fitted on its own labels
    table = markdown(rows)
    assert table.count("\n") == len(rows) + 2 and "| mean |" in table


def test_calm_eval_applies_a_thermometer_per_set_and_refuses_another_models(tiny_model_dir, tmp_path) -> None:
    import json

    from calm_core.scoring.evaluate import load_mc_items
    from calm_core.scoring.models import ModelSpec, load_model
    from calm_core.scoring.scorer import Capture, Scorer
    from calm_core.scoring.prompts import ScoringConfig
    from tests.test_cli import run_cli

    lm = load_model(ModelSpec(name=str(tiny_model_dir), device="cpu"))
    train = []
    for name in ("builtin/capitals/validation", "builtin/units/validation", "builtin/arithmetic/validation"):
        s = Scorer.of(lm, progress=False).score(load_mc_items(name, 12), ScoringConfig(rule="cloze"), capture=Capture.FEATURES)
        train.append(Labelled(name, s.logits, s.gold, s.features))
    thermo = Thermometer.train(train)
    thermo.model = str(tiny_model_dir)
    thermo.save(tmp_path / "thermo.json")
    out = tmp_path / "out.json"
    argv = ["eval", "--model", str(tiny_model_dir), "--data", "builtin/capitals/test", "builtin/units/test",
            "--limit", "6", "--thermometer", str(tmp_path / "thermo.json"), "--json", str(out), "--quiet"]
    rc, stdout, stderr = run_cli(argv)
    assert rc == 0, stderr
    record = json.loads(out.read_text())
    rows = {(r["dataset"], r["variant"]): r for r in record["results"]}
    for entry in record["thermometer"]:
        assert entry["temperature"] > 0 and f"thermometer on {entry['dataset']}" in stdout
        assert rows[(entry["dataset"], "thermometer")]["acc"] == rows[(entry["dataset"], "base")]["acc"]
    thermo.model = "someone/else"
    thermo.save(tmp_path / "thermo.json")
    rc, _, stderr = run_cli(argv)
    assert rc == 2 and "reads someone/else's hidden states" in stderr
    thermo.model, thermo.scoring = str(tiny_model_dir), "cloze"  # another rule reads another state: refused too
    thermo.save(tmp_path / "thermo.json")
    rc, _, stderr = run_cli([*argv, "--scoring", "letter"])
    assert rc == 2 and "trained under cloze scoring, not letter" in stderr


def test_padded_options_train_without_nan() -> None:
    """Sets with fewer options than the widest carry -inf padding: the fit must stay finite
    (a -inf divided by the temperature made every parameter nan)."""
    made = []
    for i, shift in enumerate([-1.0, 0.0, 1.0]):
        d, _ = _domain(f"d{i}", shift, seed=i)
        padded = np.concatenate([d.logits, np.full((len(d.gold), 2), -np.inf)], axis=1)
        made.append(Labelled(d.name, padded, d.gold, d.features))
    thermo = Thermometer.train(made)
    assert np.isfinite(thermo.bias) and all(np.isfinite(thermo.weights))
    assert np.isfinite(thermo.temperature(made[0].features))


def test_the_shipped_thermometer_is_the_embedded_models_and_loads() -> None:
    from calm_core.calibration.thermometer import SHIPPED

    thermo = load_thermometer(SHIPPED)
    assert thermo.model == "embedded" and len(thermo.trained_on) >= 3
    assert len(thermo.mean) in (0, 576) and thermo.cv_nll  # SmolLM2-135M's hidden size


# ----------------------------------------------------------------------------- a file without answers

UNANSWERED = [
    {"id": "q1", "question": "What is the capital of France?", "choices": ["Paris", "Rome", "Madrid"]},
    {"id": "q2", "question": "How many legs has a spider?", "choices": ["six", "eight", "ten", "eight"]},
    {"id": "q3", "question": "Which is a gas at room temperature?", "choices": ["iron", "helium"]},
    {"id": "q4", "question": "", "choices": ["a", "b"]},  # no question: rejected, as in a labelled file
    {"id": "q5", "question": "Only one option?", "choices": ["yes", "yes"]},  # one distinct option: rejected
]


def _hand_thermometer(model: str, width: int) -> Thermometer:
    """A thermometer whose temperature is far from 1 on any set (a set's T need not be right here)."""
    rng = np.random.default_rng(3)
    return Thermometer(mean=[0.0] * width, projection=(rng.normal(size=(2, width)) / width).tolist(),
                       weights=[0.5, -0.3], bias=-1.5, trained_on=["a", "b", "c"], model=model)


def test_a_file_without_answers_loads_only_when_asked_and_is_checked_like_any_other(tmp_path) -> None:
    from calm_core.data.catalog import load_dataset
    from calm_core.data.mapping import MissingColumns
    from calm_core.data.schema import UNLABELLED, UNLABELLED_MC
    from tests.test_cli import write_jsonl

    path = write_jsonl(tmp_path / "new.jsonl", UNANSWERED)
    with pytest.raises(MissingColumns, match="answer") as missing:
        load_dataset(str(path))  # detected as multiple choice, and that needs answers
    assert missing.value.columns == ["answer"]
    report = load_dataset(str(path), kind=UNLABELLED_MC)
    assert [it.id for it in report.items] == ["q1", "q2", "q3"] and {it.answer for it in report.items} == {UNLABELLED}
    assert report.items[1].choices == ("six", "eight", "ten")  # a repeated option dropped
    assert [(e.field, e.row) for e in report.rejected] == [("question", 4), ("choices", 5)]
    labelled = write_jsonl(tmp_path / "labelled.jsonl", [{**UNANSWERED[0], "answer": 7}, {**UNANSWERED[2], "answer": 1}])
    report = load_dataset(str(labelled))  # an answer column: read and checked as always
    assert [it.answer for it in report.items] == [1] and report.rejected[0].field == "answer"


def test_calm_eval_calibrates_a_file_without_answers_with_the_thermometer_alone(tiny_model_dir, tmp_path) -> None:
    """`calm eval --data NEW --thermometer` on questions and options only: base and the
    thermometer's probabilities are written, no accuracy or ECE is claimed, TS fitted
    elsewhere is not applied there, and the output says why."""
    import json

    import pandas as pd

    from calm_core.runs.layout import predictions_path
    from tests.test_cli import run_cli, write_jsonl

    data = str(write_jsonl(tmp_path / "new.jsonl", UNANSWERED))
    _hand_thermometer(str(tiny_model_dir), 64).save(tmp_path / "thermo.json")  # the tiny model's width
    out, preds = tmp_path / "out.json", tmp_path / "preds"
    rc, stdout, stderr = run_cli([
        "eval", "--model", str(tiny_model_dir), "--data", data, "builtin/capitals/test", "--limit", "4",
        "--fit-ts-on", "builtin/capitals/validation", "--fit-limit", "10",
        "--thermometer", str(tmp_path / "thermo.json"), "--save-preds", str(preds), "--json", str(out), "--quiet",
    ])
    assert rc == 0, stderr
    assert "has no `answer` column: scored without answers" in stderr
    assert f"no answers in {data}: accuracy, ECE" in stdout and "thermometer is the only calibrator" in stdout
    record = json.loads(out.read_text())
    unlabelled = {r["variant"]: r for r in record["unlabelled"]}
    assert set(unlabelled) == {"base", "thermometer"}  # no ts on a set whose domain gave no labels
    assert all(r["dataset"] == data and r["n"] == 3 and "acc" not in r and "ece" not in r for r in unlabelled.values())
    assert {r["dataset"] for r in record["results"]} == {"builtin/capitals/test"}  # the labelled set as always
    assert {"base", "ts", "thermometer"} <= {r["variant"] for r in record["results"]}
    (temperature,) = [e["temperature"] for e in record["thermometer"] if e["dataset"] == data]
    base = pd.read_parquet(predictions_path(preds, "base", data))
    thermo = pd.read_parquet(predictions_path(preds, "thermometer", data))
    assert list(thermo["id"]) == ["q1", "q2", "q3"] and set(thermo["gold"]) == {-1}
    for logits, probs, plain in zip(thermo["logits"], thermo["probs"], base["probs"], strict=True):
        expected = metrics.softmax(np.asarray(logits) / temperature)
        np.testing.assert_allclose(probs, expected, atol=1e-12)
        assert np.abs(np.asarray(probs) - np.asarray(plain)).max() > 1e-3  # the thermometer moved them
    assert abs(temperature - 1.0) > 0.1
    assert unlabelled["thermometer"]["confidence"] == pytest.approx(np.mean([max(p) for p in thermo["probs"]]))

    rc, _, stderr = run_cli(["eval", "--model", str(tiny_model_dir), "--data", data, "--quiet"])
    assert rc != 0 and "column(s) answer" in stderr and "add --thermometer" in stderr  # without it: the error stands


def test_a_run_adds_the_thermometer_of_its_model_as_a_variant(tiny_model_dir, tmp_path, monkeypatch) -> None:
    """Issue 29: the thermometer appears wherever TS does. A run whose model has a
    thermometer (here a hand-set one for the tiny model, in place of the shipped one)
    gets a `thermometer` row per evaluation set, one temperature per set from its inputs,
    a record in results.json, and a place among the S_V candidates; another model's
    thermometer gives no row and no note."""
    import json

    import numpy as np
    import pandas as pd

    import calm_core.calibration.thermometer as thermometer_module
    from calm_core.calibration.thermometer import Thermometer
    from calm_core.runs.layout import predictions_path
    from calm_core.runs.rundir import RunDir
    from calm_core.training.loop import train
    from tests.test_trainer import fresh_lm, small_config

    lm = fresh_lm(tiny_model_dir)
    width = lm.model.config.hidden_size
    cfg = small_config(steps=1, scoring="cloze", model=str(tiny_model_dir), eval_data=("builtin/capitals/test", "builtin/units/test"))
    hand_set = Thermometer(mean=[0.0] * width, projection=[[1.0] + [0.0] * (width - 1)], weights=[0.5], bias=1.0,
                           trained_on=["a", "b", "c"], model=cfg.model, scoring="cloze")
    hand_set.save(tmp_path / "thermometer.json")
    monkeypatch.setattr(thermometer_module, "thermometer_path", lambda model: tmp_path / "thermometer.json")
    run = RunDir.create(tmp_path, "run-t", {"train": cfg.to_dict()})
    train(cfg, run=run, lm=lm)
    results = json.loads((run.path / "results.json").read_text())
    assert {r["dataset"] for r in results["results"] if r["variant"] == "thermometer"} == set(cfg.eval_data)
    assert results["thermometer"]["model"] == cfg.model and results["thermometer"]["components"] == 1
    assert "thermometer" in results["recommendation"]["heldout"]  # a candidate on S_V, fitted on none of its labels
    temperatures = []
    for dataset in cfg.eval_data:
        base = pd.read_parquet(predictions_path(run.path, "base", dataset))
        scaled = pd.read_parquet(predictions_path(run.path, "thermometer", dataset))
        assert base["prediction"].tolist() == scaled["prediction"].tolist()  # one temperature never re-ranks
        # log p_i - log p_j scales by 1/T: the same T for every item of the set
        ratios = [(np.log(s[0]) - np.log(s[1])) / (np.log(b[0]) - np.log(b[1]))
                  for b, s in zip(base["probs"], scaled["probs"], strict=True) if abs(np.log(b[0]) - np.log(b[1])) > 1e-3]
        assert np.ptp(ratios) < 1e-6 and ratios[0] != pytest.approx(1.0)
        temperatures.append(1 / ratios[0])
    assert temperatures[0] != pytest.approx(temperatures[1])  # a temperature per set, from its own inputs

    other = Thermometer(**{**hand_set.__dict__, "model": "someone/else"})
    other.save(tmp_path / "thermometer.json")
    run2 = RunDir.create(tmp_path, "run-u", {"train": cfg.to_dict()})
    train(cfg, run=run2, lm=fresh_lm(tiny_model_dir))
    results2 = json.loads((run2.path / "results.json").read_text())
    assert "thermometer" not in {r["variant"] for r in results2["results"]} and "thermometer" not in results2
