"""Data: the catalog, uploading a dataset by choosing its columns, and splitting one.

An upload is read from a temporary copy (never unpickled: JSONL, CSV and Parquet only). A file that is not
UTF-8 is named with the encoding it looks like and read in it with one click (app/pages/data/upload_encoding.py). Its
columns are mapped with widgets pre-filled by a guess (`guess_column_mapping`), validated row by row,
previewed, and saved under the workspace as `upload/<name>`. Any dataset can then be split, seeded and
stratified by answer position, into `split/<name>/train|heldout|test`: the S_T, S_V and evaluation sets a
run needs. The sizes show before saving; an S_V too small for TS and the calibrated stop is refused (under
10 items) or warned about (too few to choose between methods, when a larger held-out part is possible), with
a split that fits, and what S_V supports in one sentence (data/split_sizes.py). Last, lm-evaluation-harness
samples of a model evaluated elsewhere (app/pages/data/lm_eval_view.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from app.pages.data.lm_eval_view import lm_eval_section
from app.pages.data.upload_cache import LOAD, PEEK, load_upload, once, peek_upload
from app.pages.data.upload_cache import problem as _problem
from app.pages.data.upload_encoding import upload_text
from app.pages.train.advice import TRAIN_FIX
from app.server.gate import studio_access, this_session
from app.widgets.keys import CALIBRATE_SPLIT, DATA_LAST_SPLIT, DATA_MAP_FILE, DATA_NAME_FILE, DATA_SPLIT_SOURCE
from app.widgets.state import plain
from app.widgets.words import explained, label_of
from calm_core.access.datasets import check_may_replace, delete_dataset, delete_refusal_for
from calm_core.data.catalog import load_dataset
from calm_core.data.entries import SPLIT_PREFIX, DatasetEntry, list_datasets
from calm_core.data.guess import column_paths, guess_column_mapping
from calm_core.data.mapping import ColumnMapping
from calm_core.data.mapping_form import form_values, mapping_from_form
from calm_core.data.readers import FORMATS
from calm_core.data.schema import ANSWER_FORMS, LoadReport
from calm_core.data.split import default_split_name, plan_split, save_split
from calm_core.data.split_sizes import NOTE, SplitAdvice, advise_split, heldout_support
from calm_core.data.uploads import save_upload
from calm_core.glossary import define, tooltip
from calm_core.paths import safe_name
from calm_core.results.knowing import workspace_note

PREVIEW_ROWS = 8
FORM_KEY = "data_map_{}"  # widget key of each `form_values` field
# RowError's numbers (data/schema.py) count data rows; an editor counts lines.
ROW_NUMBERS = (
    "Row numbers count data rows: in a CSV the header is not one, so row N is the editor's line N + 1 "
    "(unless a quoted field spans lines); in JSONL, row N is line N."
)
SPLIT_PERCENT = {"train": 60, "heldout": 20, "test": 20}  # default part sizes, % of the dataset
PART_TERMS = {"train": "S_T", "heldout": "S_V", "test": "test split"}  # each part's glossary entry
# The catalog's columns in pixels, together under the page's width at 1280 px (sized by content, the description
# ran past the table's edge); its text wraps, which the data grid allows only in rows over 4rem (64 px): 3 lines.
CATALOG_COLUMNS = {
    "name": st.column_config.TextColumn(width=250),
    "kind": st.column_config.TextColumn(width=50),
    "source": st.column_config.TextColumn(width=65),
    "items": st.column_config.NumberColumn(width=60),
    "description": st.column_config.TextColumn(width=360),
}
CATALOG_ROW_PX = 66


def _default_name(filename: str) -> str:
    """A "Save as" suggestion that save_upload accepts: `日本.csv` has no usable letters."""
    try:
        return safe_name(Path(filename).stem)
    except ValueError:
        return "upload"


def _prefill(file_id: str, mapping: ColumnMapping, columns: list[str]) -> None:
    """Set the mapping widgets from the guess once per uploaded file; after that they are the user's."""
    if st.session_state.get(DATA_MAP_FILE) == file_id:
        return
    st.session_state[DATA_MAP_FILE] = file_id
    for field, value in form_values(mapping, columns).items():
        st.session_state[FORM_KEY.format(field)] = value


def _mapping_widgets(columns: list[str]) -> dict[str, Any]:
    """The mapping form; returns `form_values`-shaped values (None: no column chosen)."""
    key = FORM_KEY.format
    optional = [None, *columns]
    values: dict[str, Any] = {}
    values["kind"] = st.radio(
        "Kind",
        ["mc", "open"],
        horizontal=True,
        key=key("kind"),
        format_func={"mc": "multiple choice", "open": "open answer"}.get,
    )
    left, right = st.columns(2)
    values["question"] = left.selectbox("Question column", columns, key=key("question"))
    if values["kind"] == "mc":
        values["layout"] = right.radio(
            "The options are in",
            ["columns", "list"],
            horizontal=True,
            key=key("layout"),
            format_func={"columns": "one column each", "list": "one list column"}.get,
        )
        if values["layout"] == "columns":
            values["options"] = st.multiselect("Option columns, in order (the first is A)", columns, key=key("options"))
        else:
            values["list"] = st.selectbox("Column holding the list of options", columns, key=key("list"))
        left, right = st.columns(2)
        values["answer"] = left.selectbox("Answer column", columns, key=key("answer"))
        values["answer_form"] = right.selectbox(
            "The answer is given as", list(ANSWER_FORMS), key=key("answer_form"), format_func=label_of(ANSWER_FORMS)
        )
        if values["answer_form"] == "label":
            values["labels"] = st.selectbox("Column of option labels", columns, key=key("labels"))
    else:
        values["answers"] = right.selectbox(
            "Column of accepted answers (a list, or one answer)", columns, key=key("answers")
        )
    left, right = st.columns(2)
    none = {None: "(none)"}
    values["id"] = left.selectbox("Id column (optional)", optional, key=key("id"), format_func=lambda c: none.get(c, c))
    values["subject"] = right.selectbox(
        "Group: subject or any column (optional)",
        optional,
        key=key("subject"),
        format_func=lambda c: none.get(c, c),
        help="Compare's figures by subject and `calm selective --by subject` break down by this column: a "
        "subject, a region, a source. On the command line: `--mapping subject=COLUMN`.",
    )
    return values


def _preview(report: LoadReport) -> pd.DataFrame:
    """The first items as the studio will use them: the correct option spelled out."""
    rows = []
    for item in report.items[:PREVIEW_ROWS]:
        row = {"id": item.id, "question": item.question}
        if report.kind == "mc":
            row.update(
                {
                    "options": " | ".join(item.choices),
                    "answer": chr(ord("A") + item.answer),
                    "correct option": item.choices[item.answer],
                }
            )
        else:
            row["answers"] = " | ".join(item.answers)
        rows.append({**row, "subject": item.subject})
    return pd.DataFrame(rows)


def _accepted_suffixes() -> list[str]:
    """What the uploader takes: every suffix a reader opens (`readers.FORMATS`)."""
    return sorted(suffix.lstrip(".") for suffix in FORMATS)


def upload_section() -> None:
    """Upload a file, map its columns (pre-filled by a guess), preview what the studio will
    use and why rows were rejected, and save it under the workspace as `upload/<name>`."""
    st.subheader("Upload a dataset")
    st.caption(
        "Multiple choice: a question, its options (one column each, or one list column) and the answer "
        "(index, letter, text or label). Open answer: a question and its accepted answers. "
        "The columns are guessed from the file; change any that are wrong."
    )
    upload = st.file_uploader("CSV, JSONL or Parquet", type=_accepted_suffixes(), key="data_upload")
    if upload is None:
        return
    read = _read_upload(upload)
    if read is None:
        return
    mapping, report, encoding = read
    _show_upload(mapping, report, encoding)
    _suggest_name(upload.file_id, upload.name)
    _save_upload_form(upload.name, mapping, report, encoding)


def _read_upload(upload: Any) -> tuple[ColumnMapping, LoadReport, str | None] | None:
    """The upload's mapping (guessed, then as the widgets set it), what it loads to and the
    text encoding it was read in (None: UTF-8); None, with the error shown, when the file
    cannot be read or mapped. A file that is not UTF-8 is named first, with its button.
    Each step parses once per file, encoding and mapping (app/pages/data/upload_cache.py): a rerun of
    the page reads what it gave."""
    data, encoding = upload_text(upload)
    records, problem = once(PEEK, (upload.file_id, encoding), lambda: peek_upload(upload.name, data))
    if problem:
        st.error(problem)
        return None
    columns = list(dict.fromkeys(key for record in records for key in record))
    paths = column_paths(columns, records)
    _prefill(upload.file_id, guess_column_mapping(columns, records), paths)
    st.write("Columns found:", ", ".join(f"`{c}`" for c in paths))
    values = _mapping_widgets(paths)
    try:
        mapping = mapping_from_form(values, paths)
    except Exception as exc:
        st.error(_problem(exc))
        return None
    key = (upload.file_id, encoding, values["kind"], mapping)
    report, problem = once(LOAD, key, lambda: load_upload(upload.name, data, values["kind"], mapping))
    if report is None:
        st.error(problem)
        return None
    return mapping, report, encoding


def _show_upload(mapping: ColumnMapping, report: LoadReport, encoding: str | None) -> None:
    """The mapping as text, the counts, a preview of the items and why rows were rejected."""
    flag = f" --encoding {encoding}" if encoding else ""
    st.caption(f"The same mapping as text, for `calm eval --data FILE{flag} --mapping '...'`:")
    st.code(mapping.to_text(), language=None)
    if not mapping.text_round_trips():
        st.caption("A column name holds `,` `=` or `|`: rename it in the file to use this mapping on the command line.")
    c1, c2, c3 = st.columns(3)
    c1.metric("Rows", report.n_rows, help="Data rows read from the file.")
    c2.metric("Kept", len(report.items), help="Rows that make a valid item under this mapping: what the studio uses.")
    c3.metric(
        "Rejected",
        report.n_rejected,
        help="Rows that do not fit the mapping (a missing option, an answer that names no option): each is "
        "listed with why, below.",
    )
    # Static tables, whose cells wrap: a data grid cuts a long option or a rejection's reason
    # off at its column's edge. Their cells are Markdown, so the file's text is escaped.
    st.table(_preview(report).map(plain), hide_index=True)
    if report.n_rejected:
        count = report.n_rejected
        with st.expander(f"Why {count} row{'s were' if count != 1 else ' was'} rejected"):
            st.caption(ROW_NUMBERS)
            st.table(pd.DataFrame({"row": [plain(e) for e in report.rejected[:200]]}), hide_index=True)


def _suggest_name(file_id: str, filename: str) -> None:
    """Suggest the file's own name under "Save as" once per uploaded file: a keyed text
    input keeps its text across files, so a second upload would be saved under the first
    one's name. A name typed for this file stays, since it is set only when the file changes
    (or when a run that drew no form, a mapping's error, let Streamlit drop the field's text)."""
    if st.session_state.get(DATA_NAME_FILE) == file_id and "data_name" in st.session_state:
        return
    st.session_state[DATA_NAME_FILE] = file_id
    st.session_state["data_name"] = _default_name(filename)


def _save_upload_form(filename: str, mapping: ColumnMapping, report: LoadReport, encoding: str | None) -> None:
    """The name, the replace box and the save button; a saved upload becomes the split form's source."""
    name = st.text_input("Save as", key="data_name")
    overwrite = st.checkbox("Replace an upload with the same name", key="data_overwrite")
    if st.button("Save to the workspace", type="primary", key="data_save"):
        try:
            if overwrite:  # replacing deletes what was there: a shared studio's owner rule applies
                check_may_replace(f"upload/{name}", studio_access(), this_session())
            entry = save_upload(
                name, report, filename, mapping, overwrite=overwrite, owner=this_session(), encoding=encoding
            )
        except Exception as exc:
            st.error(_problem(exc))
        else:
            st.session_state[DATA_SPLIT_SOURCE] = entry.name  # the split form below starts from it
            st.success(
                f"Saved as `{entry.name}` ({entry.n_items} items). It is now in every dataset picker; "
                "split it below into train / held-out / test."
            )


def _use_suggestion(percent: tuple[int, int, int]) -> None:
    """The suggested split into the size widgets (a callback: it runs before they are drawn)."""
    for part, value in zip(SPLIT_PERCENT, percent, strict=True):
        st.session_state[f"data_split_{part}"] = value


def _show_advice(advice: SplitAdvice, heldout: int) -> None:
    """What S_V supports (heldout_support), why it is too small (refused) or small with a
    larger split possible (warned, with a button for it), or the best this dataset allows
    (a note with the fixes that work: the page accepts it)."""
    if not advice.message:
        st.caption(heldout_support(heldout))
        return
    if advice.level == NOTE:  # nothing better to split: the fix is Train's, said there once
        st.caption(f"This split holds out as much as this dataset allows. {TRAIN_FIX}")
        return
    (st.error if advice.refused else st.warning if advice.warned else st.info)(advice.message)
    if advice.suggestion is not None:
        label = "Use {} / {} / {} %".format(*advice.suggestion)
        st.button(label, key="data_split_suggest", on_click=_use_suggestion, args=(advice.suggestion,))


def _sizes_line(sizes: dict[str, int]) -> str:
    """The parts' sizes in one line, as a run will see them."""
    names = {"train": "S_T (train)", "heldout": "S_V (heldout)", "test": "test"}
    return " · ".join(f"{names[part]}: {sizes[part]} items" for part in names if part in sizes)


def split_section() -> None:
    """Split one dataset into S_T, S_V and test, seeded and stratified: the sizes and the
    advice on S_V show before saving, and the saved split can go straight to Train."""
    st.subheader("Split a dataset")
    explained(
        "A run needs training (S_T), held-out (S_V) and test sets. Split one dataset, seeded and stratified by "
        f"answer position: the parts are saved as `{SPLIT_PREFIX}<name>/train`, `/heldout` and `/test`.",
        "S_T",
        "S_V",
        "test split",
    )
    names = [e.name for e in list_datasets() if e.kind in ("mc", "open")]
    # No dataset until one is chosen or an upload is saved: a first entry picked for the reader
    # showed a built-in set's plan under a failed upload, as if it were the upload's.
    source = st.selectbox("Dataset", names, index=None, placeholder="Choose a dataset to split", key=DATA_SPLIT_SOURCE)
    if source is None:
        st.caption("Save an upload above, or choose a dataset: its parts' sizes and the advice on S_V show here.")
    else:
        if note := workspace_note(source):  # a finished run's model was not above chance there: said before training
            st.warning(note, icon=":material/help:")
        _split_form(source)
    _saved_split()


def _split_form(source: str) -> None:
    """The sizes, seed and name of a split of `source`, its plan per part and the advice on
    S_V, and the button that saves it (disabled when S_V is refused)."""
    sizes = {}
    for column, (part, percent) in zip(st.columns(3), SPLIT_PERCENT.items(), strict=True):
        sizes[part] = column.number_input(
            f"{part} %",
            min_value=1,
            max_value=98,
            value=percent,
            step=1,
            key=f"data_split_{part}",
            help=define(PART_TERMS[part]),
        )
    left, right = st.columns(2)
    seed = left.number_input("Seed", min_value=0, value=0, step=1, key="data_split_seed")
    stratify = right.checkbox("Stratify by answer position", value=True, key="data_split_stratify")
    if sum(sizes.values()) != 100:
        st.info(f"The three parts must add up to 100% (now {sum(sizes.values())}%).")
        return
    name = st.text_input(
        "Name",
        key="data_split_name",
        placeholder=default_split_name(source),
        help=f"The parts are saved as {SPLIT_PREFIX}<name>/train, /heldout and /test",
    )
    name = name.strip() or default_split_name(source)
    try:
        report = load_dataset(source)
        plan = plan_split(report.items, [p / 100 for p in sizes.values()], int(seed), stratify, source=source)
    except Exception as exc:
        st.error(_problem(exc))
        return
    st.caption("Items per part, and per answer position (A = the first option) when stratifying matters:")
    st.dataframe(pd.DataFrame(plan.table(name)), hide_index=True, width="stretch")
    advice = advise_split(plan.sizes, [p / 100 for p in sizes.values()])
    _show_advice(advice, plan.sizes["heldout"])
    _save_split_form(plan, name, advice.refused)


def _save_split_form(plan: Any, name: str, refused: bool) -> None:
    """The replace box and the Split button; the saved parts go to Train's calibrate form."""
    overwrite = st.checkbox("Replace a split with the same name", key="data_split_overwrite")
    if st.button("Split", type="primary", key="data_split_go", disabled=refused):
        try:
            if overwrite:  # replacing deletes what was there: a shared studio's owner rule applies
                check_may_replace(f"{SPLIT_PREFIX}{name}", studio_access(), this_session())
            record = save_split(plan, name, overwrite, owner=this_session())
        except Exception as exc:
            st.error(_problem(exc))
        else:
            st.session_state[DATA_LAST_SPLIT] = {**record.names, "source": record.source, "sizes": record.sizes}
            st.session_state[CALIBRATE_SPLIT] = st.session_state[DATA_LAST_SPLIT]


def _saved_split() -> None:
    """The last split saved in this session, its sizes and what S_V supports, with a
    button that opens Train on it."""
    done = st.session_state.get(DATA_LAST_SPLIT)
    if done:
        parts = [done[part] for part in ("train", "heldout", "test") if part in done]
        st.success("Saved: " + ", ".join(f"`{n}`" for n in parts) + ". They are in every dataset picker.")
        sizes = done.get("sizes") or {}
        st.caption(_sizes_line(sizes) + ".")  # what S_V supports: Train says it, where its fix is chosen
        if st.button("Calibrate this dataset", key="data_calibrate"):
            st.session_state[CALIBRATE_SPLIT] = done
            st.switch_page("../pages/train/train.py")


def intro() -> None:
    """The title and where the datasets come from."""
    st.title("Data")
    st.markdown(
        "Bring your own questions: upload a file, check that its rows are read as you mean them (the preview, and "
        "why any row was rejected), then split it into training, held-out and test parts and press **Calibrate "
        "this dataset**. The page says when the held-out part is too small to trust a comparison. Below: every "
        "dataset the studio can use (built-in demo sets, the benchmarks in `CALM_DATA_DIR`, uploads, splits).",
        help=tooltip("S_T", "S_V", "test split", "TS", "CALM", "calibrated stop"),
    )


def catalog(entries: list[DatasetEntry]) -> None:
    """Every dataset in the catalog, filtered by where it comes from."""
    table = pd.DataFrame(
        [
            {"name": e.name, "kind": e.kind, "source": e.source, "items": e.n_items, "description": e.description}
            for e in entries
        ]
    )
    families = ["builtin", "shared", "upload", "split"]
    sources = st.multiselect("Show", families, default=families, key="data_sources")
    with st.container(key="data_catalog"):  # keyed: the browser walk measures the table's width in it
        st.dataframe(
            table[table["source"].isin(sources)] if len(table) else table,
            hide_index=True,
            width="stretch",
            column_config=CATALOG_COLUMNS,
            row_height=CATALOG_ROW_PX,
        )


def delete_section(entries: list[DatasetEntry]) -> None:
    """Delete an upload or a whole split (its three parts); shown only when there is one.
    A shared studio lets a session delete only what it saved (or the admin anything):
    the button is off with the reason otherwise (access/datasets.py)."""
    removable = [e.name for e in entries if e.source == "upload"] + sorted(
        {e.name.rsplit("/", 1)[0] for e in entries if e.source == "split"}
    )
    if not removable:
        return
    with st.expander("Delete an upload or a split"):
        victim = st.selectbox("Dataset", removable, key="data_delete_name")
        access, session = studio_access(), this_session()
        refusal = delete_refusal_for(victim, access, session)
        if refusal:
            st.caption(refusal)
        if st.button("Delete", key="data_delete", disabled=refusal is not None, help=refusal):
            try:
                delete_dataset(victim, access, session)
            except Exception as exc:
                st.error(_problem(exc))
                return
            st.rerun()


intro()
entries = list_datasets()  # read once: the catalog and the delete section show the same list
catalog(entries)
upload_section()
split_section()
delete_section(entries)
lm_eval_section()  # a model evaluated elsewhere: lm-evaluation-harness samples (app/pages/data/lm_eval_view.py)
