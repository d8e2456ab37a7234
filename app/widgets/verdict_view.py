"""The verdict and its evidence as the Monitor and Compare pages show them, from one place.

Both are static tables (st.table), whose cells wrap: a data grid cuts "tie on 12 items
between CALM (ECE 0.061) and temperature scaling (ECE 0.083)" off at its column's edge,
and the verdict is the one table a reader must see whole. Cells are Markdown there, so
every cell is escaped (`plain`): a dataset's name is the user's text.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from app.widgets.state import plain
from calm_core.glossary import tooltip
from calm_core.results import advice, verdict
from calm_core.runs.records import RunResults

VERDICT_TERMS = ("best calibrated", "flags", "near-uniform", "under-confident", "accuracy lost", "recommended on S_V")


def whole_cells(rows: list[dict[str, Any]], first_column: str | None = None) -> None:
    """`rows` as a static table whose cells wrap; `first_column` renames the first column
    (with several runs, the evaluation set's column names the run)."""
    frame = pd.DataFrame(rows).map(plain)
    if first_column:
        frame = frame.rename(columns={frame.columns[0]: first_column})
    st.table(frame, hide_index=True)


def column_meanings(columns: dict[str, str]) -> str:
    """A tooltip that says what each column means (static tables have no header tooltips)."""
    return "\n".join(f"- **{name}**: {meaning}" for name, meaning in columns.items())


def verdict_block(results: RunResults, run_label: str | None = None) -> None:
    """The verdict row, one line per evaluation set: the answer before the evidence."""
    table = verdict.verdict_table(results)
    if table:
        whole_cells(table, f"evaluation set ({run_label})" if run_label else None)


def verdict_caption() -> None:
    """What the verdict's columns and flags mean, once under the verdict rows."""
    st.caption(
        verdict.VERDICT_CAPTION,
        help=column_meanings(verdict.VERDICT_HELP) + "\n\n" + tooltip(*VERDICT_TERMS),
    )


def heldout_evidence(results: RunResults) -> None:
    """The recommendation's evidence (S_V, or every labelled item out of fold): each
    variant's NLL and its change against the model as it is, with the paired interval."""
    rows = advice.heldout_rows(results)
    if rows:
        whole_cells(rows)
        # static tables have no header tooltips: the caption's defines every column (the glossary's words)
        st.caption(advice.evidence_caption(results), help=tooltip(*advice.evidence_columns(results), advice.SCORED_ON))
