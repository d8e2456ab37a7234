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
    from calm_core.workspace.thermometer_build import TEST_OF, lodo_rows, markdown

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
    from calm_core.scoring.options import score_items
    from calm_core.scoring.prompts import ScoringConfig
    from tests.test_cli import run_cli

    lm = load_model(ModelSpec(name=str(tiny_model_dir), device="cpu"))
    train = []
    for name in ("builtin/capitals/validation", "builtin/units/validation", "builtin/arithmetic/validation"):
        s = score_items(lm, load_mc_items(name, 12), ScoringConfig(rule="cloze"), features=True, progress=False)
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
    from calm_core.workspace.thermometer_build import SHIPPED

    thermo = load_thermometer(SHIPPED)
    assert thermo.model == "embedded" and len(thermo.trained_on) >= 3
    assert len(thermo.mean) in (0, 576) and thermo.cv_nll  # SmolLM2-135M's hidden size
