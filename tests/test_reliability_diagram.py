"""Issue 40, item 4 ("small samples are drawn as if they were certain"): reliability diagrams
choose their bins from the item count, draw a Wilson interval per bin and one-item bins
hollow, and say the ECE that noise alone gives at the same size
(calm_core/calibration/metrics/reliability.py; the charts in app/widgets/charts.py and
calm_core/results/report_svg.py).

Run: .venv/bin/python -m pytest tests/test_reliability_diagram.py -q
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from calm_core.calibration import metrics
from calm_core.calibration.metrics import auto_bins, noise_ece, prepare_reliability, wilson_interval
from calm_core.calibration.metrics.reliability import LEVEL, _noise_ece_cached

Z90 = 1.6448536269514722  # the standard normal's 0.95 quantile


def fourteen(seed: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Issue 40's test split: 14 items with distinct confidences, right with probability c."""
    rng = np.random.default_rng(seed)
    c = np.sort(rng.uniform(0.3, 1.0, 14))
    return c, (rng.random(14) < c).astype(float)


def wilson_by_hand(k: int, n: int, z: float = Z90) -> tuple[float, float]:
    """The closed formula, written out independently (Wilson 1927; Brown, Cai & DasGupta 2001, eq. 4)."""
    p = k / n
    centre = (k + z * z / 2) / (n + z * z)
    half = z * math.sqrt(n) / (n + z * z) * math.sqrt(p * (1 - p) + z * z / (4 * n))
    return max(0.0, centre - half), min(1.0, centre + half)


# ----------------------------------------------------------------------------- the bins


@pytest.mark.parametrize(("n", "bins"), [(1, 1), (2, 2), (5, 3), (14, 4), (40, 6), (99, 10), (100, 10), (500, 15)])
def test_bins_follow_the_item_count(n: int, bins: int) -> None:
    assert auto_bins(n) == bins == min(n, max(3, min(15, round(math.sqrt(n)))))


def test_fourteen_items_get_equal_mass_bins_without_one_item_bins() -> None:
    c, a = fourteen()
    data = prepare_reliability(c, a)
    assert data.strategy == "quantile" and data.n_bins == auto_bins(14) == 4
    assert data.n_items == 14 and data.count.max() - data.count.min() <= 1
    assert not data.hollow.any()
    for b in range(data.n_bins):  # each bin's numbers are its own items' means
        inside = (c >= data.lower[b]) & (c <= data.upper[b]) & ((c > data.lower[b]) | (b == 0))
        assert inside.sum() == data.count[b]
        assert data.mean_confidence[b] == pytest.approx(c[inside].mean())
        assert data.accuracy[b] == pytest.approx(a[inside].mean())


def test_fifteen_equal_width_bins_on_fourteen_items_flag_one_item_bins_hollow() -> None:
    c, a = fourteen()
    data = prepare_reliability(c, a, n_bins=15, strategy="uniform")
    table = metrics.bin_confidences(c, a, n_bins=15)
    assert data.count.tolist() == table.counts.tolist()  # the ECE's own bins, empty ones kept
    assert data.hollow.tolist() == (table.counts == 1).tolist() and data.hollow.sum() >= 3
    records = data.to_records()
    assert [r["hollow"] for r in records] == data.hollow.tolist()
    assert all(r["accuracy"] is None and r["acc_low"] is None for r in records if r["count"] == 0)


def test_tied_confidences_leave_no_empty_equal_mass_bin() -> None:
    c = np.array([0.5] * 8 + [0.9, 0.95])
    data = prepare_reliability(c, np.ones(10), n_bins=5)
    assert (data.count > 0).all() and data.n_items == 10


# ----------------------------------------------------------------------------- Wilson


@pytest.mark.parametrize(("k", "n"), [(0, 1), (1, 1), (0, 5), (3, 10), (7, 7), (12, 40), (250, 500)])
def test_wilson_interval_matches_the_closed_formula_and_a_library(k: int, n: int) -> None:
    low, high = wilson_interval(k, n, 0.9)
    assert (float(low), float(high)) == pytest.approx(wilson_by_hand(k, n), abs=1e-12)
    try:  # statsmodels where installed, else scipy (the test extra's scikit-learn brings it)
        from statsmodels.stats.proportion import proportion_confint

        ref = proportion_confint(k, n, alpha=0.1, method="wilson")
    except ImportError:
        import scipy.stats

        ci = scipy.stats.binomtest(k, n).proportion_ci(confidence_level=0.9, method="wilson")
        ref = (ci.low, ci.high)
    assert (float(low), float(high)) == pytest.approx(ref, abs=1e-9)


def test_wilson_interval_known_values() -> None:
    # n = 1: the ends are 1 / (1 + z^2) and z^2 / (1 + z^2), whatever the item's answer
    z2 = Z90 * Z90
    assert [float(v) for v in wilson_interval(1, 1)] == pytest.approx([1 / (1 + z2), 1.0])
    assert [float(v) for v in wilson_interval(0, 1)] == pytest.approx([0.0, z2 / (1 + z2)])
    low, high = wilson_interval([5, 50], [10, 100])  # same proportion, 10x the items: narrower
    assert high[1] - low[1] < high[0] - low[0] and low[0] < 0.5 < high[0]
    assert np.isnan(wilson_interval(0, 0)[0])
    with pytest.raises(ValueError, match="Expected `level` in"):
        wilson_interval(1, 2, level=1.5)


def test_every_bin_carries_its_wilson_interval() -> None:
    c, a = fourteen()
    data = prepare_reliability(c, a)
    k = np.round(data.accuracy * data.count)
    low, high = wilson_interval(k, data.count, LEVEL)
    assert np.allclose(data.acc_low, low) and np.allclose(data.acc_high, high)
    assert (data.acc_low <= data.accuracy).all() and (data.accuracy <= data.acc_high).all()


# ----------------------------------------------------------------------------- noise ECE


def test_noise_ece_draws_the_reported_ece() -> None:
    """Each draw's ECE is metrics.confidence_ece on the same bins (checked on a few draws)."""
    from calm_core.calibration.metrics.reliability import _noise_draws

    c, _ = fourteen()
    eces = _noise_draws(c, 15, "uniform", 5, seed=3)
    rng = np.random.default_rng(3)
    for value in eces:
        draw = (rng.random((1, len(c))) < c).astype(float)[0]
        assert value == pytest.approx(metrics.confidence_ece(c, draw, n_bins=15), abs=1e-12)


def test_noise_ece_shrinks_with_the_item_count_and_is_cached() -> None:
    rng = np.random.default_rng(0)
    small = noise_ece(rng.uniform(0.3, 1.0, 40))
    large = noise_ece(rng.uniform(0.3, 1.0, 2000))
    assert 0.0 < small.median <= small.upper and small.n_items == 40 and small.n_bins == 15
    assert large.upper < small.median  # 50x the items: far less noise
    before = _noise_ece_cached.cache_info().hits
    c = rng.uniform(0.3, 1.0, 40)
    assert noise_ece(c) == noise_ece(c.copy())  # the same inputs: the cached answer
    assert _noise_ece_cached.cache_info().hits == before + 1
    assert noise_ece(c, seed=1) != noise_ece(c, seed=2)


def test_noise_ece_is_the_binomial_deviation_at_one_confidence() -> None:
    """40 items all at 0.8 in one bin: ECE = |k/40 - 0.8|, k ~ Binomial(40, 0.8), so its
    median and 0.9 quantile are those of that distribution, up to the draws' noise."""
    import scipy.stats

    k = np.arange(41)
    dev, weight = np.abs(k / 40 - 0.8), scipy.stats.binom.pmf(k, 40, 0.8)
    order = np.argsort(dev)
    cdf = np.cumsum(weight[order])
    exact = {q: dev[order][np.searchsorted(cdf, q)] for q in (0.5, 0.9)}
    noise = noise_ece(np.full(40, 0.8), n_draws=4000)
    assert noise.median == pytest.approx(exact[0.5], abs=0.026) and noise.upper == pytest.approx(exact[0.9], abs=0.026)
    assert noise.within(exact[0.5]) and not noise.within(noise.upper + 0.01)


def test_the_noise_line_hardly_moves_with_the_seed() -> None:
    """NOISE_DRAWS is enough that two seeds write the same line to about 0.01 (the line
    shows three decimals; a page redrawn with a new seed should not look different)."""
    c = np.random.default_rng(5).uniform(0.3, 1.0, 40)
    lines = [noise_ece(c, seed=seed) for seed in range(5)]
    assert np.ptp([n.upper for n in lines]) < 0.015 and np.ptp([n.median for n in lines]) < 0.01


def test_a_calibrated_forecast_lands_within_the_noise_line() -> None:
    """The property the line claims: a calibrated forecaster's own ECE is at or under
    `upper` about `level` of the time (checked over 200 fresh forecasts)."""
    rng = np.random.default_rng(11)
    c = rng.uniform(0.3, 1.0, 40)
    noise = noise_ece(c)
    inside = [noise.within(metrics.confidence_ece(c, (rng.random(40) < c).astype(float))) for _ in range(200)]
    assert 0.8 <= np.mean(inside) <= 0.98


def test_noise_line_reads_as_the_issue_asks() -> None:
    noise = noise_ece(np.full(40, 0.8))
    assert noise.line() == (
        f"ECE from noise alone at 40 items: median {noise.median:.3f} (90% of draws up to {noise.upper:.3f})"
    )
    with pytest.raises(ValueError, match="Expected `n_draws` to be a positive int"):
        noise_ece([0.5], n_draws=0)
    with pytest.raises(ValueError, match="Expected `confidence` values in"):
        noise_ece([1.5])


# ----------------------------------------------------------------------------- the charts read back


def test_a_fourteen_item_diagram_in_fifteen_bins_draws_intervals_and_hollow_one_item_bins() -> None:
    """Issue 40's case: 14 test items in the ECE's 15 bins. The figure's own data holds a
    whisker per bin (its Wilson interval) and the one-item bins as an outlined trace."""
    from app.widgets.reliability_charts import CLEAR, HOLLOW, INTERVAL, reliability_figure

    c, a = fourteen()
    records = prepare_reliability(c, a, n_bins=15, strategy="uniform").to_records()
    traces = {t.name: t for t in reliability_figure(records).data}
    ones = [r for r in records if r["count"] == 1]
    filled = [r for r in records if r["count"] > 0]
    hollow, solid, whiskers = traces[HOLLOW], traces["accuracy"], traces[INTERVAL]
    assert list(hollow.x) == pytest.approx([(r["lower"] + r["upper"]) / 2 for r in ones])
    assert list(hollow.y) == [r["accuracy"] for r in ones] and set(hollow.y) <= {0.0, 1.0}
    assert hollow.marker.color == CLEAR and hollow.marker.line.width > 0  # an outline, not a bar
    assert solid.marker.color != CLEAR and len(solid.x) + len(hollow.x) == len(filled)
    assert list(whiskers.x) == pytest.approx([(r["lower"] + r["upper"]) / 2 for r in filled])  # every filled bin
    assert list(whiskers.error_y.array) == pytest.approx([r["acc_high"] - r["accuracy"] for r in filled])
    assert list(whiskers.error_y.arrayminus) == pytest.approx([r["accuracy"] - r["acc_low"] for r in filled])
    assert all(h > 0.2 for h in np.add(whiskers.error_y.array, whiskers.error_y.arrayminus))  # few items: wide
    assert [t.name for t in reliability_figure(records).data].index(INTERVAL) > 3  # over the bars and gaps


def test_the_default_diagram_of_fourteen_items_has_four_bins_and_nothing_hollow() -> None:
    from app.widgets.reliability_charts import HOLLOW, reliability_figure, reliability_overlay

    records = prepare_reliability(*fourteen()).to_records()
    traces = {t.name: t for t in reliability_figure(records).data}
    assert HOLLOW not in traces and len(traces["accuracy"].x) == 4
    assert list(traces["items"].width) == pytest.approx([(r["upper"] - r["lower"]) * 0.95 for r in records])
    overlay = reliability_overlay({"base": records})
    assert HOLLOW not in {t.name for t in overlay.data}


def test_the_overlay_marks_one_item_bins_hollow_and_keys_them_in_the_legend() -> None:
    from app.widgets.reliability_charts import HOLLOW, reliability_overlay

    c, a = fourteen()
    records = prepare_reliability(c, a, n_bins=15, strategy="uniform").to_records()
    figure = reliability_overlay({"base": records, "ts": prepare_reliability(c, a).to_records()})
    base = next(t for t in figure.data if t.name == "base")
    kept = [r for r in records if r["count"]]
    assert list(base.marker.symbol) == ["circle-open" if r["count"] == 1 else "circle" for r in kept]
    assert list(base.error_y.array) == pytest.approx([r["acc_high"] - r["accuracy"] for r in kept])
    ts = next(t for t in figure.data if t.name == "ts")
    assert set(ts.marker.symbol) == {"circle"}
    assert [t.marker.symbol for t in figure.data if t.name == HOLLOW] == ["circle-open"]


# ----------------------------------------------------------------------------- the pages


def _caption_text(at) -> str:
    return "\n".join(c.value for c in at.caption)


def test_compare_says_the_noise_line_and_draws_hollow_bins_in_fifteen_bins(open_page) -> None:
    """A finished run's 24 test items: equal-mass bins by default, each variant's noise
    line under the diagram; with the ECE's 15 bins, the side-by-side charts draw the
    one-item bins hollow (read from the chart specs the page sends)."""
    import json

    from app.widgets.reliability_charts import HOLLOW, INTERVAL
    from tests.test_verdict import finished_run

    finished_run()
    at = open_page("../pages/compare/compare.py")
    text = _caption_text(at)
    assert "ECE from noise alone at 24 items: median " in text and "90% of draws up to" in text
    assert f"{auto_bins(24)} equal-mass bins of" in text
    at.selectbox(key="compare_bins").set_value(15).run()
    at.radio(key="compare_layout").set_value("side by side").run()
    assert not at.exception, at.exception
    specs = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    names = [t.get("name") for spec in specs for t in spec["data"]]
    assert HOLLOW in names and INTERVAL in names
    assert "15 equal-width bins, as the ECE" in _caption_text(at)


def test_learn_says_the_noise_line_and_fit_t_agrees_with_the_slider(
    open_page, tiny_everywhere, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 40: "Fit T reports T = 3.84 while the slider shows 3.85". The caption reports
    the temperature as the slider will show it; after Fit T the noise line is there too."""
    from app.pages.learn.temperature import T_STEP, on_slider
    from calm_core.calibration.posthoc import TemperatureScaler

    monkeypatch.setattr(TemperatureScaler, "fit", classmethod(lambda cls, logits, labels: cls.fitted(temperature=3.842)))
    at = open_page("../pages/learn/learn.py")
    assert "ECE from noise alone at 40 items" in _caption_text(at)
    fitted = next(c.value for c in at.caption if "temperature with the lowest NLL" in c.value)
    assert "T = 3.85 " in fitted and "3.84" not in fitted
    at.button(key="learn_fit").click().run()
    assert not at.exception, at.exception
    assert at.slider(key="learn_temperature").value == 3.85 == on_slider(3.842)
    assert "Reliability diagram at T = 3.85" in at.get("plotly_chart")[-1].proto.spec
    assert "ECE from noise alone at 40 items" in _caption_text(at)
    for t in (0.1, 0.25, 1.0, 1.024, 3.825, 7.99, 9.0):
        value = on_slider(t)
        assert 0.25 <= value <= 8.0 and round(value / T_STEP, 6) == round(value / T_STEP)
        assert abs(value - min(8.0, max(0.25, t))) <= T_STEP / 2 + 1e-9
        assert value == round(value, 2)  # no float tail (3.8500000000000005) for a display to round two ways
