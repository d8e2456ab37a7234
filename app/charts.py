"""Pure chart builders: data in, plotly figure out. No Streamlit here, so tests can
check every figure without a browser (relplot's habit: compute apart from drawing)."""

from __future__ import annotations

from typing import Any, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

OVER_COLOR = "rgba(214, 69, 65, 0.55)"  # confidence above accuracy
UNDER_COLOR = "rgba(52, 120, 198, 0.45)"  # accuracy above confidence
BAR_COLOR = "rgba(40, 40, 60, 0.85)"


def _centers(records: Sequence[dict[str, Any]]) -> list[float]:
    return [(r["lower"] + r["upper"]) / 2 for r in records]


def reliability_figure(records: Sequence[dict[str, Any]], title: str = "Reliability diagram") -> go.Figure:
    """Accuracy per confidence bin (bars), the gap to the diagonal, and a histogram.

    `records` are `BinTable.to_records()` rows. Empty bins get no bar and an 'x' on the
    axis, so a reader can tell "no items here" from "accuracy 0". Top panel: accuracy
    bars and red/blue gap segments up or down to the bin's mean confidence; bottom
    panel: how many items fell into each bin.
    """
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.75, 0.25], vertical_spacing=0.04)
    width = records[0]["upper"] - records[0]["lower"] if records else 0.1
    filled = [r for r in records if r["count"] > 0]
    empty = [r for r in records if r["count"] == 0]
    fig.add_bar(x=_centers(filled), y=[r["accuracy"] for r in filled], width=width * 0.95, marker_color=BAR_COLOR,
                name="accuracy", row=1, col=1,
                customdata=[[r["count"], r["mean_confidence"]] for r in filled],
                hovertemplate="accuracy %{y:.3f}<br>mean confidence %{customdata[1]:.3f}<br>%{customdata[0]} items<extra></extra>")
    fig.add_bar(x=_centers(filled), y=[r["gap"] for r in filled], base=[r["accuracy"] for r in filled],
                width=width * 0.95, name="gap to confidence", row=1, col=1,
                marker_color=[OVER_COLOR if r["gap"] > 0 else UNDER_COLOR for r in filled], hoverinfo="skip")
    fig.add_scatter(x=[0, 1], y=[0, 1], mode="lines", line=dict(dash="dash", color="gray"),
                    name="perfect calibration", row=1, col=1)
    if empty:
        fig.add_scatter(x=_centers(empty), y=[0.0] * len(empty), mode="markers", marker_symbol="x",
                        marker_color="gray", name="empty bin", row=1, col=1)
    fig.add_bar(x=_centers(records), y=[r["count"] for r in records], width=width * 0.95,
                marker_color="rgba(120,120,140,0.7)", name="items", row=2, col=1, showlegend=False)
    fig.update_layout(title=title, barmode="overlay", height=460, margin=dict(l=40, r=10, t=50, b=40),
                      legend=dict(orientation="h", y=-0.15))
    fig.update_yaxes(range=[0, 1], title_text="accuracy", row=1, col=1)
    fig.update_yaxes(title_text="items", row=2, col=1)
    fig.update_xaxes(range=[0, 1], title_text="confidence", row=2, col=1)
    return fig


def accuracy_confidence_figure(accuracy: float, confidence: float, title: str = "") -> go.Figure:
    """Two bars side by side: what the model gets right vs how sure it says it is."""
    fig = go.Figure(go.Bar(x=["accuracy", "mean confidence"], y=[accuracy, confidence],
                           marker_color=[BAR_COLOR, OVER_COLOR if confidence > accuracy else UNDER_COLOR],
                           text=[f"{accuracy:.0%}", f"{confidence:.0%}"], textposition="outside"))
    fig.update_layout(title=title, yaxis_range=[0, 1.1], height=300, margin=dict(l=40, r=10, t=40, b=30))
    return fig
