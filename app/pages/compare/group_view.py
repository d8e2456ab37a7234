"""Compare's section on calibration by subject: the chosen evaluation set's ECE (with its
90% interval), accuracy and count per subject, for each shown variant, and the reliability
diagrams of a few subjects (the largest by default), so that a subject the model is
overconfident on is not hidden by the set's average (results/by_group.py).

Subjects come from the data (the mapped group column: `subject`, or any column the mapping
names); a set with one subject or none shows no section (the metrics table is its table).
Subject names are the data's own text: the table escapes them (whole_cells), the diagrams'
titles too (html.escape: Plotly reads tags in a title).
"""

from __future__ import annotations

import html
from typing import Any

import streamlit as st

from app.widgets.reliability_charts import reliability_overlay
from app.widgets.reliability_view import bins_label, prepare, scored
from app.widgets.state import describe_error, plain
from app.widgets.verdict_view import whole_cells
from calm_core.glossary import tooltip
from calm_core.results import by_group
from calm_core.results.verdict import variant_label
from calm_core.runs.rundir import RunDir

DRAWN = 3  # subjects drawn at first: the largest, one row of diagrams
MOST = 6  # the most a reader may pick at once: two rows, each still readable

Key = tuple[tuple[str, str, str, str, bool, float], ...]  # per variant: name, run, its names, added, file time


@st.cache_data(ttl=600, max_entries=16, show_spinner="Computing ECE per subject...")
def cached_table(key: Key, n_bins: int) -> by_group.SubjectTable:
    """The table of `key`'s variants: kept while their prediction files are unchanged (the
    file times are in the key), since its bootstrap per subject is the page's slowest part."""
    sources = {
        name: (RunDir.open(path), {"variant_raw": variant, "dataset_raw": dataset, "added_after_training": added})
        for name, path, variant, dataset, added, _ in key
    }
    return by_group.subject_table(sources, n_bins)


def table_key(sources: dict[str, Any]) -> Key:
    """What the table depends on: each variant's run, names and its predictions' time."""
    key = []
    for name, (run, row) in sources.items():
        file = by_group.prediction_file(run, row)
        added = bool(row.get("added_after_training"))
        stamp = file.stat().st_mtime if file.is_file() else 0.0
        key.append((name, str(run.path), row["variant_raw"], row["dataset_raw"], added, stamp))
    return tuple(key)


def group_section(
    dataset: str, shown: list[str], owner: dict[tuple[str, str], Any], n_bins: int, diagram_bins: int
) -> None:
    """The per-subject table of `dataset` for the `shown` variants (`owner`: each (set,
    variant)'s run and row, as Compare reads them), under the diagrams' ECE bins, then the
    chosen subjects' diagrams in the page's diagram bins (`diagram_bins`)."""
    sources = {variant: owner[(dataset, variant)] for variant in shown if (dataset, variant) in owner}
    if not sources:
        return
    try:
        table = cached_table(table_key(sources), n_bins)
    except Exception as exc:
        st.error(describe_error(exc))
        return
    if not table.has_subjects:  # one subject or none: the metrics table below is already its table
        return
    with st.container(key="compare_by_subject"):
        st.subheader("Calibration by subject")
        whole_cells(by_group.table_rows(table))
        st.caption(
            f"Each subject's items alone: ECE ({n_bins} equal-width bins) with its 90% bootstrap interval. A subject "
            "of few items has a wide interval, and its ECE is inflated by noise; the subject column is the one "
            "the data mapping names.",
            help=tooltip("ECE", "90% interval"),
        )
        for note in table.notes:
            st.caption(plain(f"Left out: {note}."))
        group_diagrams(table, diagram_bins)


def subject_title(group: str, n: int) -> str:
    """A subject diagram's title: its name as written (escaped for Plotly) and its items."""
    return f"{html.escape(group)}: {n} items"


def group_diagrams(table: by_group.SubjectTable, diagram_bins: int) -> None:
    """The reliability diagrams of the subjects the reader picks (the DRAWN largest at
    first), side by side, every shown variant overlaid, each on its subject's items alone."""
    order = table.largest()
    picked = st.multiselect(
        "Reliability diagrams of the subjects",
        order,
        default=order[:DRAWN],
        max_selections=MOST,
        key="compare_group_diagrams",
        format_func=lambda group: f"{group} ({table.size(group)} items)",
        help="The largest subjects first: a diagram of few items is mostly noise (its whiskers say how much).",
    )
    for start in range(0, len(picked), DRAWN):
        row = picked[start : start + DRAWN]
        for column, group in zip(st.columns(DRAWN), row, strict=False):
            curves = {v: kept for v, kept in ((v, scored(s)) for v, s in table.curves[group].items()) if len(kept[0])}
            records = {v: prepare(s, diagram_bins).to_records() for v, s in curves.items()}
            names = {v: variant_label(v) for v in records}
            figure = reliability_overlay(records, subject_title(group, table.size(group)), names=names)
            column.plotly_chart(figure, key=f"compare_group_diagram_{start + row.index(group)}")
    if picked:
        st.caption(
            f"Bins: {bins_label(diagram_bins)}, on each subject's items alone; the title gives its items, the bars "
            "below how many fall in each bin. Whiskers: 90% Wilson interval of each bin's accuracy.",
            help=tooltip("reliability diagram", "Wilson interval"),
        )
