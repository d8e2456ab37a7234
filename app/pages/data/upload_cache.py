"""The Data page's upload, parsed once: reruns of the page read the parsed result.

Every click or typed letter reruns the page, and each rerun read the uploaded file
again: a 31 MB CSV of small valid rows took 58.8 s of the server on every rerun. A
session now keeps what its upload parsed to, in its own state, under a key that says
what it was parsed from: the upload's file id (Streamlit gives every uploaded file a new
one), the encoding it is read in and, for the load, the kind and the mapping chosen. A
rerun with the same key reads what is kept; another file, encoding or mapping parses
again and replaces it, so a session keeps one parse of each step at a time, and it goes
with the session.

The load is streamed (`load_file(stream=True)`): what is kept is an index of the valid
rows (18 bytes a row) and the held-open file on disk, not a Python object per row, so
keeping it costs the server little memory however large the file.

A Parquet upload is decoded in a worker process under a memory limit, and the server reads
the honest copy the worker wrote (`calm_core.data.worker`): a file whose footer lies costs
the worker its limit, not the server.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import streamlit as st

from calm_core.data.guess import GUESS_ROWS
from calm_core.data.loaders import load_file
from calm_core.data.mapping import ColumnMapping
from calm_core.data.readers import detect_format, load_records, peek_records, stage_upload
from calm_core.data.schema import LoadReport
from calm_core.data.worker import decode_parquet

T = TypeVar("T")
PEEK = "data_parsed_peek"  # session state: the first rows of the upload, for the mapping form
LOAD = "data_parsed_load"  # session state: the upload loaded under the chosen mapping


@dataclass(frozen=True)
class Kept:
    """A parsed result and the key it was parsed under."""

    key: tuple[Any, ...]
    value: Any


def once(slot: str, key: tuple[Any, ...], parse: Callable[[], T]) -> T:
    """`parse()` the first time `key` is asked for in this session, what it gave after that.
    The result kept before under another key is let go before the new parse runs."""
    kept = st.session_state.get(slot)
    if isinstance(kept, Kept) and kept.key == key:
        return kept.value  # type: ignore[no-any-return]
    st.session_state.pop(slot, None)
    value = parse()
    st.session_state[slot] = Kept(key, value)
    return value


def problem(exc: Exception) -> str:
    """What went wrong, in the loader's own words: DataError messages name the file, row
    and field already; a Python class name or a temporary path would only confuse."""
    return str(exc).strip() or "The file could not be read."


def no_rows(path: Path, filename: str) -> str:
    """Why no record could be read from the first rows: none at all, or the rows' own errors."""
    reasons = [str(row) for _, row in itertools.islice(load_records(path, source=filename), 5)]
    if not reasons:
        return f"Expected data rows in {filename}, but it has none"
    return f"Expected readable rows in {filename}, but the first ones could not be read:\n\n" + "\n\n".join(reasons)


def staged(filename: str, data: bytes, folder: Path, rows: int = 0) -> Path:
    """The upload written into `folder`, as its readers take it: a Parquet file's first
    `rows` rows (0: all) decoded in a worker, as the honest copy it wrote."""
    path = stage_upload(filename, data, folder)
    return decode_parquet(path, filename, rows) if detect_format(path) == "parquet" else path


def peek_upload(filename: str, data: bytes) -> tuple[list[dict[str, Any]], str | None]:
    """The records of the upload's first rows (what its mapping is guessed from), or why
    none can be read."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            # The format comes from the original name (or the bytes), never from a cleaned name.
            path = staged(filename, data, Path(tmp), rows=GUESS_ROWS)
            records = peek_records(path, rows=GUESS_ROWS, source=filename)
            return records, None if records else no_rows(path, filename)
        except Exception as exc:
            return [], problem(exc)


def load_upload(filename: str, data: bytes, kind: str, mapping: ColumnMapping) -> tuple[LoadReport | None, str]:
    """The upload loaded under `mapping`, streamed (its index and the held-open file are
    what a session keeps), or None and why it cannot be."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = staged(filename, data, Path(tmp))
            return load_file(path, kind=kind, mapping=mapping, name=filename, source=filename, stream=True), ""
        except Exception as exc:
            return None, problem(exc)
