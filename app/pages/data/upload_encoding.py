"""The Data page's text encoding of an upload: a file that is not UTF-8 is named with the
encoding it looks like (`calm_core.data.encoding`), and one click reads it in that one.

A spreadsheet on Windows saves CSV in its code page (cp1252 in Western Europe); read as
UTF-8, every row holding an accented letter is rejected as undecodable. The page says so
above the mapping, offers **Read it as <encoding>**, and from then on hands the readers
the file converted to UTF-8 (the encoding is remembered per uploaded file, so a new file
starts as UTF-8 again). Parquet stores UTF-8 by definition and is passed through.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app.widgets.state import plain
from calm_core.data.encoding import Guess, likely_encoding, to_utf8
from calm_core.data.readers import upload_suffix
from calm_core.glossary import define

ENCODINGS = "data_encodings"  # session state: uploaded file id -> the encoding it is read in


def read_in(file_id: str, encoding: str | None) -> None:
    """Read the upload `file_id` in `encoding` (None: UTF-8, as sent) from the next run on:
    the button's callback, so the page that follows already reads it so."""
    chosen = dict(st.session_state.get(ENCODINGS, {}))
    chosen[file_id] = encoding
    st.session_state[ENCODINGS] = chosen


def upload_text(upload: Any) -> tuple[bytes, str | None]:
    """(the upload's bytes as the readers will read them, the encoding they were read in
    or None for UTF-8). Shows the encoding the file looks like, with its button, when the
    file is not UTF-8; after the click, which encoding it was read in, with the way back."""
    data = upload.getvalue()
    if upload_suffix(upload.name, data[:4096]) == ".parquet":
        return data, None
    chosen = st.session_state.get(ENCODINGS, {}).get(upload.file_id)
    if chosen:
        st.caption(
            f"Read in {Guess(chosen).label}, converted to UTF-8 for the studio.",
            help=define("text encoding"),
        )
        st.button("Read it as UTF-8 instead", key="data_encoding_utf8", on_click=read_in, args=(upload.file_id, None))
        return to_utf8(data, chosen), chosen
    guess = likely_encoding(data)
    if guess is not None:
        _offer(upload, guess)
    return data, None


def _offer(upload: Any, guess: Guess) -> None:
    """The warning that names the likely encoding, and the one-click re-read in it."""
    st.warning(
        f"{plain(upload.name)} is not UTF-8 text: it looks like **{guess.label}**, as a spreadsheet on Windows "
        "saves CSV. Read as UTF-8, every row with a letter outside plain English (é, ü, ß, ...) is rejected "
        "as undecodable.",
        icon=":material/translate:",
    )
    st.button(
        f"Read it as {guess.encoding}",
        key="data_encoding_use",
        type="primary",
        on_click=read_in,
        args=(upload.file_id, guess.encoding),
        help=define("text encoding"),
    )
