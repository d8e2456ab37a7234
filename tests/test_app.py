"""The studio: chart builders checked as data, pages driven by Streamlit's AppTest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import plotly.graph_objects as go

from app.widgets.charts import AXIS_BELOW_PX, LEGEND_ROW_PX, MODEBAR_PX, TITLE_LINE_PX, accuracy_confidence_figure
from app.widgets.reliability_charts import reliability_figure
from calm_core.calibration import metrics

ROOT = Path(__file__).resolve().parent.parent


def _records(n_bins: int = 5):
    conf = np.array([0.95, 0.92, 0.91, 0.55, 0.52])
    correct = np.array([1.0, 0.0, 0.0, 1.0, 1.0])
    return metrics.prepare_reliability(conf, correct, n_bins=n_bins, strategy="uniform").to_records()


def test_reliability_figure_draws_accuracy_gaps_and_counts() -> None:
    fig = reliability_figure(_records())
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["accuracy"].y) == pytest.approx([1.0, 1 / 3])  # bins (0.4,0.6] and (0.8,1]
    under = list(by_name["under-confident (accuracy above confidence)"].y)
    over = list(by_name["over-confident (confidence above accuracy)"].y)
    assert under == pytest.approx([0.535 - 1.0]) and over == pytest.approx([0.9266667 - 1 / 3])
    assert list(by_name["empty bin"].x) == pytest.approx([0.1, 0.3, 0.7])
    assert list(by_name["items"].y) == [0, 0, 2, 0, 3]


def test_reliability_figure_without_empty_bins_has_no_marker() -> None:
    records = metrics.prepare_reliability(np.array([0.3, 0.8]), np.array([1.0, 0.0]), n_bins=1).to_records()
    assert "empty bin" not in {t.name for t in reliability_figure(records).data}


def test_accuracy_confidence_bars() -> None:
    fig = accuracy_confidence_figure(0.5, 0.8)
    assert list(fig.data[0].y) == [0.5, 0.8]
    assert list(fig.data[0].text) == ["50%", "80%"]


def test_learn_page_renders_on_a_tiny_model(tiny_lm, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page runs top to bottom, shows the metrics and reacts to the temperature slider."""
    from streamlit.testing.v1 import AppTest

    import app.widgets.state

    monkeypatch.setattr(app.widgets.state, "get_model", lambda name="embedded": tiny_lm)
    at = AppTest.from_file(str(ROOT / "app" / "server" / "studio.py"), default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    labels = [m.label for m in at.metric]
    assert {"Accuracy", "Mean confidence", "ECE"} <= set(labels)
    ece_before = next(m.value for m in at.metric if m.label == "ECE")
    at.slider(key="learn_temperature").set_value(6.0).run()
    assert not at.exception
    ece_after = next(m.value for m in at.metric if m.label == "ECE")
    assert ece_after != ece_before
    # Issue 23: the ECE label says its bins, and so does the diagram's caption; "Fit T" jumps to the optimum.
    assert "ECE (15 bins)" in labels and "the ECE above uses 15 equal-width bins" in "\n".join(c.value for c in at.caption)
    at.button(key="learn_fit").click().run()
    assert not at.exception, at.exception
    fitted = next(c.value for c in at.caption if "temperature with the lowest NLL" in c.value)
    optimum = float(fitted.split("T = ")[1].split()[0].rstrip("."))
    assert at.slider(key="learn_temperature").value == pytest.approx(min(8.0, max(0.25, optimum)), abs=0.05)
    assert optimum <= 8.0 or "beyond the slider" in fitted  # the tiny random model's optimum is far out


def test_chart_builders_for_monitor_and_compare() -> None:
    from app.widgets.charts import alpha_heatmap, line_figure, tradeoff_figure, variant_colors
    from app.widgets.reliability_charts import reliability_overlay

    fig = line_figure({"a": ([1, 2], [0.5, 0.4]), "b": ([1, 2], [0.1, 0.2])}, "t", log_y=True)
    assert [t.name for t in fig.data] == ["a", "b"] and fig.layout.yaxis.type == "log"
    heat = alpha_heatmap([10, 20], np.array([[1.0, 2.0], [1.5, 3.0]]), ["A", "B"])
    assert [list(row) for row in heat.data[0].z] == [[1.0, 2.0], [1.5, 3.0]] and heat.data[0].zmid == 1.0
    path = tradeoff_figure({"id": ([10, 20, 30], [0.5, 0.5, 0.48], [0.3, 0.2, 0.1])})
    assert list(path.data[0].x) == [0.3, 0.2, 0.1] and path.data[0].marker.symbol[0] == "circle-open"
    marked = tradeoff_figure({"id": ([10], [0.5], [0.3])}, {"id": {"base": (0.4, 0.55), "ts": (0.15, 0.55)}})
    refs = {t.name: (t.x[0], t.y[0], t.marker.symbol) for t in marked.data[1:] if t.legendgroup != "key"}
    assert refs == {"base · id": (0.4, 0.55, "x-thin-open"), "ts · id": (0.15, 0.55, "diamond-open")}
    assert marked.data[1].marker.color == marked.data[0].line.color  # the set's colour
    records = _records()
    over = reliability_overlay({"base": records, "calm": records})
    lines = [t for t in over.data if t.type == "scatter" and t.name in ("base", "calm")]
    assert [len(t.x) for t in lines] == [2, 2]  # the two non-empty bins
    assert list(lines[0].error_y.array) == pytest.approx([records[2]["acc_high"] - 1.0, records[4]["acc_high"] - 1 / 3])
    assert variant_colors(["base", "ts", "calm", "sft"])["calm"] != variant_colors(["base", "ts", "calm", "sft"])["sft"]
    # Variants named in full in the legends; the colours stay keyed by the variant (base grey, ts blue).
    names = {"base": "the model as it is", "ts": "temperature scaling"}
    named = reliability_overlay({"base": records, "ts": records}, names=names)
    legend = {t.name: t.marker.color for t in named.data if t.type == "scatter" and t.name in names.values()}
    assert legend == {"the model as it is": variant_colors(["base"])["base"], "temperature scaling": variant_colors(["ts"])["ts"]}
    named_refs = tradeoff_figure({"id": ([10], [0.5], [0.3])}, {"id": {"ts": (0.15, 0.55)}}, names=names)
    assert "temperature scaling · id" in [t.name for t in named_refs.data]


def test_selected_step_is_marked_on_every_curve_and_the_tradeoff_path() -> None:
    """The calibrated stop's step: a dashed vertical line labelled "selected" on a line
    figure, a star on each ECE-accuracy path at that step; nothing when there is none."""
    from app.widgets.charts import SELECTED_SYMBOL, line_figure, tradeoff_figure

    curves = {"heldout": ([0, 1, 2, 4], [0.9, 0.7, 0.6, 0.65]), "test": ([0, 1, 2, 4], [0.8, 0.7, 0.6, 0.6])}
    plain = line_figure(curves, "NLL")
    assert not plain.layout.shapes and not plain.layout.annotations
    marked = line_figure(curves, "NLL", selected_step=2)
    (shape,) = marked.layout.shapes
    assert (shape.x0, shape.x1, shape.line.dash) == (2, 2, "dash")
    assert [a.text for a in marked.layout.annotations] == ["selected"]
    assert [t.name for t in marked.data] == ["heldout", "test"]  # the mark is no curve
    tolerance = line_figure({"S_T": ([0, 2, 4], [1.0, 1.05, 1.2])}, "lower", threshold=(1.1, "tolerance"))
    assert tolerance.data[1].name == "tolerance" and list(tolerance.data[1].y) == [1.1, 1.1]
    assert list(tolerance.data[1].x) == [0.0, 4.0]

    paths = {"heldout": ([0, 1, 2, 4], [0.5, 0.52, 0.5, 0.48], [0.3, 0.2, 0.1, 0.15]),
             "test": ([0, 1, 2, 4], [0.4, 0.42, 0.41, 0.4], [0.35, 0.25, 0.2, 0.22])}
    assert not any(SELECTED_SYMBOL == t.marker.symbol for t in tradeoff_figure(paths).data)
    stars = [t for t in tradeoff_figure(paths, selected_step=2).data if t.marker.symbol == SELECTED_SYMBOL]
    assert [(t.name, t.x[0], t.y[0]) for t in stars] == [("selected (step 2) · heldout", 0.1, 0.5),
                                                         ("selected (step 2) · test", 0.2, 0.41)]
    assert stars[0].marker.color == tradeoff_figure(paths).data[0].line.color  # the set's colour
    assert len([t for t in tradeoff_figure(paths, selected_step=3).data if t.legendgroup != "key"]) == 2  # no star


def test_tradeoff_reference_markers_stay_visible_where_two_variants_meet() -> None:
    """Issue 40: base's marker hid vector scaling's (filled, one size, one colour, at one
    point). Every reference variant gets a shape of its own, drawn hollow, and the caption's
    key names each shape the chart draws."""
    from app.widgets.charts import reference_key, tradeoff_figure
    from app.widgets.words import variant_names
    from calm_core.results.tables import shared_variants

    shared = shared_variants()
    point = (0.12, 0.6)
    fig = tradeoff_figure({"test": ([10], [0.5], [0.3])}, {"test": dict.fromkeys(shared, point)},
                          names=variant_names(shared))
    markers = {t.name: t.marker for t in fig.data if t.legendgroup != "key" and t.name.endswith(" · test")}
    assert len(markers) == len(shared), list(markers)  # each variant drawn, none merged into another
    symbols = [m.symbol for m in markers.values()]
    assert len(set(symbols)) == len(shared), symbols  # distinct shapes
    assert all(s.endswith("-open") and m.line.width >= 1 for s, m in zip(symbols, markers.values())), symbols
    # A run whose selected step kept the base model: its star sits on base's marker, and both show.
    kept = tradeoff_figure({"test": ([0, 10], [point[1], 0.5], [point[0], 0.3])}, {"test": {"base": point}},
                           selected_step=0)
    there = [t.marker for t in kept.data if t.mode == "markers" and (t.x[0], t.y[0]) == point]
    assert len(there) == 2 and all(m.symbol.endswith("-open") for m in there), there
    key = reference_key(variant_names(shared))
    for symbol, (name, shown) in zip(symbols, variant_names(shared).items()):
        word = symbol.removesuffix("-open").removeprefix("x-thin").split("-")[0] or "x"
        assert f"{word}: {shown}" in key, (name, word, key)


def test_user_text_is_escaped_in_charts_and_inline_code() -> None:
    from app.widgets.charts import option_probability_figure
    from app.widgets.state import code

    fig = option_probability_figure(["<b>bold</b>", "a & b"], {"base": [0.5, 0.5]})
    assert list(fig.data[0].x) == ["&lt;b&gt;bold&lt;/b&gt;", "a &amp; b"]
    assert code("evil`](http://x)") == "`evil'](http://x)`"


def test_figure_png_renders_or_says_why() -> None:
    from app.widgets.charts import figure_png

    import os

    png, why = figure_png(accuracy_confidence_figure(0.5, 0.8))
    if os.environ.get("CALM_REQUIRE_BROWSER") == "1":  # CI installs chromium: PNG export must work there
        assert png is not None, why
    assert (png is not None and png.startswith(b"\x89PNG") and why == "") or (png is None and "HTML" in why)


def _legend_gap_px(fig) -> float:
    """The room between the plot area's bottom and the legend's top, in pixels: the legend
    stands on the figure's bottom edge and is as tall as its rows (app.widgets.charts.legend_rows)."""
    from app.widgets.charts import legend_rows

    layout = fig.layout
    assert layout.legend.yref == "container" and layout.legend.yanchor == "bottom"
    names = [t.name for t in fig.data if t.showlegend is not False and t.name]
    return layout.margin.b - layout.legend.y * layout.height - LEGEND_ROW_PX * legend_rows(names)


def _title_first_line_top_px(fig) -> float:
    """How far below the figure's top the title's first line starts, in pixels (its
    bottom is the anchor; one line is TITLE_LINE_PX tall)."""
    assert fig.layout.title.yanchor == "bottom"
    return (1 - fig.layout.title.y) * fig.layout.height - TITLE_LINE_PX


def test_every_chart_is_framed_in_pixels_title_under_the_mode_bar_legend_under_the_axis_title() -> None:
    """Issue 30: a title is wrapped to its chart's width and starts below Plotly's mode bar;
    the legend starts below the x-axis title whatever the figure's height; the top and
    bottom margins hold them, so the plot area keeps its height."""
    from app.widgets.charts import frame, line_figure, title_lines
    from app.widgets.reliability_charts import reliability_figure

    title = "S_T cross-entropy of theta (lower level)"
    assert len(title_lines(title, 1)) == 1 and len(title_lines(title, 3)) == 2
    assert all(len(line) <= 25 for line in title_lines(title, 3))
    narrow = line_figure({"a": ([1, 2], [0.5, 0.4]), "tolerance": ([1, 2], [0.6, 0.6])}, title, columns=3)
    assert narrow.layout.title.text == "<br>".join(title_lines(title, 3))
    assert _title_first_line_top_px(narrow) >= MODEBAR_PX
    assert narrow.layout.margin.t >= MODEBAR_PX + 2 * TITLE_LINE_PX  # two title lines fit above the plot area
    for fig in (narrow, reliability_figure(_records(), "Reliability diagram at T = 1.00")):
        assert _legend_gap_px(fig) >= AXIS_BELOW_PX - 1e-6
        assert fig.layout.margin.b >= AXIS_BELOW_PX + LEGEND_ROW_PX  # a legend row fits under the axis title
    tall, short = (frame(go.Figure([go.Scatter(name="a"), go.Scatter(name="b")]), "t", h) for h in (600, 150))
    assert _legend_gap_px(tall) == pytest.approx(_legend_gap_px(short))  # pixels, not a fraction of the height


def test_charts_say_what_their_marks_mean_and_skip_float_noise() -> None:
    """Issue 23's smaller items: the trade-off legend explains open and filled markers and
    sits below the x-axis title; the overlay draws no lines across empty bins; both gap
    colours of a reliability diagram are in its legend; a flat curve (float noise around
    1.0) gets a readable axis instead of ticks at 0.999998 .. 1.000001."""
    from app.widgets.charts import line_figure, tradeoff_figure
    from app.widgets.reliability_charts import reliability_figure, reliability_overlay

    path = tradeoff_figure({"id": ([10, 20], [0.5, 0.5], [0.3, 0.2])})
    keys = {t.name: t.marker.symbol for t in path.data if t.legendgroup == "key"}
    assert keys == {"first evaluation (open)": "circle-open", "last evaluation (filled, larger)": "circle"}
    assert _legend_gap_px(path) >= AXIS_BELOW_PX - 1e-6  # under the x-axis title
    records = _records()
    over = reliability_overlay({"base": records})
    assert [t.mode for t in over.data if t.name == "base"] == ["markers"]
    names = [t.name for t in reliability_figure(records).data]
    assert "over-confident (confidence above accuracy)" in names and "under-confident (accuracy above confidence)" in names
    flat = line_figure({"descent_ratio": ([1, 2, 3], [0.999998, 1.000001, 1.0])}, "descent ratio")
    low, high = flat.layout.yaxis.range
    assert high - low >= 0.019 and low < 0.999998 and high > 1.000001  # the neighbourhood of 1, not its last digits
    moving = line_figure({"ece": ([1, 2], [0.2, 0.1])}, "ECE")
    assert moving.layout.yaxis.range is None


def test_generated_text_leaves_special_tokens_out() -> None:
    """Free generation showed a raw `<|im_end|>` (issue 23): the rows keep it, with its probability; the text does not."""
    from calm_core.results.playground import generated_text

    rows = [{"token": "Au", "special": False}, {"token": ".", "special": False}, {"token": "<|im_end|>", "special": True}]
    assert generated_text(rows) == "Au."
    assert generated_text([{"token": "x"}]) == "x"  # rows from before `special` was recorded
