"""Readers: a file's format, and its raw rows read whole or on demand.

Stage 1 of every loader (`calm_core.data.loaders` maps and validates). A file is opened
by the one reader its format names in `FILE_FORMATS` (below): `open_table` gives the
rows of a whole read, `open_source` the same rows for streaming. A row is yielded as
(1-based row number, dict), or (row number, `RowError`) when it cannot even be parsed
(`calm_core.data.sources`).

    for number, record in load_records("quiz.csv"):
        ...

Nothing here unpickles data: Parquet is read as columns.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol

from calm_core.data.files import BOM, READ_ERRORS, csv_header, open_parquet, unreadable
from calm_core.data.limits import MAX_COLUMNS, MAX_ROW_BYTES
from calm_core.data.parquet_batches import check_parquet, parquet_decodes_past
from calm_core.data.row_types import Record, Row
from calm_core.data.schema import DataError
from calm_core.data.sources import (
    Budget,
    CsvSource,
    FileSource,
    JsonlSource,
    ParquetSource,
    Table,
    guarded,
    json_array_rows,
    json_cost,
    some_rows,
)


def is_json_array(path: Path) -> bool:
    """A `.json` file holding one array of objects rather than JSON lines."""
    return path.suffix.lower() == ".json" and starts_with(path, b"[")


def starts_with(path: Path, prefix: bytes) -> bool:
    """Whether the file's first non-blank bytes (after a BOM) are `prefix`."""
    with path.open("rb") as handle:
        return handle.read(4096).removeprefix(BOM).lstrip().startswith(prefix)


class JsonArrayReader:
    """A `.json` file holding one array of objects: parsed whole, so it does not stream
    (there is no row to seek to); rows are 1-based array positions."""

    def __init__(self, path: Path, source: str, where: str) -> None:
        self.path, self.source, self.where = path, source, where

    def rows(self) -> Iterator[Row]:
        return some_rows(json_array_rows(self.path, self.source, self.where), self.where)

    def table(self) -> Table:
        rows = list(self.rows())
        columns: dict[str, None] = {}
        for _, record in rows:
            if isinstance(record, dict):
                columns.update(dict.fromkeys(record))
        return Table(self.source, self.where, list(columns), rows)


@dataclass(frozen=True)
class FileFormat:
    """One file format: the suffixes that name its files and the reader that opens one
    (path, the name row errors use, the name whole-file errors use)."""

    name: str
    suffixes: tuple[str, ...]
    open: Callable[[Path, str, str], FileReader]


def _open_jsonl(path: Path, source: str, where: str) -> FileReader:
    return JsonArrayReader(path, source, where) if is_json_array(path) else JsonlSource(path, source, where)


def _open_csv(path: Path, source: str, where: str) -> FileReader:
    return CsvSource(path, source, where, csv_header(path, where, MAX_COLUMNS, MAX_ROW_BYTES))


def _open_parquet(path: Path, source: str, where: str) -> FileReader:
    """The Parquet reader, its footer checked first (`check_parquet`): a peek at the first
    rows decodes a batch, so the refusal must come before it, not at the scan."""
    parquet = open_parquet(path, where, MAX_COLUMNS)
    check_parquet(parquet, Budget(path, where))
    return ParquetSource(path, source, where, parquet)


FILE_FORMATS = {  # the one table of formats: readers.detect_format, open_table and open_source all read it
    fmt.name: fmt
    for fmt in (
        FileFormat("jsonl", (".jsonl", ".json", ".ndjson"), _open_jsonl),
        FileFormat("csv", (".csv",), _open_csv),
        FileFormat("parquet", (".parquet", ".pq"), _open_parquet),
    )
}


class FileReader(Protocol):
    """What a format's opener gives: its rows read whole. A reader that also streams is
    a `sources.FileSource`, and a `row_types.RowSource`."""

    def rows(self) -> Iterator[Row]: ...

    def table(self) -> Table: ...


FORMATS = {suffix: fmt.name for fmt in FILE_FORMATS.values() for suffix in fmt.suffixes}  # ".csv" -> "csv", derived


def detect_format(path: str | Path, fmt: str | None = None) -> str:
    """ "jsonl", "csv" or "parquet", from `fmt` when given, else from the file extension."""
    key = f".{fmt.lower().lstrip('.')}" if fmt else Path(path).suffix.lower()
    if key not in FORMATS:
        choices = ", ".join(sorted(FORMATS))
        what = f"fmt={fmt!r}" if fmt else f"{Path(path).name!r}"
        raise DataError(f"Expected a file ending in one of {choices} (or pass fmt=...), but got {what}")
    return FORMATS[key]


def load_records(path: str | Path, fmt: str | None = None, source: str | None = None) -> Iterator[Row]:
    """Yield (row_number, record) for every non-blank row of a JSONL, CSV or Parquet file.

    Row numbers are 1-based: the line number in JSONL, the data row (header excluded) in
    CSV and Parquet. A row that cannot be parsed is yielded as a `RowError` instead of a
    dict, so one bad line never hides the others. `source`: how messages name the file
    (default: its own name for rows, its path for whole-file errors).
    """
    return guarded(open_table(Path(path), detect_format(path, fmt), source))


def peek_columns(path: str | Path, fmt: str | None = None, rows: int = 20, source: str | None = None) -> list[str]:
    """Column names of the first readable record among the first `rows` (the studio's
    mapping form offers them); [] when none of those rows can be read."""
    records = peek_records(path, fmt, rows, source)
    return list(records[0]) if records else []


def peek_records(path: str | Path, fmt: str | None = None, rows: int = 20, source: str | None = None) -> list[Record]:
    """The readable records among the first `rows` rows: what a mapping is guessed from
    (the answer form, nested `choices`). Rows that cannot be parsed are skipped. A peek
    reads the rows lazily: a JSONL file is not read whole for its columns."""
    path = Path(path)
    where = source or str(path)
    reader = _open(path, detect_format(path, fmt), source)
    table = Table(source or path.name, where, [], reader.rows())  # the name `_open` gives the reader
    first = itertools.takewhile(lambda row: row[0] <= rows, guarded(table))
    return [record for _, record in first if isinstance(record, dict)]


def upload_suffix(filename: str, head: bytes) -> str:
    """The file suffix to store an upload under, so that the right reader opens it.

    The ORIGINAL name decides first: a cleaned name can lose its suffix (`safe_name`
    turns `日本.csv` into `csv`, read as JSONL). Content decides when the suffix is missing or unknown:
    Parquet starts with `PAR1`, JSON lines with `{`, a JSON array with `[`, and anything
    else is read as CSV (whose errors then name the rows).
    """
    suffix = Path(filename.strip()).suffix.lower()
    if suffix in FORMATS:
        return suffix
    if head.startswith(b"PAR1"):
        return ".parquet"
    start = head.removeprefix(BOM).lstrip()
    if start.startswith(b"{"):
        return ".jsonl"
    if start.startswith(b"["):
        return ".json"
    return ".csv"


def stage_upload(filename: str, data: bytes, folder: Path) -> Path:
    """Write an upload's bytes into `folder` under a name its format can be read from
    (`upload.csv`, ...); the person's own file name stays for messages (`source=`)."""
    path = Path(folder) / f"upload{upload_suffix(filename, data[:4096])}"
    path.write_bytes(data)
    return path


def open_table(path: Path, fmt: str, source: str | None = None) -> Table:
    """The raw table of a file, read whole. `source` replaces the path in every message
    (an upload's temporary copy must not show; its own name must)."""
    reader = _open(path, fmt, source)
    try:
        return reader.table()
    except READ_ERRORS as exc:
        raise unreadable(fmt, source or str(path), exc) from None


def decodes_past(path: Path, fmt: str, size: int) -> bool:
    """Whether a file's rows decode to `size` bytes or more: a file that large on disk does;
    a CSV file decodes a byte to at most a byte; JSON lines are counted as Python holds
    them (`sources.json_cost`); a Parquet file's rows are counted in Arrow, as a Parquet
    bomb can be 1 KB on disk. A file that cannot be opened says no: its read says why."""
    if not path.is_file():
        return False
    if path.stat().st_size >= size:
        return True
    if fmt == "jsonl":
        return json_decodes_past(path, size)
    if fmt != "parquet":
        return False
    try:
        return parquet_decodes_past(open_parquet(path, str(path), MAX_COLUMNS), size)  # a wide file: refused unread
    except DataError:
        return False


def json_decodes_past(path: Path, size: int) -> bool:
    """Whether a JSON-lines file decodes to `size` bytes or more (`json_cost`), read 1 MiB at a time."""
    total = 0
    with path.open("rb") as handle:
        while chunk := handle.read(2**20):
            total += json_cost(chunk)
            if total >= size:
                return True
    return False


def open_source(path: Path, fmt: str, source: str | None = None) -> FileSource | None:
    """The reader of a file, holding it open to stream, or None for a reader that only
    reads whole (a `.json` file holding one array). Whole-file problems raise the
    DataError `open_table` raises."""
    reader = _open(path, fmt, source)
    if not isinstance(reader, FileSource):
        return None
    reader.hold()
    return reader


def check_readable(path: Path, where: str) -> None:
    if not path.exists():
        raise DataError(f"Expected a dataset file at {where}, but it does not exist")
    if not path.is_file():
        raise DataError(f"Expected a dataset file at {where}, but it is a directory")
    if path.stat().st_size == 0:
        raise DataError(f"Expected data rows in {where}, but the file is empty")


def _open(path: Path, fmt: str, source: str | None) -> FileReader:
    """The reader `fmt` names, opened on `path`; a format the table lacks is refused,
    never read as another."""
    where = source or str(path)
    check_readable(path, where)
    if fmt not in FILE_FORMATS:
        raise DataError(f"Expected a file format among {sorted(FILE_FORMATS)}, but got {fmt!r}")
    try:
        return FILE_FORMATS[fmt].open(path, source or path.name, where)
    except READ_ERRORS as exc:
        raise unreadable(fmt, where, exc) from None
