"""Pure chart builders: data in, plotly figure out. No Streamlit here, so tests can
check every figure without a browser (relplot's habit: compute apart from drawing)."""

from __future__ import annotations

import html
import math
import textwrap
from collections import Counter
from typing import Any, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

OVER_COLOR = "rgba(214, 69, 65, 0.55)"  # confidence above accuracy
UNDER_COLOR = "rgba(52, 120, 198, 0.45)"  # accuracy above confidence
BAR_COLOR = "rgba(40, 40, 60, 0.85)"
Values = Sequence[float] | np.ndarray  # a curve's x or y, or a variant's probabilities


# Every figure's frame, in pixels (Plotly positions legends in fractions of the plot area,
# so a fixed fraction lands on the axis title of one figure and far below another's).
TITLE_CHARS = {1: 80, 2: 40, 3: 25}  # a title line's characters, by the charts sharing a row at 1280 px
MODEBAR_PX = 36  # Plotly's mode bar across the figure's top right (on hover): titles start below it
TITLE_LINE_PX = 22
ANNOTATION_PX = 20  # a label above the plot area (the selected step's)
AXIS_BELOW_PX = 64  # tick labels and an x-axis title under the plot area
TICKS_BELOW_PX = 30  # tick labels alone
LEGEND_ROW_PX = 30  # a row of large markers (the trade-off's stars) is this tall
LEGEND_CHARS = {1: 95, 2: 46, 3: 30}  # a horizontal legend row's characters, entries' symbols counted in


def title_lines(title: str, columns: int = 1) -> list[str]:
    """The title wrapped at word boundaries to fit a chart that shares its row with
    `columns - 1` others: Plotly never wraps a title, it cuts it at the figure's edge."""
    return textwrap.wrap(title, TITLE_CHARS.get(columns, TITLE_CHARS[3]), break_on_hyphens=False) if title else []


def legend_rows(names: Sequence[str], columns: int = 1) -> int:
    """How many rows a horizontal legend of `names` takes (about: each entry is its text
    and a symbol), so the bottom margin can hold it."""
    shown = [n for n in names if n]
    if not shown:
        return 0
    chars = sum(len(n) + 6 for n in shown)
    return max(1, math.ceil(chars / LEGEND_CHARS.get(columns, LEGEND_CHARS[3])))


def frame(
    fig: go.Figure, title: str, height: int, columns: int = 1, x_title: bool = True, legend: bool = True
) -> go.Figure:
    """Title, margins and legend in pixels: the title wrapped and below the mode bar, the
    legend under the x-axis title (never on it), the height grown by what they take."""
    lines = title_lines(title, columns)
    labels = ANNOTATION_PX if fig.layout.annotations else 0  # e.g. "selected" over its line, above the plot
    top = MODEBAR_PX + TITLE_LINE_PX * len(lines) + (14 if lines else 0) + labels
    below = AXIS_BELOW_PX if x_title else TICKS_BELOW_PX
    names = [t.name for t in fig.data if t.showlegend is not False and t.name] if legend else []
    shown = len(names) > 1 or any(t.showlegend for t in fig.data)  # Plotly's rule: one trace alone has none
    rows = legend_rows(names, columns) if legend and shown else 0
    bottom = below + LEGEND_ROW_PX * rows + (6 if rows else 0)
    total = height + top + bottom  # `height` is the plot area's: titles and legends add to it
    fig.update_layout(
        height=total,
        title=dict(
            text="<br>".join(lines),
            x=0,
            xref="container",
            xanchor="left",
            # Plotly anchors a wrapped title by its first line ("top" lifts the others into the
            # mode bar): the first line's bottom goes under the mode bar, the others below it.
            y=1 - (MODEBAR_PX + TITLE_LINE_PX) / total,
            yref="container",
            yanchor="bottom",
            pad=dict(l=8),
        ),
        margin=dict(l=48, r=12, t=top, b=bottom),
        showlegend=bool(rows),
    )
    if rows:
        # From the figure's bottom edge up: rows a Plotly "top" anchor would lift into the axis title stay below it.
        fig.update_layout(
            legend=dict(orientation="h", x=0, xanchor="left", yref="container", yanchor="bottom", y=4 / total)
        )
    return fig


def accuracy_confidence_figure(accuracy: float, confidence: float, title: str = "") -> go.Figure:
    """Two bars side by side: what the model gets right vs how sure it says it is."""
    fig = go.Figure(
        go.Bar(
            x=["accuracy", "mean confidence"],
            y=[accuracy, confidence],
            marker_color=[BAR_COLOR, OVER_COLOR if confidence > accuracy else UNDER_COLOR],
            text=[f"{accuracy:.0%}", f"{confidence:.0%}"],
            textposition="outside",
        )
    )
    frame(fig, title, 230, columns=2, x_title=False, legend=False)
    fig.update_layout(yaxis_range=[0, 1.1])
    return fig


VARIANT_COLORS = {"base": "rgb(120, 120, 140)", "ts": "rgb(52, 120, 198)"}  # the method gets the accent
ACCENT = "rgb(214, 69, 65)"
PALETTE = ["rgb(214, 69, 65)", "rgb(46, 160, 90)", "rgb(150, 90, 200)", "rgb(230, 150, 40)", "rgb(30, 170, 180)"]


def variant_colors(names: Sequence[str]) -> dict[str, str]:
    """base grey and ts blue everywhere; the trained variants take the palette in order
    (the first, usually the method itself, the accent red)."""
    others = [n for n in names if n not in VARIANT_COLORS]
    return {n: VARIANT_COLORS.get(n) or PALETTE[others.index(n) % len(PALETTE)] for n in names}


SELECTED_LABEL = "selected"  # the calibrated stop's step (training/selection.py) on every curve
SELECTED_SYMBOL = "star-open"  # hollow: a step that kept the base model sits on base's marker, which must show


def line_figure(
    curves: Mapping[str, tuple[Values, Values]],
    title: str,
    y_title: str = "",
    log_y: bool = False,
    x_title: str = "step",
    selected_step: int | None = None,
    threshold: tuple[float, str] | None = None,
    columns: int = 1,
) -> go.Figure:
    """One line per named (x, y) curve, e.g. ECE per evaluation set over training steps;
    `columns`: how many charts share its row (its title and legend wrap to fit).
    `selected_step`: a vertical dashed line labelled "selected" at the step the run's
    model is from; `threshold` (value, label): a dotted horizontal line across the curves
    (a trace, so the legend names it), e.g. the lower level's tolerance."""
    fig = go.Figure()
    for i, (name, (x, y)) in enumerate(curves.items()):
        fig.add_scatter(
            x=list(x),
            y=list(y),
            mode="lines+markers" if len(x) < 30 else "lines",
            name=name,
            line=dict(color=PALETTE[i % len(PALETTE)] if len(curves) > 1 else ACCENT),
        )
    xs = [float(v) for x, _ in curves.values() for v in x]
    if threshold is not None and xs:
        value, label = threshold
        fig.add_scatter(
            x=[min(xs), max(xs)],
            y=[float(value), float(value)],
            mode="lines",
            name=label,
            line=dict(color="gray", dash="dot"),
            hovertemplate=f"{label}: %{{y:.4f}}<extra></extra>",
        )
    if selected_step is not None:
        fig.add_vline(
            x=selected_step,
            line_dash="dash",
            line_color="gray",
            annotation_text=SELECTED_LABEL,
            annotation_position="top",
        )
    frame(fig, title, 200, columns, x_title=bool(x_title))
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title, type="log" if log_y else "linear")
    ys = [float(v) for _, y in curves.values() for v in y if np.isfinite(v)]
    if ys and not log_y and max(ys) - min(ys) <= FLAT_SPAN * max(1.0, abs(max(ys))):
        # A flat curve (0.999998 .. 1.000001) would get ticks of its float noise: show the value's neighbourhood.
        middle = (max(ys) + min(ys)) / 2
        pad = max(FLAT_SPAN * 100 * max(1.0, abs(middle)), 1e-3)
        fig.update_yaxes(range=[middle - pad, middle + pad], tickformat=".3~g")
    return fig


FLAT_SPAN = 1e-4  # a curve whose span is under this (relative) is drawn as flat


def alpha_heatmap(
    steps: Sequence[int], matrix: Any, labels: Sequence[str], title: str = "tau over training"
) -> go.Figure:
    """Step x component heatmap of an alpha vector (rows: steps, columns: options)."""
    fig = go.Figure(
        go.Heatmap(
            z=[list(map(float, row)) for row in matrix],
            x=list(labels),
            y=list(steps),
            colorscale="RdBu_r",
            zmid=1.0 if "tau" in title else 0.0,
            hovertemplate="%{x}, step %{y}: %{z:.3f}<extra></extra>",
        )
    )
    frame(fig, title, 250, x_title=False, legend=False)
    fig.update_yaxes(title_text="step", autorange="reversed")
    return fig


def alpha_bars(values: Sequence[float], labels: Sequence[str], step: int, name: str = "tau") -> go.Figure:
    """alpha at one step (the heatmap's row under the step slider)."""
    fig = go.Figure(go.Bar(x=list(labels), y=[float(v) for v in values], marker_color=ACCENT))
    fig.add_hline(y=1.0 if name == "tau" else 0.0, line_dash="dash", line_color="gray")
    return frame(fig, f"{name} at step {step}", 210, columns=2, x_title=False, legend=False)


# Each reference variant's marker on the trade-off chart and its word in the caption. Hollow and
# distinct: two variants at one point (vector scaling that barely moves base) both stay visible,
# where filled markers of one size let the last drawn hide the other.
REFERENCE_SYMBOLS = {
    "base": ("x-thin-open", "x"),
    "ts": ("diamond-open", "diamond"),
    "vs": ("square-open", "square"),
    "ats": ("triangle-up-open", "triangle"),
    "thermometer": ("hexagon-open", "hexagon"),
}
OTHER_REFERENCE = ("pentagon-open", "pentagon")


def reference_key(names: Mapping[str, str]) -> str:
    """The caption's key to the reference markers: "x: the model as it is, diamond: ..."
    for the variants in `names` (variant -> the name a person reads), in the chart's words."""
    return ", ".join(f"{REFERENCE_SYMBOLS.get(v, OTHER_REFERENCE)[1]}: {shown}" for v, shown in names.items())


def tradeoff_figure(
    paths: Mapping[str, tuple[Sequence[int], Sequence[float], Sequence[float]]],
    references: dict[str, dict[str, tuple[float, float]]] | None = None,
    selected_step: int | None = None,
    names: Mapping[str, str] | None = None,
) -> go.Figure:
    """ECE (x) against accuracy (y) as a path over training, one per evaluation set;
    the first point is hollow, the last filled: left is better calibrated, up is more
    accurate. `references` ({set: {"base" | "ts" | ...: (ece, acc)}}) adds the untouched
    model and each post-hoc calibrator as a hollow marker of its own (REFERENCE_SYMBOLS) in
    the set's colour: a run that ends left of TS but below base has traded accuracy for its ECE.
    `selected_step` adds a star on each path at that step (where the run's model is from),
    when the path has it. Two
    data-less legend entries say what the open and the filled markers are. `names` gives
    a variant's name in full for the legend ("temperature scaling")."""
    fig = go.Figure()
    for i, (name, (steps, acc, ece)) in enumerate(paths.items()):
        color = PALETTE[i % len(PALETTE)]
        fig.add_scatter(
            x=list(ece),
            y=list(acc),
            mode="lines+markers",
            name=name,
            line=dict(color=color),
            marker=dict(
                size=[9 if j == len(steps) - 1 else 6 for j in range(len(steps))],
                symbol=["circle-open" if j == 0 else "circle" for j in range(len(steps))],
            ),
            text=[f"step {s}" for s in steps],
            hovertemplate="%{text}<br>ECE %{x:.3f}<br>acc %{y:.3f}<extra></extra>",
        )
        if selected_step is not None and selected_step in list(steps):
            j = list(steps).index(selected_step)
            fig.add_scatter(
                x=[ece[j]],
                y=[acc[j]],
                mode="markers",
                name=f"{SELECTED_LABEL} (step {selected_step}) · {name}",
                marker=dict(color=color, size=18, symbol=SELECTED_SYMBOL, line=dict(color=color, width=2.5)),
                hovertemplate=f"selected: step {selected_step}<br>ECE %{{x:.3f}}<br>acc %{{y:.3f}}<extra></extra>",
            )
        for variant, (ref_ece, ref_acc) in (references or {}).get(name, {}).items():
            shown = (names or {}).get(variant, variant)
            fig.add_scatter(
                x=[ref_ece],
                y=[ref_acc],
                mode="markers",
                name=f"{shown} · {name}",
                showlegend=True,
                marker=dict(
                    color=color,
                    # base's x is larger: its arms reach past the star of a run that kept base (step 0)
                    size=20 if variant == "base" else 12,
                    symbol=REFERENCE_SYMBOLS.get(variant, OTHER_REFERENCE)[0],
                    line=dict(color=color, width=2),
                ),
                hovertemplate=f"{html.escape(shown)}<br>ECE %{{x:.3f}}<br>acc %{{y:.3f}}<extra></extra>",
            )
    for label, symbol in (("first evaluation (open)", "circle-open"), ("last evaluation (filled, larger)", "circle")):
        fig.add_scatter(
            x=[None],
            y=[None],
            mode="markers",
            name=label,
            legendgroup="key",  # a legend key, no data
            marker=dict(color="gray", size=9, symbol=symbol),
        )
    frame(fig, "Trade-off over training", 360)  # the legend below the x-axis title, not on it
    fig.update_xaxes(title_text="ECE (lower is better)")
    fig.update_yaxes(title_text="accuracy")
    return fig


def option_probability_figure(
    options: Sequence[str], probs: Mapping[str, Values], names: Mapping[str, str] | None = None
) -> go.Figure:
    """Grouped bars: each option's probability under each variant (Playground); `names`
    gives a variant's name in full for the legend."""
    fig = go.Figure()
    colors = variant_colors(list(probs))
    labels = [html.escape(o) for o in options]  # plotly renders a subset of HTML in labels: user text is escaped
    for key, p in probs.items():
        fig.add_bar(
            x=labels,
            y=[float(v) for v in p],
            name=(names or {}).get(key, key),
            marker_color=colors[key],
            text=[f"{float(v):.0%}" for v in p],
            textposition="outside",
        )
    frame(fig, "", 280, x_title=False)
    fig.update_layout(barmode="group", yaxis_range=[0, 1.1])
    return fig


def histogram_counts(values: Sequence[float], n_bins: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """(counts, edges) of confidences over [0, 1] in `n_bins` equal-width bins; the last
    bin includes 1.0 and NaNs are left out (an item without samples has no Sem1)."""
    x = np.asarray(values, dtype=np.float64)
    x = np.clip(x[~np.isnan(x)], 0.0, 1.0)
    return np.histogram(x, bins=n_bins, range=(0.0, 1.0))


def confidence_histogram(
    curves: Mapping[str, Sequence[float]],
    title: str = "Confidence",
    n_bins: int = 10,
    names: Mapping[str, str] | None = None,
) -> go.Figure:
    """Grouped bars: how many items each variant gives each confidence (open QA: Sem1,
    the modal answer's share of the samples, so it takes the values k / n); `names` gives
    a variant's name in full for the legend."""
    fig = go.Figure()
    colors = variant_colors(list(curves))
    for key, values in curves.items():
        counts, edges = histogram_counts(values, n_bins)
        label = html.escape((names or {}).get(key, key))
        fig.add_bar(
            x=((edges[:-1] + edges[1:]) / 2).tolist(),
            y=counts.tolist(),
            name=label,
            marker_color=colors[key],
            customdata=[[f"{lo:.2f}-{hi:.2f}"] for lo, hi in zip(edges[:-1], edges[1:], strict=True)],
            hovertemplate=label + ": %{y} items at confidence %{customdata[0]}<extra></extra>",
        )
    frame(fig, html.escape(title), 240)
    fig.update_layout(barmode="group")
    fig.update_xaxes(range=[0, 1], title_text="confidence")
    fig.update_yaxes(title_text="items")
    return fig


EMPTY_ANSWER = "(empty)"


def answer_groups(samples: Sequence[str], clusters: Sequence[int]) -> list[tuple[str, int]]:
    """(the cluster's first member, how many samples it holds) per cluster, largest first,
    ties in order of first appearance (so the first group is the Sem1 modal answer)."""
    if len(samples) != len(clusters):
        raise ValueError(f"Expected one cluster label per sample, but got {len(clusters)} for {len(samples)} samples")
    counts = Counter(int(c) for c in clusters)
    first: dict[int, str] = {}
    for text, label in zip(samples, clusters, strict=True):
        first.setdefault(int(label), str(text))
    order = sorted(first, key=lambda c: (-counts[c], list(first).index(c)))
    return [(first[c], counts[c]) for c in order]


def cluster_summary(samples: Sequence[str], clusters: Sequence[int]) -> str:
    """Sampled answers grouped by meaning as one line: "Paris ×3 | paris, france ×1 |
    London ×1" (plain text for a table cell or st.text, never Markdown)."""
    return " | ".join(f"{text.strip() or EMPTY_ANSWER} ×{count}" for text, count in answer_groups(samples, clusters))


def open_answers_table(frame: Any) -> Any:
    """The sampled-answers table of one variant on one open-QA set (a results.predictions.open_answers
    frame): question id, greedy answer, samples grouped by cluster, Sem1 confidence,
    whether the modal answer is right."""
    import pandas as pd

    def as_float(value: Any) -> float | None:
        return None if value is None or np.isnan(value) else float(value)

    rows = []
    for row in frame.itertuples(index=False):
        samples, clusters = list(row.samples), [int(c) for c in row.clusters]
        rows.append(
            {
                "id": row.id,
                "greedy": row.greedy,
                "samples by cluster": cluster_summary(samples, clusters) if samples else "",
                "Sem1 confidence": as_float(row.sem_conf),
                "correct": None if as_float(row.sem_correct) is None else bool(row.sem_correct),
            }
        )
    return pd.DataFrame(rows, columns=["id", "greedy", "samples by cluster", "Sem1 confidence", "correct"])


def figure_png(fig: go.Figure, scale: float = 2.0) -> tuple[bytes | None, str]:
    """(PNG bytes, "") through kaleido and a local Chrome/Chromium, or (None, why not):
    the page then offers HTML only instead of failing."""
    try:
        return fig.to_image(format="png", scale=scale), ""
    except Exception as exc:  # kaleido missing, or no Chrome for it to drive
        return None, f"PNG export unavailable ({type(exc).__name__}: {str(exc)[:120]}); the HTML download works."
