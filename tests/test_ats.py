"""Adaptive temperature scaling (calm_core/calibration/posthoc/ats.py): a temperature per
question from its hidden state. It never changes a prediction, recovers a known
temperature function, refuses a too-small fit set, becomes TS when features say nothing,
and round-trips through the calibrator registry."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calm_core.calibration import metrics
from calm_core.calibration.posthoc import TemperatureScaler, calibrators, load_calibrator
from calm_core.calibration.posthoc.ats import MIN_ITEMS, TAU_FLOOR, AdaptiveTemperature


def _synthetic(n: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Items whose right temperature is a known function of feature 0: labels are drawn
    from softmax(u) (so u is calibrated), and the model reports z = u * tau(h)."""
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(n, dim))
    tau = np.logaddexp(0.0, 1.5 * h[:, 0] + 0.5) + TAU_FLOOR  # from ~0.1 (underconfident) to ~5 (overconfident)
    u = rng.normal(scale=2.0, size=(n, 4))
    labels = np.array([rng.choice(4, p=p) for p in metrics.softmax(u)])
    return u * tau[:, None], labels, h, tau


def test_ats_recovers_a_temperature_that_depends_on_a_feature() -> None:
    z, y, h, tau = _synthetic(1500, dim=3)
    ats = AdaptiveTemperature.fit(z, y, h)
    found = ats.temperatures(h)
    assert len(ats.weights_) >= 1  # the features were used
    assert np.corrcoef(np.log(found), np.log(tau))[0, 1] > 0.95
    assert np.median(np.abs(found / tau - 1.0)) < 0.15
    ts = TemperatureScaler.fit(z, y)
    assert metrics.nll(ats.probs(z, h), y) < metrics.nll(ts.probs(z), y) - 0.05  # beats one temperature


def test_ats_becomes_temperature_scaling_when_features_carry_nothing() -> None:
    rng = np.random.default_rng(1)
    u = rng.normal(scale=2.0, size=(300, 4))
    y = np.array([rng.choice(4, p=p) for p in metrics.softmax(u)])
    z = 3.0 * u  # one shared temperature, 3
    noise = rng.normal(size=(300, 20))
    ats = AdaptiveTemperature.fit(z, y, noise)
    ts = TemperatureScaler.fit(z, y)
    if not ats.weights_:  # the cross-fitted choice: k = 0
        assert ats.temperatures(noise)[0] == pytest.approx(ts.temperature_, rel=1e-3)
    spread = ats.temperatures(noise)
    assert spread.std() / spread.mean() < 0.1  # whatever k won, the noise barely moves tau


def test_ats_refuses_a_fit_set_below_its_minimum_with_the_reason() -> None:
    z, y, h, _ = _synthetic(MIN_ITEMS - 1, dim=3)
    with pytest.raises(ValueError, match=f"at least {MIN_ITEMS} items to fit adaptive temperature scaling"):
        AdaptiveTemperature.fit(z, y, h)
    with pytest.raises(ValueError, match="features"):
        AdaptiveTemperature.fit(*_synthetic(100, dim=3)[:2])


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 30),
    k=st.integers(2, 6),
    dim=st.integers(1, 8),
    scale=st.floats(0.01, 50.0),
)
def test_ats_never_changes_a_prediction(seed: int, n: int, k: int, dim: int, scale: float) -> None:
    rng = np.random.default_rng(seed)
    z = rng.normal(scale=scale, size=(n, k))
    z[rng.random((n, k)) < 0.2] = -math.inf  # padding: options an item does not have
    z[:, 0] = rng.normal(size=n)  # every item has at least one option
    h = rng.normal(scale=scale, size=(n, dim))
    ats = AdaptiveTemperature.fitted(
        mean=rng.normal(size=dim).tolist(),
        projection=rng.normal(size=(2, dim)).tolist(),
        weights=rng.normal(scale=3.0, size=2).tolist(),
        bias=float(rng.normal()),
    )
    probs = ats.probs(z, h)
    assert np.array_equal(probs.argmax(axis=1), z.argmax(axis=1))
    assert np.all(probs[np.isneginf(z)] == 0.0)  # padding stays impossible
    assert np.all(ats.temperatures(h) >= TAU_FLOOR)


def test_ats_is_in_the_registry_and_round_trips(tmp_path) -> None:
    assert calibrators()["ats"] is AdaptiveTemperature and AdaptiveTemperature.reads_features
    z, y, h, _ = _synthetic(200, dim=3, seed=2)
    ats = AdaptiveTemperature.fit(z, y, h)
    ats.save(tmp_path / "ats.json")
    again = load_calibrator(tmp_path / "ats.json")
    assert isinstance(again, AdaptiveTemperature)
    np.testing.assert_allclose(again.probs(z, h), ats.probs(z, h), atol=1e-12)
    assert ats.cv_nll_ and "k=0,decay=0" in ats.cv_nll_
    with pytest.raises(ValueError, match="features"):
        ats.transform(z)


# ----------------------------------------------------------------------------- wherever TS is


def test_calm_eval_fits_ats_beside_ts_where_the_fit_set_is_large_enough(tiny_model_dir, tmp_path) -> None:
    from tests.test_cli import run_cli

    out = tmp_path / "out.json"
    rc, stdout, stderr = run_cli([
        "eval", "--model", str(tiny_model_dir), "--data", "builtin/capitals/test", "--limit", "8",
        "--fit-ts-on", "builtin/arithmetic/validation", "--fit-limit", str(MIN_ITEMS), "--json", str(out),
        "--save-preds", str(tmp_path / "preds"), "--quiet",
    ])
    assert rc == 0, stderr
    record = json.loads(out.read_text())
    variants = {row["variant"]: row for row in record["results"]}
    assert {"base", "ts", "ats"} <= set(variants)
    assert variants["ats"]["acc"] == variants["base"]["acc"]  # a temperature per question never re-ranks
    assert record["ats"][0]["n"] == MIN_ITEMS and "components" in record["ats"][0]
    assert "ats:" in stdout
    rc, _, stderr = run_cli([
        "eval", "--model", str(tiny_model_dir), "--data", "builtin/capitals/test", "--limit", "4",
        "--fit-ts-on", "builtin/arithmetic/validation", "--fit-limit", str(MIN_ITEMS - 1), "--json", str(out), "--quiet",
    ])
    assert rc == 0, stderr
    assert "ats" not in {row["variant"] for row in json.loads(out.read_text())["results"]}  # below its minimum


def test_a_run_fits_ats_on_sv_evaluates_it_and_offers_it_for_recommendation(tiny_model_dir) -> None:
    from calm_core.runs.rundir import RunDir
    from calm_core.training.config import TrainConfig
    from calm_core.training.loop import train
    from calm_core.launch import create_run
    from tests.test_trainer import fresh_lm

    cfg = TrainConfig(
        method="calm", steps=1, batch_size=2, heldout_batch_size=2, eval_every=0, checkpoint_every=0,
        lr_theta=1e-2, lr_alpha=1e-1, scoring="cloze", model=str(tiny_model_dir),
        train_data="builtin/capitals/train", heldout_data="builtin/arithmetic/validation",
        eval_data=("builtin/capitals/test",), train_limit=4, heldout_limit=60, eval_limit=6,
    )
    run = create_run(cfg)
    train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
    results = RunDir(run.path).results()
    variants = {row.variant: row for row in results.rows}
    assert {"base", "ts", "ats", "calm"} <= set(variants)
    assert variants["ats"]["acc"] == variants["base"]["acc"]
    ats = results.calibrator("ats")
    assert ats is not None and ats["fit_on"] == "builtin/arithmetic/validation" and "components" in ats
    assert results.recommendation and "ats" in results.recommendation.heldout  # 60 S_V items: 5 folds of 48 reach its minimum

    from calm_core.data.schema import MCItem
    from calm_core.results.playground import load_trained, option_probabilities

    trained = load_trained(RunDir(run.path), device="cpu")  # the Playground: a typed question gets its own tau
    probs = option_probabilities(trained, MCItem("typed", "Which gas do plants take in?", ("oxygen", "CO2", "neon"), 1))
    assert {"base", "ts", "ats"} <= set(probs) and probs["ats"].argmax() == probs["base"].argmax()
    assert probs["ats"].sum() == pytest.approx(1.0)
