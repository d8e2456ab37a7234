"""The reliability diagrams of Compare and Learn: which bins, the figures, and the lines
under them (how the bins were chosen, the ECE that noise alone gives at this size).

Functions over (confidence, correct) arrays, so the two pages draw and say the same thing;
the numbers come from calm_core/calibration/metrics/reliability.py, the figures from
app/widgets/reliability_charts.py.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from app.widgets.reliability_charts import reliability_figure, reliability_overlay
from app.widgets.words import explained
from calm_core.calibration import metrics
from calm_core.calibration.metrics.reliability import ECE_BINS, NoiseECE, ReliabilityData
from calm_core.results.verdict import variant_label

AUTO = 0  # the Bins choice "from the item count": equal-mass bins, auto_bins(N) of them
BIN_CHOICES = (AUTO, 10, 15)  # 10: the paper's ECE bins, 15: the project's
RELIABILITY_TERMS = ("reliability diagram", "equal-mass bins", "Wilson interval", "one-item bin", "noise ECE")

Scores = tuple[np.ndarray, np.ndarray]  # (confidence (N,), correct (N,))


def bins_label(choice: int) -> str:
    """The Bins selector's words for a choice."""
    return "equal-mass" if choice == AUTO else f"{choice} equal-width"


def ece_bins(choice: int) -> int:
    """The ECE's bins under a Bins choice: the project's 15 unless 10 or 15 was picked."""
    return ECE_BINS if choice == AUTO else choice


def prepare(scores: Scores, choice: int) -> ReliabilityData:
    """The diagram's bins: equal-mass from the item count, or the ECE's equal-width bins."""
    if choice == AUTO:
        return metrics.prepare_reliability(*scores)
    return metrics.prepare_reliability(*scores, n_bins=choice, strategy="uniform")


def bins_sentence(data: ReliabilityData) -> str:
    """How the diagram's bins were chosen, in words (the caption under it)."""
    if data.strategy == "uniform":
        return f"{data.n_bins} equal-width bins, as the ECE"
    low, high = int(data.count.min()), int(data.count.max())
    each = f"{low}" if low == high else f"{low} to {high}"
    return f"{data.n_bins} equal-mass bins of {each} items, chosen from the {data.n_items} items"


def noise_sentence(noise: NoiseECE, ece: float, name: str = "") -> str:
    """The noise line, and where the observed ECE stands against it."""
    return f"{name + ': ' if name else ''}{noise.sentence(ece)}."


def noise_lines(curves: Mapping[str, Scores], n_bins: int) -> list[str]:
    """One noise line per variant (its confidences differ, so its noise does)."""
    lines = []
    for variant, (c, a) in curves.items():
        name = variant_label(variant) if len(curves) > 1 else ""
        ece = metrics.confidence_ece(c, a, n_bins=n_bins)
        lines.append(noise_sentence(metrics.noise_ece(c, n_bins=n_bins), ece, name))
    return lines


def caption(lines: list[str], bins: str, *terms: str) -> None:
    """The lines under a diagram, with the words they use defined in the tooltip."""
    marks = (
        f"Bins: {bins}. Whiskers: 90% Wilson interval of each bin's accuracy; a hollow mark is a bin of one "
        "item, whose accuracy is that one answer."
    )
    explained("  \n".join([*lines, marks]), *RELIABILITY_TERMS, "90% interval", *terms)


def scored(scores: Scores) -> Scores:
    """The items that have a confidence and a judgement (an open answer without samples has neither)."""
    confidence, correct = scores
    keep = ~(np.isnan(confidence) | np.isnan(correct))  # (N,)
    return confidence[keep], correct[keep]


def compare_diagrams(given: Mapping[str, Scores], dataset: str, choice: int, layout: str) -> list[go.Figure]:
    """Compare's diagrams of the variants on one set, overlaid or side by side, and the
    lines under them. Returns the figures, for the downloads."""
    n_bins = ece_bins(choice)
    curves = {v: kept for v, kept in ((v, scored(s)) for v, s in given.items()) if len(kept[0])}
    if not curves:
        return []
    data = {v: prepare(scores, choice) for v, scores in curves.items()}
    records = {v: d.to_records() for v, d in data.items()}
    if layout == "overlay":
        bins = "equal-mass bins" if choice == AUTO else f"{choice} equal-width bins"
        title = f"{dataset}: reliability ({bins}, 90% Wilson intervals)"
        figures = [reliability_overlay(records, title, names={v: variant_label(v) for v in records})]
        st.plotly_chart(figures[0], key="compare_overlay")
    else:
        figures = []
        for column, (variant, rows) in zip(st.columns(len(records)), records.items(), strict=True):
            ece = metrics.confidence_ece(*curves[variant], n_bins=n_bins)
            title = f"{variant_label(variant)}: ECE {ece:.3f} ({n_bins} bins)"
            figures.append(reliability_figure(rows, title, len(records)))
            column.plotly_chart(figures[-1], key=f"compare_side_{variant}")
    said = "; ".join(dict.fromkeys(bins_sentence(d) for d in data.values()))
    reading = (
        "A calibrated variant's points lie on the diagonal: below it the model is more sure than right "
        "(overconfident), above it less. Bars below: how many items fall in each confidence bin."
    )
    caption([reading, *noise_lines(curves, n_bins)], f"{said}; ECE: {n_bins} equal-width bins", "confidence")
    return figures


def learn_diagram(scores: Scores, title: str, about: str, *terms: str) -> None:
    """Learn's diagram at the slider's temperature (equal-mass bins from the item count),
    the noise line of the ECE the page shows (15 equal-width bins), and `about` (the
    questions and the rule, whose `terms` the tooltip defines)."""
    data = prepare(scores, AUTO)
    st.plotly_chart(reliability_figure(data.to_records(), title), key="learn_reliability")
    ece = metrics.confidence_ece(*scores, n_bins=ECE_BINS)
    line = noise_sentence(metrics.noise_ece(scores[0], n_bins=ECE_BINS), ece)
    bins = f"{bins_sentence(data)} (the ECE above uses {ECE_BINS} equal-width bins)"
    caption([line, about], bins, *terms)
