"""Readers: JSONL, CSV and Parquet files -> raw rows, one verdict per row.

Stage 1 of every loader (`calm_core.data.loaders` maps and validates). A row is yielded
as (1-based row number, dict), or (row number, `RowError`) when it cannot even be
parsed: bad JSON, bytes that are not UTF-8, a CSV row with the wrong number of fields.
One bad row never hides the others; a file that cannot be read at all raises one
`DataError` naming the file as the person knows it (`source`, e.g. an upload's own
name rather than its temporary copy).

    for number, record in load_records("quiz.csv"):
        ...

Nothing here unpickles data: Parquet is read as columns.
"""

from __future__ import annotations

import csv
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Union

from calm_core.data.schema import DataError, RowError, is_utf8

FORMATS = {  # file extension -> format; every format has one entry in each opener's table (format_entry)
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}
BOM = b"\xef\xbb\xbf"  # Excel and Notepad start UTF-8 files with it
UNDECODABLE = "Expected UTF-8 text, but got undecodable bytes"
PARQUET_BATCH = 1024  # rows decoded at a time, so `limit` on a large file stays cheap
READ_ERRORS = (OSError, UnicodeDecodeError, csv.Error)  # a file failing to read part-way

Record = dict[str, Any]
Row = tuple[int, Union[Record, RowError]]  # (1-based row number, raw record or why it is unreadable)


@dataclass
class Table:
    """Raw rows of one source: the column names present and a (lazy) row iterator."""

    source: str  # the name row errors carry (file name or "hf:<name>")
    where: str  # the full location, for whole-file messages
    columns: list[str]
    rows: Iterable[Row]


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
    (the answer form, nested `choices`). Rows that cannot be parsed are skipped."""
    records = []
    for number, record in _rows_unread(Path(path), detect_format(path, fmt), source):
        if number > rows:
            break
        if isinstance(record, dict):
            records.append(record)
    return records


def _rows_unread(path: Path, fmt: str, source: str | None) -> Iterator[Row]:
    """The rows `load_records` yields, without reading a JSONL file whole first: a peek
    needs no columns (`_jsonl_table` reads every row to find them)."""
    where = source or str(path)
    check_readable(path, where)
    try:
        lines = fmt == "jsonl" and not is_json_array(path)
    except READ_ERRORS as exc:
        raise unreadable(fmt, where, exc) from None
    if not lines:
        return load_records(path, fmt, source)
    rows = _some_rows(_jsonl_rows(path, source or path.name), where)
    return guarded(Table(source or path.name, where, [], rows))


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
    """The raw table of a file. `source` replaces the path in every message (an upload's
    temporary copy must not show; its own name must)."""
    where = source or str(path)
    check_readable(path, where)
    read = format_entry(TABLE_READERS, fmt)
    try:
        return read(path, source or path.name, where)
    except READ_ERRORS as exc:
        raise unreadable(fmt, where, exc) from None


def format_entry(table: dict[str, Any], fmt: str) -> Any:
    """`table[fmt]` for an opener's table keyed by format (TABLE_READERS here,
    sources.SOURCE_OPENERS): a format missing there is refused, never read as another."""
    if fmt not in table:
        raise DataError(f"Expected a file format among {sorted(table)}, but got {fmt!r}")
    return table[fmt]


def _reason(exc: BaseException) -> str:
    """The human part of an exception: "Permission denied", not "PermissionError: [Errno 13] ..."."""
    return getattr(exc, "strerror", None) or str(exc) or "unknown error"


def check_readable(path: Path, where: str) -> None:
    if not path.exists():
        raise DataError(f"Expected a dataset file at {where}, but it does not exist")
    if not path.is_file():
        raise DataError(f"Expected a dataset file at {where}, but it is a directory")
    if path.stat().st_size == 0:
        raise DataError(f"Expected data rows in {where}, but the file is empty")


def _jsonl_table(path: Path, source: str, where: str) -> Table:
    # JSONL has no header: the columns are the union of keys, so the rows are read
    # first (QA sets are small; the biggest shared split is 2 MB).
    rows = list(
        _some_rows(_json_array_rows(path, source, where) if is_json_array(path) else _jsonl_rows(path, source), where)
    )
    columns: dict[str, None] = {}
    for _, record in rows:
        if isinstance(record, dict):
            columns.update(dict.fromkeys(record))
    return Table(source, where, list(columns), rows)


def _some_rows(rows: Iterator[Row], where: str) -> Iterator[Row]:
    """`rows`, or a DataError once they end when there was none (a file of blank lines)."""
    empty = True
    for row in rows:
        empty = False
        yield row
    if empty:
        raise DataError(f"Expected data rows in {where}, but the file has only blank lines")


def is_json_array(path: Path) -> bool:
    """A `.json` file holding one array of objects rather than JSON lines."""
    return path.suffix.lower() == ".json" and _starts_with(path, b"[")


def _starts_with(path: Path, prefix: bytes) -> bool:
    with path.open("rb") as handle:
        return handle.read(4096).removeprefix(BOM).lstrip().startswith(prefix)


def _jsonl_rows(path: Path, source: str) -> Iterator[Row]:
    with path.open("rb") as handle:  # bytes: one undecodable line must not sink the file
        for number, raw in enumerate(handle, start=1):
            if raw.strip():
                yield number, parse_json_line(raw, source, number)


def parse_json_line(raw: bytes, source: str, number: int) -> Record | RowError:
    try:
        value = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        return RowError(source, number, "", UNDECODABLE)
    except json.JSONDecodeError as exc:
        return RowError(source, number, "", f"Expected valid JSON, but got {exc.msg} at column {exc.colno}")
    except (ValueError, RecursionError):  # a number past 4300 digits, nesting past Python's stack
        return RowError(source, number, "", "Expected valid JSON, but got a number or nesting too large to read")
    if not isinstance(value, dict):
        return RowError(source, number, "", f"Expected a JSON object, but got {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    """JSON's name for a parsed value ("array", not Python's "list")."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _json_array_rows(path: Path, source: str, where: str) -> Iterator[Row]:
    """A .json file holding one array of objects; rows are 1-based array positions."""
    try:
        values = json.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise DataError(f"Expected a JSON array of objects in {where}, but it is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        message = f"Expected a JSON array of objects in {where}, but got {exc.msg} at line {exc.lineno}"
        raise DataError(message) from None
    except (ValueError, RecursionError):  # a number past 4300 digits, nesting past Python's stack
        message = f"Expected a JSON array of objects in {where}, but it holds a number or nesting too large to read"
        raise DataError(message) from None
    for number, value in enumerate(values, start=1):
        if isinstance(value, dict):
            yield number, value
        else:
            yield number, RowError(source, number, "", f"Expected a JSON object, but got {_json_type(value)}")


def read_csv(path: Path) -> Any:
    """A text handle for csv.reader: undecodable bytes become lone surrogates (flagged
    per row, below) instead of one UnicodeDecodeError that sinks the whole file."""
    return path.open(newline="", encoding="utf-8-sig", errors="surrogateescape")  # -sig: Excel writes a BOM


def _csv_table(path: Path, source: str, where: str) -> Table:
    header = csv_header(path, where)
    return Table(source, where, header, _csv_rows(path, source, header))


def csv_header(path: Path, where: str) -> list[str]:
    """The CSV's column names; DataError when there are none, they are not UTF-8 or repeat."""
    with read_csv(path) as handle:
        header = [h.strip() for h in next(csv.reader(handle), [])]
    if not any(header):
        raise DataError(f"Expected a header row in {where}, but the file has none")
    if not all(is_utf8(h) for h in header):
        raise DataError(f"Expected a UTF-8 header row in {where}, but it holds undecodable bytes (save it as UTF-8)")
    named = [h for h in header if h]
    twice = sorted({h for h in named if named.count(h) > 1})
    if twice:  # dict(zip(header, cells)) would keep the last one silently
        raise DataError(f"Expected distinct column names in {where}, but {', '.join(twice)} appear more than once")
    return header


def _csv_rows(path: Path, source: str, header: list[str]) -> Iterator[Row]:
    with read_csv(path) as handle:
        reader = csv.reader(handle)
        next(reader)
        for number, cells in enumerate(reader, start=1):
            record = csv_record(number, cells, header, source)
            if record is not None:
                yield number, record


def csv_record(number: int, cells: list[str], header: list[str], source: str) -> Record | RowError | None:
    """One CSV row's record, its RowError (wrong number of fields, undecodable bytes), or
    None for a blank row (skipped, though it keeps its number)."""
    if not any(cell.strip() for cell in cells):
        return None
    if len(cells) != len(header):
        return RowError(source, number, "", f"Expected {len(header)} fields as in the header, but got {len(cells)}")
    bad = next((column for column, cell in zip(header, cells, strict=True) if not is_utf8(cell)), None)
    if bad is not None:
        return RowError(source, number, bad, UNDECODABLE)
    return dict(zip(header, cells, strict=True))


def _parquet_table(path: Path, source: str, where: str) -> Table:
    parquet = open_parquet(path, where)
    return Table(source, where, list(parquet.schema_arrow.names), parquet_rows(parquet, where))


def open_parquet(path: Path, where: str) -> Any:
    """A `pyarrow.parquet.ParquetFile` with at least one row; DataError otherwise."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"Expected a Parquet file at {where}, but could not read it: {_reason(exc)}") from None
    if parquet.metadata.num_rows == 0:
        raise DataError(f"Expected data rows in {where}, but the Parquet file has none")
    return parquet


def parquet_rows(parquet: Any, where: str) -> Iterator[Row]:
    import pyarrow as pa

    number = 0
    try:
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH):
            for record in batch.to_pylist():  # plain Python values: lists stay lists
                number += 1
                yield number, record
    except pa.ArrowException as exc:  # a damaged data page: the rows after it cannot be located
        raise DataError(f"Expected readable data in {where}, but reading after row {number} failed: {exc}") from None


def guarded(table: Table) -> Iterator[Row]:
    """Rows of `table`, turning a read failure half-way through into one DataError."""
    number = 0
    try:
        for number, raw in table.rows:
            yield number, raw
    except READ_ERRORS as exc:
        raise read_failed(table.where, number, exc) from None


def row_chunks(table: Table, size: int) -> Iterator[list[Row]]:
    """`guarded(table)`'s rows in lists of up to `size`: a loader runs each stage (map the
    columns, validate) over a chunk at once, in file order, and can stop after any chunk."""
    rows = guarded(table)
    while chunk := list(itertools.islice(rows, size)):
        yield chunk


def read_failed(where: str, number: int, exc: BaseException) -> DataError:
    """The DataError for a file that could not be read past row `number`."""
    return DataError(f"Expected readable data in {where}, but reading after row {number} failed: {_reason(exc)}")


TABLE_READERS = {"jsonl": _jsonl_table, "csv": _csv_table, "parquet": _parquet_table}  # format -> whole-table reader


def unreadable(fmt: str, where: str, exc: BaseException) -> DataError:
    """The DataError for a file that could not be opened as `fmt`."""
    return DataError(f"Expected a readable {fmt} file at {where}, but could not read it: {_reason(exc)}")
