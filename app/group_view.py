"""Compare's section on calibration by subject: the chosen evaluation set's ECE (with its
90% interval), accuracy and count per subject, for each shown variant, so that a subject
the model is overconfident on is not hidden by the set's average (results/by_group.py).

Subjects come from the data (the mapped subject column); a set with one subject or none
shows no section (the metrics table is its table). Subject names are the data's own text:
the table escapes them (whole_cells).
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app.state import describe_error, plain
from app.verdict_view import whole_cells
from calm_core.glossary import tooltip
from calm_core.results import by_group


def group_section(dataset: str, shown: list[str], owner: dict[tuple[str, str], Any], n_bins: int) -> None:
    """The per-subject table of `dataset` for the `shown` variants (`owner`: each (set,
    variant)'s run and row, as Compare reads them), under the diagrams' ECE bins."""
    sources = {variant: owner[(dataset, variant)] for variant in shown if (dataset, variant) in owner}
    if not sources:
        return
    try:
        table = by_group.subject_table(sources, n_bins)
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
