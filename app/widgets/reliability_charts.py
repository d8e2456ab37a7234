"""Reliability diagrams as plotly figures: data in (`ReliabilityData.to_records()` rows,
calm_core/calibration/metrics/reliability.py), figure out. No Streamlit here, so tests read
every mark without a browser; calm_core/results/report_svg.py draws the same marks as SVG.

Small samples are drawn honestly: each bin's accuracy carries its Wilson interval as a
whisker, and a bin holding one item is hollow, since its accuracy is that one answer.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.widgets.charts import BAR_COLOR, OVER_COLOR, UNDER_COLOR, frame, variant_colors

HOLLOW = "one-item bin (hollow)"  # the legend's word for a bin whose accuracy is one answer, 0 or 1
INTERVAL = "90% Wilson interval"  # the whiskers' legend entry (glossary: "Wilson interval")
WHISKER_COLOR = "rgb(230, 150, 40)"  # amber: seen on the dark accuracy bars, the red and blue gaps and the page
CLEAR = "rgba(0, 0, 0, 0)"
MIN_BIN_WIDTH = 0.012  # an equal-mass bin of tied confidences has no width: drawn this wide
STEM_WIDTH = 0.008  # the overlay's item counts: a thin bar per bin at its mean confidence


def _centers(records: Sequence[dict[str, Any]]) -> list[float]:
    return [(r["lower"] + r["upper"]) / 2 for r in records]


def _widths(records: Sequence[dict[str, Any]]) -> list[float]:
    """Each bin's bar width: its edges (equal-mass bins differ), a sliver where they meet."""
    return [max(r["upper"] - r["lower"], MIN_BIN_WIDTH) * 0.95 for r in records]


def _whiskers(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Plotly error bars from each bin's interval (acc_low, acc_high) around its accuracy."""
    return dict(
        type="data",
        symmetric=False,
        array=[r["acc_high"] - r["accuracy"] for r in records],
        arrayminus=[r["accuracy"] - r["acc_low"] for r in records],
        thickness=1.6,
        color=WHISKER_COLOR,
    )


def _accuracy_bars(fig: go.Figure, records: Sequence[dict[str, Any]], hollow: bool) -> None:
    """The accuracy bars: filled, or (one-item bins) an outline."""
    if not records:
        return
    fig.add_bar(
        x=_centers(records),
        y=[r["accuracy"] for r in records],
        width=_widths(records),
        marker=dict(color=CLEAR if hollow else BAR_COLOR, line=dict(color=BAR_COLOR, width=1.5 if hollow else 0)),
        name=HOLLOW if hollow else "accuracy",
        row=1,
        col=1,
        customdata=[[r["count"], r["mean_confidence"], r["acc_low"], r["acc_high"]] for r in records],
        hovertemplate="accuracy %{y:.3f} (interval %{customdata[2]:.2f} to %{customdata[3]:.2f})<br>"
        "mean confidence %{customdata[1]:.3f}<br>%{customdata[0]} items<extra></extra>",
    )


def reliability_figure(
    records: Sequence[dict[str, Any]], title: str = "Reliability diagram", columns: int = 1
) -> go.Figure:
    """Accuracy per confidence bin (bars with their interval), the gap to the diagonal, and
    the items per bin; `columns`: how many charts share its row (its title wraps to fit).

    `records` are `ReliabilityData.to_records()` rows (calibration/metrics/reliability.py):
    each bar spans its bin's edges. Whiskers (a trace of their own, drawn last): the Wilson
    interval of the bin's accuracy. A
    one-item bin is drawn hollow (an outline): its accuracy is one answer, 0 or 1. Empty
    bins (equal-width bins only) get no bar and an 'x' on the axis, so a reader can tell
    "no items here" from "accuracy 0". Red/blue segments reach up or down from the
    accuracy to the bin's mean confidence.
    """
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.75, 0.25], vertical_spacing=0.04)
    filled = [r for r in records if r["count"] > 0]
    empty = [r for r in records if r["count"] == 0]
    _accuracy_bars(fig, [r for r in filled if not r["hollow"]], hollow=False)
    _accuracy_bars(fig, [r for r in filled if r["hollow"]], hollow=True)
    for label, color, side in (
        ("over-confident (confidence above accuracy)", OVER_COLOR, True),
        ("under-confident (accuracy above confidence)", UNDER_COLOR, False),
    ):
        part = [r for r in filled if (r["gap"] > 0) == side]  # one trace each, so the legend names both colours
        fig.add_bar(
            x=_centers(part),
            y=[r["gap"] for r in part],
            base=[r["accuracy"] for r in part],
            width=_widths(part),
            name=label,
            row=1,
            col=1,
            marker=dict(
                color=[CLEAR if r["hollow"] else color for r in part],  # a one-item bin's gap: an outline too
                line=dict(color=color, width=[1.5 if r["hollow"] else 0 for r in part]),
            ),
            hoverinfo="skip",
        )
    if filled:  # drawn over the bars and gaps, so no whisker hides behind them
        fig.add_scatter(
            x=_centers(filled),
            y=[r["accuracy"] for r in filled],
            mode="markers",
            marker=dict(color=WHISKER_COLOR, size=5),
            error_y=_whiskers(filled),
            name=INTERVAL,
            hoverinfo="skip",
            row=1,
            col=1,
        )
    fig.add_scatter(
        x=[0, 1], y=[0, 1], mode="lines", line=dict(dash="dash", color="gray"), name="perfect calibration", row=1, col=1
    )
    if empty:
        fig.add_scatter(
            x=_centers(empty),
            y=[0.0] * len(empty),
            mode="markers",
            marker_symbol="x",
            marker_color="gray",
            name="empty bin",
            row=1,
            col=1,
        )
    fig.add_bar(
        x=_centers(records),
        y=[r["count"] for r in records],
        width=_widths(records),
        marker_color="rgba(120,120,140,0.7)",
        name="items",
        row=2,
        col=1,
        showlegend=False,
    )
    return _reliability_layout(fig, title, barmode="overlay", height=340, y_max=1.0, columns=columns)


def _reliability_layout(
    fig: go.Figure, title: str, barmode: str, height: int, y_max: float, columns: int = 1
) -> go.Figure:
    """The two-panel frame shared by the reliability figures: accuracy over confidence
    above, item counts below, legend underneath."""
    frame(fig, title, height, columns)
    fig.update_layout(barmode=barmode)
    fig.update_yaxes(range=[0, y_max], title_text="accuracy", row=1, col=1)
    fig.update_yaxes(title_text="items", row=2, col=1)
    fig.update_xaxes(range=[0, 1], title_text="confidence", row=2, col=1)
    return fig


def reliability_overlay(
    variants: Mapping[str, Sequence[dict[str, Any]]],
    title: str = "Reliability diagram",
    names: Mapping[str, str] | None = None,
) -> go.Figure:
    """Several variants on one diagram: per-bin accuracy (markers at the bin's mean
    confidence, the Wilson interval as error bars, hollow for a one-item bin; no line,
    which would jump across empty bins) against the diagonal, and below, each variant's
    items per bin as a thin stem at the bin's mean confidence. `variants` maps a name to
    its `ReliabilityData.to_records()` rows; `names` gives a name in full for the legend
    ("temperature scaling"), the colours stay keyed by the variant."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.72, 0.28], vertical_spacing=0.05)
    fig.add_scatter(
        x=[0, 1], y=[0, 1], mode="lines", line=dict(dash="dash", color="gray"), name="perfect calibration", row=1, col=1
    )
    colors = variant_colors(list(variants))
    for key, records in variants.items():
        color, name = colors[key], (names or {}).get(key, key)
        kept = [r for r in records if r["count"] > 0]
        # Markers only: a line would jump across empty bins and tangle with 8 items a set.
        fig.add_scatter(
            x=[r["mean_confidence"] for r in kept],
            y=[r["accuracy"] for r in kept],
            mode="markers",
            name=name,
            marker=dict(
                color=color,
                size=9,
                symbol=["circle-open" if r["hollow"] else "circle" for r in kept],
                line=dict(color=color, width=2),  # an open circle's ring, in the variant's colour
            ),
            legendgroup=name,
            error_y=_whiskers(kept) | dict(color=color, thickness=1),
            customdata=[r["count"] for r in kept],
            hovertemplate=name + ": accuracy %{y:.3f} at confidence %{x:.3f}, %{customdata} items<extra></extra>",
            row=1,
            col=1,
        )
        fig.add_bar(  # a stem per bin at its mean confidence: variants' bins differ, wide bars would pile up
            x=[r["mean_confidence"] for r in kept],
            y=[r["count"] for r in kept],
            width=STEM_WIDTH,
            name=f"{name} items",
            legendgroup=name,
            marker_color=color,
            opacity=0.8,
            showlegend=False,
            customdata=[[r["lower"], r["upper"]] for r in kept],
            hovertemplate=name + ": %{y} items in %{customdata[0]:.2f} to %{customdata[1]:.2f}<extra></extra>",
            row=2,
            col=1,
        )
    if any(r["hollow"] for records in variants.values() for r in records):  # a legend key, no data
        fig.add_scatter(
            x=[None], y=[None], mode="markers", name=HOLLOW, marker=dict(color="gray", size=9, symbol="circle-open")
        )
    return _reliability_layout(fig, title, barmode="overlay", height=380, y_max=1.02)
