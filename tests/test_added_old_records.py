"""`calm eval --run` on a run whose results.json an older studio wrote: a calibrator record
that no longer decodes (ATS counted its components but kept no weights) is left out with a
warning, and the other calibrators' rows are still added."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from calm_core.calibration.posthoc import calibrators
from calm_core.results.added import saved_calibrators
from calm_core.runs.records import RunResults


def test_an_old_ats_record_is_left_out_and_ts_is_kept(caplog: pytest.LogCaptureFixture) -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(0.0, 2.0, size=(60, 4))
    ts = calibrators()["ts"].fit(z, np.argmax(z + rng.gumbel(size=z.shape), axis=1))
    old_ats = {"components": 4, "weight_decay": 0.1, "bias": 0.5, "fit_on": "S_V"}
    rows = [{"variant": "ts", "dataset": "x"}, {"variant": "ats", "dataset": "x"}]
    results = RunResults.from_json({"results": rows, "ts": {**ts.params(), "fit_on": "S_V"}, "ats": old_ats})
    with caplog.at_level(logging.WARNING, logger="calm_core.results.added"):
        fitted = saved_calibrators(results)
    assert set(fitted) == {"ts"}
    np.testing.assert_allclose(fitted["ts"].probs(z[:5]), ts.probs(z[:5]))
    assert any("`ats` is left out" in message for message in caplog.messages)
