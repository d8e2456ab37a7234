"""Every post-hoc calibrator follows scikit-learn's estimator conventions (calibration/posthoc/base.py):
`fit(X, y, sample_weight=None)` returns the calibrator, its fitted state lives in `<name>_`
attributes (absent before a fit: `NotFittedError`), `n_features_in_` and `classes_` are set,
inputs are checked (NaN, +inf, text labels refused with a clear message; -inf is padding),
`score` is the mean log-likelihood of the gold options (minus the NLL), `predict_proba` gives
the same probabilities as the earlier API (`Cls.fit(logits, labels).probs(logits)`), and
`sklearn.base.clone` gives an unfitted calibrator with the same parameters. The saved file
keeps its format, so a file written before these conventions still loads.

scikit-learn's own checks run over temperature and vector scaling through
`parametrize_with_checks`. A calibrator's X is (N, K) logits whose y indexes its columns,
so some checks fail by design; EXPECTED_FAILURES lists each with its reason, and runs them
strict: a listed check that starts passing fails here, so the list cannot go stale.
Adaptive temperature scaling reads each item's hidden state (`features=` in fit and
predict_proba), which no generic check passes: it gets the interface tests below only.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from calm_core.calibration.posthoc import calibrators

sklearn = pytest.importorskip("sklearn")
from sklearn.base import clone  # noqa: E402
from sklearn.utils import estimator_checks  # noqa: E402
from sklearn.utils.validation import check_is_fitted  # noqa: E402

NAMES = sorted(calibrators())
LOGIT_CALIBRATORS = [n for n in NAMES if not calibrators()[n].reads_features]

LABELS_ARE_COLUMNS = (
    "draws labels that are not column indices of X (classes beyond its width, or text): a calibrator's y "
    "is the gold option's column in the logits X, so it refuses them with a ValueError"
)
ANY_OPTION_COUNT = (
    "predicts on X of another width than the fit's: a calibrator applies to sets with a different option "
    "count (temperature scaling to any width, vector scaling to any width up to its fitted one, the rest "
    "being padding), so it does not refuse them"
)
EXPECTED_FAILURES: dict[str, dict[str, str]] = {
    "common": {
        "check_estimators_overwrite_params": LABELS_ARE_COLUMNS,
        "check_estimators_fit_returns_self": LABELS_ARE_COLUMNS,
        "check_readonly_memmap_input": LABELS_ARE_COLUMNS,
        "check_sample_weights_pandas_series": LABELS_ARE_COLUMNS,
        "check_sample_weights_not_an_array": LABELS_ARE_COLUMNS,
        "check_sample_weights_shape": LABELS_ARE_COLUMNS,
        "check_sample_weights_not_overwritten": LABELS_ARE_COLUMNS,
        "check_classifier_data_not_an_array": LABELS_ARE_COLUMNS,
        "check_classifiers_classes": LABELS_ARE_COLUMNS,
        "check_n_features_in_after_fitting": ANY_OPTION_COUNT,
        "check_transformer_general": ANY_OPTION_COUNT,
        "check_supervised_y_2d": "y of shape (N, 1) is refused, not raveled with a warning: y is one gold index per row",
    },
    "TemperatureScaler": {
        "check_classifiers_train": ANY_OPTION_COUNT,
        "check_classifiers_one_label": (
            "a temperature never changes the argmax: TS predicts the logits' most probable option, "
            "whatever single label it was fitted on"
        ),
    },
    "VectorScaler": {"check_classifiers_train": LABELS_ARE_COLUMNS},
}


def expected_failed_checks(estimator: object) -> dict[str, str]:
    """The checks `estimator` fails on purpose, each with its reason (parametrize_with_checks)."""
    return {**EXPECTED_FAILURES["common"], **EXPECTED_FAILURES[type(estimator).__name__]}


def fit_data(reads_features: bool, n: int = 200, k: int = 4) -> tuple[np.ndarray, np.ndarray, dict]:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(n, k)) * 3.0
    labels = (logits + rng.gumbel(size=logits.shape)).argmax(axis=1)
    extra = {"features": rng.normal(size=(n, 3))} if reads_features else {}
    return logits, labels, extra


@pytest.mark.parametrize("name", NAMES)
def test_fit_returns_self_and_predict_proba_equals_the_earlier_api(name: str) -> None:
    cls = calibrators()[name]
    logits, labels, extra = fit_data(cls.reads_features)
    estimator = cls()
    assert estimator.fit(logits, labels, **extra) is estimator
    probs = estimator.predict_proba(logits, **extra)
    assert probs.shape == logits.shape and np.allclose(probs.sum(axis=1), 1.0) and (probs >= 0).all()
    earlier = cls.fit(logits, labels, *extra.values())  # the classmethod every caller used: a new fitted one
    assert type(earlier) is cls and earlier is not estimator
    np.testing.assert_allclose(probs, earlier.probs(logits, *extra.values()), atol=1e-12)
    np.testing.assert_array_equal(estimator.predict(logits, **extra), probs.argmax(axis=1))
    np.testing.assert_array_equal(estimator.classes_, np.arange(logits.shape[1]))
    check_is_fitted(estimator)
    np.testing.assert_allclose(
        cls().fit_transform(logits, labels, **extra), estimator.transform(logits, *extra.values()), atol=1e-12
    )


@pytest.mark.parametrize("name", NAMES)
def test_clone_is_unfitted_with_the_same_params(name: str) -> None:
    cls = calibrators()[name]
    logits, labels, extra = fit_data(cls.reads_features)
    fitted = cls().fit(logits, labels, **extra)
    copy = clone(fitted)
    assert type(copy) is cls and copy is not fitted
    assert copy.get_params() == fitted.get_params()
    assert copy == cls() and copy != fitted  # the fitted state stays behind
    assert not copy.__sklearn_is_fitted__()
    refitted = copy.fit(logits, labels, **extra)
    np.testing.assert_allclose(refitted.predict_proba(logits, **extra), fitted.predict_proba(logits, **extra))
    assert pickle.loads(pickle.dumps(fitted)) == fitted


@pytest.mark.parametrize("name", NAMES)
def test_params_are_the_hyperparameters_and_unknown_ones_are_refused(name: str) -> None:
    estimator = calibrators()[name]()
    assert estimator.get_params() == {k: getattr(estimator, k) for k in estimator.hyperparameters}
    assert estimator.set_params() is estimator
    with pytest.raises(ValueError, match="hyperparameter"):
        estimator.set_params(not_a_parameter=1)


@estimator_checks.parametrize_with_checks(
    [calibrators()[n]() for n in LOGIT_CALIBRATORS],
    expected_failed_checks=expected_failed_checks,
    xfail_strict=True,
)
def test_scikit_learn_estimator_checks(estimator, check) -> None:
    check(estimator)


def test_a_calibrator_written_to_the_earlier_contract_gets_the_interface() -> None:
    """A plug-in whose `fit` is a classmethod returning a new calibrator (the contract
    before this interface) keeps working both ways."""
    from dataclasses import dataclass

    from calm_core.calibration.posthoc.base import PosthocCalibrator, check_fit_inputs

    @dataclass
    class Halver(PosthocCalibrator):
        name = "halve_old"
        label = "Halve"
        kind = "halve_old"
        factor: float = 1.0
        n_fit: int = 0

        @classmethod
        def fit(cls, logits, labels):
            return cls(0.5, len(check_fit_inputs(logits, labels)[1]))

        def transform(self, logits):
            return np.asarray(logits, dtype=np.float64) * self.factor

    logits, labels, _ = fit_data(False)
    made = Halver.fit(logits, labels)
    assert made.factor == 0.5 and made.n_fit == 200
    mine = Halver()
    assert mine.fit(logits, labels) is mine and mine.factor == 0.5
    np.testing.assert_allclose(mine.predict_proba(logits), made.probs(logits))


# ----------------------------------------------------------------------------- conventions


@pytest.mark.parametrize("name", NAMES)
def test_unfitted_is_not_fitted_and_the_state_ends_in_underscore(name: str) -> None:
    from sklearn.exceptions import NotFittedError

    from calm_core.calibration.fitted import NotFittedError as OurNotFittedError

    cls = calibrators()[name]
    logits, labels, extra = fit_data(cls.reads_features)
    unfitted = cls()
    for method in ("predict_proba", "predict"):
        with pytest.raises(NotFittedError, match="not fitted yet"):
            getattr(unfitted, method)(logits, **extra)
    with pytest.raises(OurNotFittedError):  # ours too, for callers without scikit-learn
        unfitted.score(logits, labels, **extra)
    with pytest.raises(NotFittedError):
        check_is_fitted(unfitted)
    assert not any(k.endswith("_") for k in vars(unfitted))  # nothing fitted is set in __init__
    fitted = cls().fit(logits, labels, **extra)
    state = {f"{k}_" for k in cls.fitted_state}
    assert state <= set(vars(fitted)) and not set(cls.fitted_state) & set(vars(fitted))
    assert fitted.n_features_in_ == logits.shape[1]
    with pytest.raises(AttributeError, match="fitted value is `n_fit_`"):
        fitted.n_fit  # noqa: B018 - the name before the conventions says where it went


@pytest.mark.parametrize("name", LOGIT_CALIBRATORS)
def test_sample_weight_is_the_nll_of_repeated_rows(name: str) -> None:
    """Integer weights fit what repeating each row that many times fits (0: the row left out)."""
    cls = calibrators()[name]
    logits, labels, _ = fit_data(False, n=120)
    weights = np.random.default_rng(1).integers(0, 4, size=len(labels))
    weighted = cls().fit(logits, labels, sample_weight=weights)
    repeated = cls().fit(np.repeat(logits, weights, axis=0), np.repeat(labels, weights))
    np.testing.assert_allclose(weighted.predict_proba(logits), repeated.predict_proba(logits), atol=1e-6)
    assert weighted.nll_after_ == pytest.approx(repeated.nll_after_, abs=1e-9)
    unweighted = cls().fit(logits, labels)
    assert not np.allclose(weighted.predict_proba(logits), unweighted.predict_proba(logits), atol=1e-4)
    ones = cls.fit(logits, labels, sample_weight=np.ones(len(labels)))  # the classmethod takes them too
    np.testing.assert_allclose(ones.probs(logits), unweighted.probs(logits), atol=1e-9)
    with pytest.raises(ValueError, match="sample_weight"):
        cls().fit(logits, labels, sample_weight=-np.ones(len(labels)))


def test_a_calibrator_that_fits_without_weights_refuses_them() -> None:
    logits, labels, extra = fit_data(True, n=60)
    with pytest.raises(ValueError, match="Expected no `sample_weight`: AdaptiveTemperature"):
        calibrators()["ats"]().fit(logits, labels, sample_weight=np.ones(60), **extra)


@pytest.mark.parametrize("name", NAMES)
def test_score_is_the_mean_log_likelihood_of_the_gold_options(name: str) -> None:
    from calm_core.calibration import metrics

    cls = calibrators()[name]
    logits, labels, extra = fit_data(cls.reads_features)
    fitted = cls().fit(logits, labels, **extra)
    probs = fitted.predict_proba(logits, **extra)
    assert fitted.score(logits, labels, **extra) == pytest.approx(-metrics.nll(probs, labels), abs=1e-12)
    w = np.arange(len(labels)) % 3
    by_hand = np.sum(w * np.log(probs[np.arange(len(labels)), labels])) / w.sum()
    assert fitted.score(logits, labels, sample_weight=w, **extra) == pytest.approx(by_hand, abs=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_nan_and_inf_are_refused_in_fit_and_predict(name: str) -> None:
    cls = calibrators()[name]
    logits, labels, extra = fit_data(cls.reads_features)
    fitted = cls().fit(logits, labels, **extra)
    for bad, word in ((np.nan, "NaN"), (np.inf, r"\+inf")):
        broken = logits.copy()
        broken[3, 1] = bad
        with pytest.raises(ValueError, match=f"Expected `logits` without {word}"):
            cls().fit(broken, labels, **extra)
        with pytest.raises(ValueError, match=f"without {word}"):
            fitted.predict_proba(broken, **extra)


@pytest.mark.parametrize("name", LOGIT_CALIBRATORS)
def test_inputs_are_checked_with_a_clear_message(name: str) -> None:
    cls = calibrators()[name]
    logits, labels, _ = fit_data(False)
    with pytest.raises(ValueError, match="Unknown label type"):
        cls().fit(logits, np.array(["a"] * len(labels)))
    with pytest.raises(ValueError, match=r"labels` in \[0, 4\)"):
        cls().fit(logits, labels + 1)
    with pytest.raises(ValueError, match="finite logit at every gold option"):
        padded = logits.copy()
        padded[0, labels[0]] = -np.inf
        cls().fit(padded, labels)
    padded = logits.copy()
    padded[::5, 3] = -np.inf  # an option some items lack: padding, accepted
    labels = np.where(np.isinf(padded[np.arange(len(labels)), labels]), 0, labels)
    probs = cls().fit(padded, labels).predict_proba(padded)
    assert (probs[::5, 3] == 0).all()


OLD_FILES = {  # what `save` wrote before the estimator conventions (the dataclass fields, then kind)
    "ts": '{"temperature": 1.7, "nll_before": 1.2, "nll_after": 1.1, "n_fit": 50, "kind": "temperature"}',
    "vs": '{"weights": [0.5, 0.6], "biases": [0.1, -0.1], "nll_before": null, "nll_after": null, "n_fit": 0, '
    '"kind": "vector"}',
}


@pytest.mark.parametrize("name", sorted(OLD_FILES))
def test_a_file_saved_before_the_conventions_loads_and_is_saved_the_same(name: str, tmp_path) -> None:
    import json

    from calm_core.calibration import metrics
    from calm_core.calibration.posthoc import load_calibrator

    path = tmp_path / "old.json"
    path.write_text(OLD_FILES[name])
    loaded = load_calibrator(path)
    check_is_fitted(loaded)
    z = np.array([[1.0, 0.0], [0.0, 2.0]])
    expected = z / 1.7 if name == "ts" else z * np.array([0.5, 0.6]) + np.array([0.1, -0.1])
    np.testing.assert_allclose(loaded.predict_proba(z), metrics.softmax(expected), atol=1e-12)
    loaded.save(tmp_path / "again.json")
    assert json.loads((tmp_path / "again.json").read_text()) == json.loads(OLD_FILES[name])
