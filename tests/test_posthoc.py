"""Tests for calm_core.calibration.posthoc: temperature and vector scaling on synthetic logits.

No model is needed. Labels are sampled from softmax(z / T_true) with a seeded rng, so a
correct fit recovers T_true; an independent numpy golden-section search over beta = 1/T
(the NLL is convex in beta) is the reference minimum.

    .venv/bin/python -m pytest tests/test_posthoc.py -q
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from calm_core.calibration import metrics
from calm_core.calibration.posthoc import MIN_FIT_ITEMS, TemperatureScaler, VectorScaler, calibrators, load_scaler

T_TRUE = 2.5  # temperature the labels are drawn at
N_ITEMS, N_OPTIONS = 20_000, 4


def _sample_labels(rng: np.random.Generator, logits: np.ndarray) -> np.ndarray:
    """One draw per row from softmax(logits); -inf columns are never drawn."""
    p = metrics.softmax(logits)  # (N, K)
    u = rng.random(len(p))[:, None]  # (N, 1)
    return np.minimum((p.cumsum(axis=1) < u).sum(axis=1), p.shape[1] - 1)


def _numpy_nll(logits: np.ndarray, labels: np.ndarray, beta: float) -> float:
    """Reference mean NLL of softmax(beta * z) at the gold option, -inf padding ignored."""
    z = np.where(np.isfinite(logits), logits * beta, -np.inf)  # (N, K)
    m = z.max(axis=1, keepdims=True)  # (N, 1)
    lse = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))  # (N,)
    return float((lse - z[np.arange(len(labels)), labels]).mean())


def _reference_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """argmin_T NLL by golden-section search over beta = 1/T in [1e-3, 20] (convex in beta)."""
    lo, hi = 1e-3, 20.0
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = _numpy_nll(logits, labels, a), _numpy_nll(logits, labels, b)
    while hi - lo > 1e-12:
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = _numpy_nll(logits, labels, a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = _numpy_nll(logits, labels, b)
    return 1.0 / ((lo + hi) / 2.0)


@pytest.fixture(scope="module")
def known_t() -> tuple[np.ndarray, np.ndarray]:
    """z ~ N(0, 3^2) of shape (20000, 4), labels ~ softmax(z / 2.5)."""
    rng = np.random.default_rng(0)
    z = rng.normal(0.0, 3.0, size=(N_ITEMS, N_OPTIONS))
    return z, _sample_labels(rng, z / T_TRUE)


@pytest.fixture(scope="module")
def ragged() -> tuple[np.ndarray, np.ndarray]:
    """(N, 5) logits where each row keeps 2..5 options and pads the rest with -inf."""
    rng = np.random.default_rng(1)
    z = rng.normal(0.0, 3.0, size=(N_ITEMS, 5))
    n_choices = rng.integers(2, 6, size=N_ITEMS)  # (N,) in [2, 5]
    z[np.arange(5)[None, :] >= n_choices[:, None]] = -np.inf
    return z, _sample_labels(rng, z / T_TRUE)


@pytest.fixture(scope="module")
def ts_fit(known_t) -> TemperatureScaler:
    return TemperatureScaler.fit(*known_t)


# ----------------------------------------------------------------------------- temperature scaling


def test_ts_recovers_known_temperature(ts_fit):
    assert ts_fit.temperature_ == pytest.approx(T_TRUE, rel=0.05)
    assert ts_fit.n_fit_ == N_ITEMS
    assert ts_fit.kind == "temperature"


def test_ts_matches_reference_minimum_of_nll(known_t, ts_fit):
    z, y = known_t
    t_ref = _reference_temperature(z, y)
    assert ts_fit.temperature_ == pytest.approx(t_ref, rel=1e-4)
    assert ts_fit.nll_after_ == pytest.approx(_numpy_nll(z, y, 1.0 / t_ref), abs=1e-9)
    assert ts_fit.nll_before_ == pytest.approx(_numpy_nll(z, y, 1.0), abs=1e-9)
    assert ts_fit.nll_after_ <= ts_fit.nll_before_
    # the reported NLL is the NLL of the scaler's own probabilities
    assert metrics.nll(ts_fit.probs(z), y) == pytest.approx(ts_fit.nll_after_, abs=1e-9)


def test_ts_keeps_argmax_and_accuracy(known_t, ts_fit):
    z, y = known_t
    probs = ts_fit.probs(z)
    np.testing.assert_array_equal(probs.argmax(axis=1), z.argmax(axis=1))
    assert metrics.accuracy(probs, y) == metrics.accuracy(metrics.softmax(z), y)
    np.testing.assert_allclose(probs, metrics.softmax(z / ts_fit.temperature_), rtol=1e-12)


def test_ts_on_ragged_logits_is_finite_and_keeps_padding_at_zero(ragged):
    z, y = ragged
    ts = TemperatureScaler.fit(z, y)
    assert math.isfinite(ts.temperature_) and math.isfinite(ts.nll_after_)
    assert ts.temperature_ == pytest.approx(T_TRUE, rel=0.05)  # padding does not bias the fit
    probs = ts.probs(z)
    assert not np.isnan(probs).any()
    pad = ~np.isfinite(z)
    assert pad.any() and np.all(probs[pad] == 0.0)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(probs.argmax(axis=1), z.argmax(axis=1))


EVERY_CALIBRATOR = sorted(calibrators().values(), key=lambda c: c.name)  # the registry: a new one is tested too


def fit_any(scaler, z, y):
    """`scaler.fit` with hidden-state features for a calibrator that reads them (ats)."""
    if scaler.reads_features:
        return scaler.fit(z, y, np.random.default_rng(3).normal(size=(len(z), 3)))
    return scaler.fit(z, y)


@pytest.mark.parametrize("scaler", EVERY_CALIBRATOR)
def test_fit_refuses_fewer_than_min_items(scaler):
    rng = np.random.default_rng(2)
    n = scaler.min_items
    assert n >= MIN_FIT_ITEMS
    z, y = rng.normal(size=(n - 1, 4)), rng.integers(0, 4, n - 1)
    with pytest.raises(ValueError, match=f"at least {n} items .* but got {n - 1}"):
        fit_any(scaler, z, y)
    z, y = np.zeros((n, 4)), np.arange(n) % 4  # uninformative: converges at once
    assert fit_any(scaler, z, y).n_fit_ == n  # the boundary itself is allowed


@pytest.mark.parametrize("scaler", EVERY_CALIBRATOR)
@pytest.mark.parametrize("logits_shape, labels_len", [((20, 4), 19), ((20,), 20), ((20, 4, 1), 20)])
def test_fit_rejects_shape_mismatch(scaler, logits_shape, labels_len):
    with pytest.raises(ValueError, match=r"Expected `(logits|labels)` of shape"):
        fit_any(scaler, np.zeros(logits_shape), np.zeros(labels_len, dtype=int))


# ----------------------------------------------------------------------------- saving and loading


def test_ts_save_load_round_trip(tmp_path, known_t, ts_fit):
    path = tmp_path / "ts.json"
    ts_fit.save(path)
    assert json.loads(path.read_text())["kind"] == "temperature"
    for loaded in (TemperatureScaler.load(path), load_scaler(path)):
        assert type(loaded) is TemperatureScaler
        assert loaded == ts_fit  # every field, floats exactly
        np.testing.assert_array_equal(loaded.probs(known_t[0][:50]), ts_fit.probs(known_t[0][:50]))


def test_vs_save_load_round_trip(tmp_path, known_t):
    z, y = known_t
    vs = VectorScaler.fit(z[:2000], y[:2000])
    path = tmp_path / "vs.json"
    vs.save(path)
    for loaded in (VectorScaler.load(path), load_scaler(path)):
        assert type(loaded) is VectorScaler
        assert loaded == vs
        np.testing.assert_array_equal(loaded.probs(z[:50]), vs.probs(z[:50]))


def test_load_of_the_wrong_kind_raises(tmp_path):
    ts_path, vs_path, other = tmp_path / "ts.json", tmp_path / "vs.json", tmp_path / "platt.json"
    TemperatureScaler.fitted(temperature=2.0).save(ts_path)
    VectorScaler.fitted(weights=[1.0, 1.0], biases=[0.0, 0.0]).save(vs_path)
    other.write_text(json.dumps({"kind": "platt", "a": 1.0}))
    with pytest.raises(ValueError, match="Expected a temperature-scaling file, .* kind='vector'"):
        TemperatureScaler.load(vs_path)
    with pytest.raises(ValueError, match="Expected a vector-scaling file, .* kind='temperature'"):
        VectorScaler.load(ts_path)
    with pytest.raises(ValueError, match=r"calibrator kind in \['adaptive_temperature', 'temperature', 'vector'\], .* 'platt'"):
        load_scaler(other)
    with pytest.raises(ValueError, match="temperature-scaling file"):
        TemperatureScaler.load(other)


@pytest.mark.parametrize("text", ["[1, 2]", "2.5"])
def test_load_of_a_non_object_json_raises_value_error(tmp_path, text):
    path = tmp_path / "ts.json"
    path.write_text(text)
    with pytest.raises(ValueError):
        load_scaler(path)
    with pytest.raises(ValueError):
        TemperatureScaler.load(path)


# ----------------------------------------------------------------------------- vector scaling


def test_vs_nll_not_worse_than_ts_and_better_with_position_bias():
    rng = np.random.default_rng(3)
    z = rng.normal(0.0, 3.0, size=(5000, N_OPTIONS))
    bias = np.array([0.8, 0.0, -0.4, 0.0])  # a position preference only VS can model
    y = _sample_labels(rng, z / T_TRUE + bias[None, :])
    ts, vs = TemperatureScaler.fit(z, y), VectorScaler.fit(z, y)
    assert vs.nll_before_ == pytest.approx(ts.nll_before_, abs=1e-12)
    assert vs.nll_after_ <= ts.nll_after_ + 1e-9
    assert ts.nll_after_ - vs.nll_after_ > 0.01  # the extra freedom is used
    assert metrics.nll(vs.probs(z), y) == pytest.approx(vs.nll_after_, abs=1e-9)
    np.testing.assert_allclose(vs.weights_, 1.0 / T_TRUE, rtol=0.1)
    b = np.asarray(vs.biases_) - np.mean(vs.biases_)  # softmax is shift-invariant
    np.testing.assert_allclose(b, bias - bias.mean(), atol=0.15)


def test_vs_on_ragged_logits_keeps_padding_at_zero(ragged):
    z, y = ragged
    vs = VectorScaler.fit(z[:5000], y[:5000])
    assert np.all(np.isfinite(vs.weights_)) and np.all(np.isfinite(vs.biases_))
    assert math.isfinite(vs.nll_after_) and vs.nll_after_ <= vs.nll_before_
    probs = vs.probs(z)
    assert not np.isnan(probs).any()
    assert np.all(probs[~np.isfinite(z)] == 0.0)


def test_vs_transform_of_more_options_than_fitted_raises():
    vs = VectorScaler.fitted(weights=[2.0, 1.0, 0.5], biases=[0.0, 1.0, 0.0])
    with pytest.raises(ValueError, match=r"at most 3 options \(fitted K\), but got 4"):
        vs.transform(np.zeros((2, 4)))
    # fewer options use the first positions' parameters
    np.testing.assert_allclose(vs.transform(np.array([[1.0, 2.0]])), [[2.0, 3.0]])
    np.testing.assert_allclose(vs.transform(np.array([[1.0, 2.0, -np.inf]])), [[2.0, 3.0, -np.inf]])


# ----------------------------------------------------------------------------- overconfidence


def test_overconfident_logits_get_t_above_one_and_lower_ece():
    rng = np.random.default_rng(4)
    z = rng.normal(0.0, 1.5, size=(N_ITEMS, N_OPTIONS))
    y = _sample_labels(rng, z)  # calibrated at T = 1 ...
    hot = 4.0 * z  # ... so 4x logits are overconfident by T = 4
    ts = TemperatureScaler.fit(hot, y)
    assert ts.temperature_ > 1.0
    assert ts.temperature_ == pytest.approx(4.0, rel=0.05)
    ece_before = metrics.ece(metrics.softmax(hot), y)
    ece_after = metrics.ece(ts.probs(hot), y)
    assert ece_before > 0.1
    assert ece_after < 0.25 * ece_before
    assert ts.nll_after_ < ts.nll_before_
