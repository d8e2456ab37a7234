"""Every post-hoc calibrator has scikit-learn's estimator interface (calibration/posthoc/base.py):
`fit(X, y)` returns the calibrator, `predict_proba` gives the same probabilities as the
earlier API (`Cls.fit(logits, labels).probs(logits)`), `get_params` / `set_params`, and
`sklearn.base.clone` gives an unfitted calibrator with the same parameters.

scikit-learn's `check_estimator` draws its own data: features of any width and labels of
any kind (strings, floats, more classes than columns). A calibrator's X is (N, K) logits
whose labels index its columns, so most of its checks do not apply. The subset run here
is the one that holds for any input domain: cloning, repr, tags, parameters unchanged by
`get_params` / `set_params`, no attribute set in `__init__` beyond the fields, `fit` on the
same data twice giving the same predictions, `check_is_fitted` after fit, pickling,
order and subset invariance of predictions, `n_features_in_`, mixin order, a 1-D X
refused. Left out, and why: the checks that fit on labels outside 0..K-1 or not integers
(classes, train, overwrite_params, empty data, nan/inf, sparse, 1 feature, regression
targets, y 2-D, y None); `dont_overwrite_parameters`, `parameters_default_constructible`
and `estimators_unfitted`, because a calibrator's dataclass fields are its fitted state
(what `save` writes and a hand-made `TemperatureScaler(temperature=2.0)` sets), not
hyperparameters, by design. Adaptive temperature scaling reads each item's hidden state
(`features=` in fit and predict_proba), which no generic check passes: it gets the round
trip and `clone` only.
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
GENERIC_CHECKS = (
    "check_estimator_cloneable",
    "check_estimator_repr",
    "check_estimator_tags_renamed",
    "check_valid_tag_types",
    "check_no_attributes_set_in_init",
    "check_fit_score_takes_y",
    "check_get_params_invariance",
    "check_set_params",
    "check_dict_unchanged",
    "check_fit_idempotent",
    "check_fit_check_is_fitted",
    "check_n_features_in",
    "check_fit1d",
    "check_estimators_pickle",
    "check_methods_sample_order_invariance",
    "check_methods_subset_invariance",
    "check_mixin_order",
    "check_decision_proba_consistency",
)


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


@pytest.mark.parametrize("check", GENERIC_CHECKS)
@pytest.mark.parametrize("name", [n for n in NAMES if not calibrators()[n].reads_features])
def test_scikit_learn_checks_that_apply(name: str, check: str) -> None:
    estimator = calibrators()[name]()
    getattr(estimator_checks, check)(type(estimator).__name__, estimator)


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
