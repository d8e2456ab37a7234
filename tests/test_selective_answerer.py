"""SelectiveAnswerer (calibration/selective_answerer.py): selective answering in MAPIE's
risk-control shape, `calibrate` on held-out items then `predict`, with the threshold, the
valid thresholds and the p-values as fitted attributes. Its choice is the rule's own
(calibration/selective.py), its valid thresholds pass the rule's test read literally, and
`calm selective` / Compare (results/selective.py) choose through it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from calm_core.calibration import selective
from calm_core.calibration.fitted import NotFittedError
from calm_core.calibration.selective_answerer import ABSTAIN, SelectiveAnswerer
from tests.test_selective import binomial_reference, calibrated

RULES = ("crc", "ltt", "ltt-answered")


def probs_of(c: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Three-option probabilities whose top label has confidence c and is right where a is 1:
    option 0 holds c, the other two share the rest; the gold is 0 when right, else 1."""
    p = np.stack([c, (1 - c) / 2, (1 - c) / 2], axis=1)
    return p, np.where(a == 1.0, 0, 1)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("seed", [0, 1])
def test_the_choice_is_the_rules_own(rule: str, seed: int) -> None:
    c, a = calibrated(120, np.random.default_rng(seed))
    p, y = probs_of(c, a)
    answerer = SelectiveAnswerer(rule, target_level=0.2, confidence_level=0.9)
    assert answerer.calibrate(p, y) is answerer
    expected = selective.choose_threshold(c, a, 0.2, rule, 0.1)
    assert answerer.record_ == expected
    assert answerer.threshold_ == expected.threshold and answerer.n_calibration_ == 120
    if answerer.valid_thresholds_.size:
        assert answerer.threshold_ == answerer.valid_thresholds_.min()
    else:
        assert math.isinf(answerer.threshold_)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_crc_valid_thresholds_pass_the_rule_read_literally(seed: int) -> None:
    c, a = calibrated(60, np.random.default_rng(seed))
    answerer = SelectiveAnswerer("crc", target_level=0.25).calibrate(*probs_of(c, a))
    n = len(c)
    literal = [t for t in sorted(set(c.tolist()))
               if (sum(1 for ci, ai in zip(c, a, strict=True) if ci >= t and ai == 0) + 1) / (n + 1) <= 0.25 + 1e-12]
    np.testing.assert_array_equal(answerer.valid_thresholds_, literal)
    assert answerer.p_values_ is None and answerer.record_.delta is None  # crc tests no null


@pytest.mark.parametrize("answered", [False, True])
def test_ltt_p_values_are_the_binomial_tail_and_valid_is_the_run_from_the_top(answered: bool) -> None:
    c, a = calibrated(80, np.random.default_rng(3))
    rule = "ltt-answered" if answered else "ltt"
    answerer = SelectiveAnswerer(rule, target_level=0.2, confidence_level=0.9).calibrate(*probs_of(c, a))
    grid, p_values = answerer.candidates_, answerer.p_values_
    tested = ~np.isnan(p_values)
    for t, p in zip(grid[tested], p_values[tested], strict=True):
        above = a[c >= t]
        m = len(above) if answered else len(c)
        assert p == pytest.approx(binomial_reference(int((above == 0).sum()), m, 0.2), rel=1e-9)
    valid = set(answerer.valid_thresholds_.tolist())
    assert all(p <= 0.1 for t, p in zip(grid, p_values, strict=True) if t in valid)
    first_failure = next((i for i, p in enumerate(p_values) if p > 0.1), len(grid))
    assert valid == {float(t) for t, p in zip(grid[:first_failure], p_values[:first_failure], strict=True)
                     if not np.isnan(p)}
    assert np.isnan(p_values[first_failure + 1:]).all()  # the walk stopped there


def test_predict_answers_at_or_above_the_threshold_and_abstains_below() -> None:
    c, a = calibrated(200, np.random.default_rng(4))
    answerer = SelectiveAnswerer("crc", target_level=0.15).calibrate(*probs_of(c, a))
    t = answerer.threshold_
    assert 0.5 < t < 0.8  # the rows below are built for a threshold in this range
    new = np.array([
        [t, 1 - t, 0.0],  # confidence exactly t, option 0: answered
        [1 - (t - 1e-6), t - 1e-6, 0.0],  # just below t: abstains
        [0.2, 0.8, np.nan],  # ragged (NaN: no third option), 0.8 >= t: option 1
    ])
    np.testing.assert_array_equal(answerer.predict(new), [0, ABSTAIN, 1])
    np.testing.assert_array_equal(answerer.answers(new), [True, False, True])


def test_confidence_level_gives_the_clis_delta_exactly() -> None:
    """1 - 0.95 is 0.050000000000000044 in floating point; the record keeps 0.05, as
    `calm selective --delta 0.05` always wrote it."""
    c, a = calibrated(100, np.random.default_rng(5))
    record = SelectiveAnswerer("ltt", 0.2, 0.95).calibrate(*probs_of(c, a)).record_
    assert record.delta == 0.05 and record == selective.ltt_threshold(c, a, 0.2, 0.05)


def test_predict_before_calibrate_is_not_fitted() -> None:
    with pytest.raises(NotFittedError, match="calibrate"):
        SelectiveAnswerer().predict([[0.6, 0.4]])
    sklearn_exceptions = pytest.importorskip("sklearn.exceptions")
    with pytest.raises(sklearn_exceptions.NotFittedError):  # scikit-learn's own, once it is loaded
        SelectiveAnswerer().answers([[0.6, 0.4]])


def test_bad_arguments_name_the_field() -> None:
    p, y = probs_of(*calibrated(100, np.random.default_rng(6)))
    with pytest.raises(ValueError, match="`rule`"):
        SelectiveAnswerer("magic").calibrate(p, y)
    with pytest.raises(ValueError, match="`target_level`"):
        SelectiveAnswerer("crc", target_level=1.5).calibrate(p, y)
    with pytest.raises(ValueError, match="`confidence_level`"):
        SelectiveAnswerer("ltt", confidence_level=1.0).calibrate(p, y)
    with pytest.raises(ValueError, match="`y`"):
        SelectiveAnswerer("crc").calibrate(p, y[:-1])
    with pytest.raises(selective.TooFewItems) as refused:
        SelectiveAnswerer("crc", target_level=0.05).calibrate(p[:10], y[:10])
    assert refused.value.needed == 19


def test_calm_selective_chooses_through_the_answerer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI and Compare both call results/selective.py's `choose`, which calibrates a
    SelectiveAnswerer: a spy on `calibrate` sees every variant's S_V probabilities."""
    from calm_core.cli.commands import main
    from tests.test_selective_run import make_run

    seen: list[tuple[str, int]] = []
    real = SelectiveAnswerer.calibrate

    def spy(self: SelectiveAnswerer, probs: object, y: object) -> SelectiveAnswerer:
        seen.append((self.rule, len(np.asarray(y))))
        return real(self, probs, y)

    monkeypatch.setattr(SelectiveAnswerer, "calibrate", spy)
    run = make_run(tmp_path)
    assert main(["selective", run.run_id, "--runs-root", str(tmp_path), "--variant", "calm", "--rule", "crc"]) == 0
    assert seen == [("crc", 60), ("crc", 60)]  # calm, then base
