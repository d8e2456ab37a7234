"""Data: the catalog, and uploading a domain dataset with a column mapping.

An upload is read from a temporary copy (never unpickled: JSONL, CSV and Parquet only),
validated row by row, previewed, and saved under the workspace as `upload/<name>`,
where it survives a restart and appears in every dataset picker.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from calm_core.data.catalog import delete_upload, list_datasets, save_upload
from calm_core.data.loaders import ColumnMapping, guess_mapping, load_file, peek_columns, stage_upload
from calm_core.paths import safe_name

ACCEPTED = ["jsonl", "csv", "parquet"]
PREVIEW_ROWS = 8


def _problem(exc: Exception) -> str:
    """What went wrong, in the loader's own words: DataError messages name the file, row
    and field already; a Python class name or a temporary path would only confuse."""
    return str(exc).strip() or "The file could not be read."


def _default_name(filename: str) -> str:
    """A "Save as" suggestion that save_upload accepts: `日本.csv` has no usable letters."""
    try:
        return safe_name(Path(filename).stem)
    except ValueError:
        return "upload"


st.title("Data")
st.markdown("Every dataset the studio can train or evaluate on: built-in demo sets generated from fact tables, "
            "the real benchmarks in `CALM_DATA_DIR`, and your uploads.")

entries = list_datasets()
catalog = pd.DataFrame([{"name": e.name, "kind": e.kind, "source": e.source, "items": e.n_items,
                         "description": e.description} for e in entries])
sources = st.multiselect("Show", ["builtin", "shared", "upload"], default=["builtin", "shared", "upload"], key="data_sources")
st.dataframe(catalog[catalog["source"].isin(sources)] if len(catalog) else catalog, hide_index=True, width="stretch")

st.subheader("Upload a dataset")
st.caption("Multiple choice: a question, its options (one list column, or one column per option) and the answer "
           "(index, letter or the answer's text). Open answer: a question and a list of accepted answers.")
upload = st.file_uploader("CSV, JSONL or Parquet", type=ACCEPTED, key="data_upload")
if upload is not None:
    with tempfile.TemporaryDirectory() as tmp:
        # The format comes from the original name (or the bytes), never from a cleaned name.
        path = stage_upload(upload.name, upload.getvalue(), Path(tmp))
        try:
            columns = peek_columns(path, source=upload.name)
        except Exception as exc:
            st.error(_problem(exc))
            st.stop()
        st.write("Columns found:", ", ".join(f"`{c}`" for c in columns) or "none")
        with st.form("data_mapping"):
            kind = st.radio("Kind", ["auto", "mc", "open"], horizontal=True, key="data_kind")
            mapping_text = st.text_input("Column mapping", value=guess_mapping(columns),
                                         key="data_mapping_text",
                                         help="key=column pairs; choices=A|B|C|D for one column per option; "
                                              "answers=aliases for open-answer sets")
            name = st.text_input("Save as", value=_default_name(upload.name), key="data_name")
            check = st.form_submit_button("Validate")
        try:
            report = load_file(path, kind=kind, mapping=ColumnMapping.parse(mapping_text), name=upload.name,
                               source=upload.name)
        except Exception as exc:
            st.error(_problem(exc))
            st.stop()
        kept, rejected = len(report.items), report.n_rejected
        c1, c2, c3 = st.columns(3)
        c1.metric("Rows", report.n_rows)
        c2.metric("Kept", kept)
        c3.metric("Rejected", rejected)
        if report.items:
            st.dataframe(pd.DataFrame([vars(it) for it in report.items[:PREVIEW_ROWS]]), hide_index=True, width="stretch")
        if rejected:
            with st.expander(f"Why {rejected} row{'s were' if rejected != 1 else ' was'} rejected"):
                st.dataframe(pd.DataFrame({"row": [str(e) for e in report.rejected[:200]]}), hide_index=True)
        overwrite = st.checkbox("Replace an upload with the same name", key="data_overwrite")
        if st.button("Save to the workspace", type="primary", disabled=not report.items, key="data_save"):
            try:
                entry = save_upload(name, report, upload.name, mapping_text, overwrite=overwrite)
            except Exception as exc:
                st.error(_problem(exc))
            else:
                st.success(f"Saved as `{entry.name}` ({entry.n_items} items). It is now in every dataset picker.")

uploads = [e.name for e in entries if e.source == "upload"]
if uploads:
    with st.expander("Delete an upload"):
        victim = st.selectbox("Upload", uploads, key="data_delete_name")
        if st.button("Delete", key="data_delete"):
            delete_upload(victim.split("/", 1)[1])
            st.rerun()
