"""Loaders: JSONL, CSV and Parquet files -> validated items (HF datasets: `calm_core.data.hf`).

Every loader runs the same three stages, each once over a chunk of rows
(`CHUNK_ROWS`, `sources.row_chunks`; a streamed file one row at a time), then keeps rows
in file order until its limit:

1. read raw rows (`calm_core.data.readers`, through the format's one reader): one dict per row, or a `RowError` for a
   row that cannot even be parsed (bad JSON, undecodable bytes, a CSV row with extra fields);
2. rename columns (`calm_core.data.mapping.normalise_rows`) into the normalised record the
   schema expects; the dataset's kind is decided once, by `mapping.resolve_kind`;
3. validate (`schema.validate_records`); bad rows stay data.

Whole-file problems (missing, unreadable or empty file, a mapped column that does not
exist, no valid row at all) raise one `DataError` whose message a person can act on.

    report = load_file("quiz.csv", mapping=ColumnMapping.parse("question=q, choices=A|B|C|D, answer=label"))
    print(report.summary())

A mapping can also be guessed from the column names and first rows of a file
(`calm_core.data.guess`); the Data page's widgets start from the guess
(`calm_core.data.mapping_form`).

Nothing here unpickles data or runs remote code: Parquet and Arrow are read as columns
and HF datasets are never given `trust_remote_code`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import shutil
import tempfile
from pathlib import Path
from typing import Any

from calm_core.data.encoding import encoding_hint, file_encoding, is_utf8_name, utf8_copy
from calm_core.data.guess import GUESS_ROWS
from calm_core.data.limits import JSON_COST_PER_BYTE
from calm_core.data.mapping import ColumnMapping, normalise_rows, resolve_kind
from calm_core.data.readers import check_readable, decodes_past, detect_format, open_source, open_table
from calm_core.data.row_types import Record, RowSource
from calm_core.data.schema import (
    REJECTED_SHOWN,
    DataError,
    LoadReport,
    RowError,
    validate_records,
)
from calm_core.data.sources import UNDECODABLE, JsonlSource, Table, row_chunks
from calm_core.data.stream import STREAM_FROM_BYTES, Index, build_index

CHUNK_ROWS = 256  # rows mapped and validated per stage call (sources.row_chunks); the limit is checked per row
MAX_ERRORS_SHOWN = REJECTED_SHOWN  # row errors quoted in a DataError message


# ----------------------------------------------------------------------------- mapping + validation


def _source_column(field_name: str, mapping: ColumnMapping) -> str:
    """Name the column the user knows (`q`) rather than the schema field (`question`)."""
    if field_name == "choices":
        return "|".join(mapping.choice_columns)
    return getattr(mapping, field_name, None) or field_name


def _build_report(table: Table, kind: str, mapping: ColumnMapping, limit: int | None, name: str) -> LoadReport:
    """Validate rows in file order until `limit` valid items; keep the first rejected rows
    with their reasons and count the rest (`LoadReport.reject`)."""
    check_limit(limit)
    kind = resolve_kind(table.columns, table.where, kind, mapping)
    report = LoadReport(name=name, kind=kind)
    first_row_of: dict[str, int] = {}  # id -> row: duplicate ids would merge per-item results
    for chunk in row_chunks(table, CHUNK_ROWS):
        for (number, _), (item, error) in zip(chunk, _rows_to_items(chunk, table.source, mapping, kind), strict=True):
            if item is not None and item.id in first_row_of:
                error = _duplicate_id(table.source, mapping, item.id, first_row_of[item.id], number)
                item = None
            if item is None:
                report.reject(error)
                continue
            first_row_of[item.id] = number
            report.items.append(item)
            if limit is not None and len(report.items) >= limit:
                _check_not_empty(report, table)
                return report
    _check_not_empty(report, table)
    return report


def _duplicate_id(source: str, mapping: ColumnMapping, item_id: str, first_row: int, number: int) -> RowError:
    """Why row `number` is rejected: its id repeats row `first_row`'s (per-item results would merge)."""
    message = f"Expected a unique id, but {item_id!r} already appeared in row {first_row}"
    return RowError(source, number, mapping.id or "id", message)


def _stream_report(rows: RowSource, kind: str, mapping: ColumnMapping, limit: int | None, name: str) -> LoadReport:
    """`_build_report` for a row source read on demand: the same kind, items and rejected
    rows (decided in one validating pass, `stream.build_index`), the items kept as LazyItems."""
    check_limit(limit)
    place = Table(rows.source, rows.where, rows.columns or [], ())
    if rows.columns is None:
        kind, index = _index_headerless(rows, kind, mapping, limit)  # type: ignore[arg-type]
    else:
        kind = resolve_kind(place.columns, place.where, kind, mapping)
        index = _index(rows, kind, mapping, limit)
    report = LoadReport(
        name=name,
        kind=kind,
        items=index.items,  # type: ignore[arg-type]
        rejected=index.rejected,
        unlisted_rejected=index.unlisted,
    )
    _check_not_empty(report, place)
    return report


def _index(rows: RowSource, kind: str, mapping: ColumnMapping, limit: int | None) -> Index:
    convert = functools.partial(_row_to_item, source=rows.source, mapping=mapping, kind=kind)
    return build_index(rows, convert, functools.partial(_duplicate_id, rows.source, mapping), limit)


def _index_headerless(rows: JsonlSource, kind: str, mapping: ColumnMapping, limit: int | None) -> tuple[str, Index]:
    """JSONL has no header: its columns (the union of every record's keys) are known only
    after reading every row, and they decide the kind. So the one pass validates under
    the kind the first records settle, and runs again only when all the columns decide
    otherwise (a file whose early rows lack the option columns)."""
    first: dict[str, None] = {}
    for _, _, record in itertools.islice(rows.scan(), GUESS_ROWS):
        first.update(dict.fromkeys(record) if isinstance(record, dict) else {})
    resolve_kind([], rows.where, kind, mapping)  # an unknown `kind` fails first
    guess = _settled_kind(list(first), kind, mapping) or ("mc" if kind == "auto" else kind)
    index = _index(rows, guess, mapping, limit)
    if index.complete and not index.rejected and not index.unlisted and not index.items:
        raise DataError(f"Expected data rows in {rows.where}, but the file has only blank lines")
    if not index.complete and _settled_kind(list(rows.seen_columns), kind, mapping) is None:
        rows.read_columns()  # stopped at `limit`: the rest of the file's keys may still decide
    final = resolve_kind(list(rows.seen_columns), rows.where, kind, mapping)
    return final, index if final == guess else _index(rows, final, mapping, limit)


def _settled_kind(columns: list[str], kind: str, mapping: ColumnMapping) -> str | None:
    """The kind `columns` resolve to when more columns could not change it; None when they
    cannot tell yet: no columns, a missing column, or "open" only for lack of option columns."""
    if not columns:
        return None
    try:
        resolved = resolve_kind(columns, "", kind, mapping)
    except DataError:
        return None
    return None if kind == "auto" and resolved == "open" else resolved


def _row_to_item(
    raw: Record | RowError, number: int, source: str, mapping: ColumnMapping, kind: str
) -> tuple[Any, Any]:
    """(item, None) for a valid row, (None, RowError naming the source column) otherwise
    (a streamed file's rows, one at a time: `_rows_to_items` of one row)."""
    return _rows_to_items([(number, raw)], source, mapping, kind)[0]


def _rows_to_items(
    rows: list[tuple[int, Record | RowError]], source: str, mapping: ColumnMapping, kind: str
) -> list[tuple[Any, Any]]:
    """(item, None) or (None, RowError naming the source column) per row, in order: the
    columns mapped for the whole chunk (mapping.normalise_rows), then the whole chunk
    validated (schema.validate_records), each stage once, as the module docstring says."""
    parsed = [(number, raw) for number, raw in rows if not isinstance(raw, RowError)]
    records = normalise_rows([raw for _, raw in parsed], mapping, kind)
    checked = iter(validate_records(records, [n for n, _ in parsed], source, kind, mapping.answer_form))
    out = []
    for _, raw in rows:
        item, error = (None, raw) if isinstance(raw, RowError) else next(checked)
        if error is not None and error.field and not isinstance(raw, RowError):
            error = dataclasses.replace(error, field=_source_column(error.field, mapping))
        out.append((item, error))
    return out


def check_limit(limit: int | None) -> None:
    """DataError unless `limit` is None or a positive int (shared by every loader)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise DataError(f"Expected `limit` to be a positive int or None, but got {limit!r}")


def _check_not_empty(report: LoadReport, table: Table) -> None:
    if report.n_rows == 0:
        raise DataError(f"Expected data rows in {table.where}, but it has none")
    if not report.items:
        shown = "\n  ".join(str(e) for e in report.rejected[:MAX_ERRORS_SHOWN])
        more = report.n_rejected - min(MAX_ERRORS_SHOWN, len(report.rejected))
        tail = f"\n  ... and {more} more" if more > 0 else ""
        raise DataError(
            f"Expected at least one valid row in {table.where}, but all "
            f"{report.n_rejected} were rejected:\n  {shown}{tail}"
        )


# ----------------------------------------------------------------------------- public loaders


def load_file(
    path: str | Path,
    kind: str = "auto",
    mapping: ColumnMapping | str = ColumnMapping(),  # noqa: B008 - a frozen dataclass: one shared default is safe
    limit: int | None = None,
    name: str | None = None,
    fmt: str | None = None,
    source: str | None = None,
    stream: bool | None = None,
    encoding: str | None = None,
) -> LoadReport:
    """Load a JSONL / CSV / Parquet file into a LoadReport of MCItems or OpenItems.

    kind: "mc", "open" or "auto" (multiple choice when the choice column(s) exist,
    else open when the answers column exists). `limit` keeps the first N valid items
    in file order. `source` is how messages name the file (default: its own name for
    rejected rows, its path for whole-file errors); the Data page passes the uploaded
    file's name so that no temporary path shows. Raises DataError when the file cannot
    be used at all.

    `stream`: True keeps the items as `stream.LazyItems` (an index of the valid rows,
    each parsed again when used: memory does not grow with the file), False reads them
    into a list; None (the default) streams files that decode to `STREAM_FROM_BYTES` or
    more (`readers.decodes_past`: a file that large, JSON lines whose Python objects are,
    a Parquet file whose rows are). Both
    give the same items and the same rejected rows. A `.json` file holding one array is
    always read whole.

    `encoding`: the text encoding of a CSV or JSON file (default UTF-8); another one is
    converted to UTF-8 once, in a temporary copy, before any reader sees it
    (`encoding.utf8_copy`). Read as UTF-8, a file that is not gets its likely encoding and
    the way to read it in it named: in the DataError, or as the report's `note` above
    the rows it rejected as undecodable.
    """
    path = Path(path).expanduser()
    mapping = ColumnMapping.parse(mapping) if isinstance(mapping, str) else mapping
    if encoding is not None and not is_utf8_name(encoding):  # the default (None) never enters encoding.py
        fmt = detect_format(path, fmt)
        if fmt != "parquet":  # Parquet is UTF-8 by definition
            return _load_converted(path, encoding, kind, mapping, limit, name, fmt, source, stream)
    try:
        report = _load_utf8(path, kind, mapping, limit, name, fmt, source, stream)
    except DataError as exc:
        if detect_format(path, fmt) == "parquet" or "UTF-8" not in str(exc) or not path.is_file():
            raise
        raise DataError(f"{exc}\n{encoding_hint(file_encoding(path))}") from None
    # a plain loop, not any(<generator>): a page's read enters no more frames than it must (tests/test_trace.py)
    for error in report.rejected:
        if error.message == UNDECODABLE and detect_format(path, fmt) != "parquet":
            report.note = encoding_hint(file_encoding(path))
            break
    return report


def _load_utf8(
    path: Path,
    kind: str,
    mapping: ColumnMapping,
    limit: int | None,
    name: str | None,
    fmt: str | None,
    source: str | None,
    stream: bool | None,
) -> LoadReport:
    """`load_file` of a UTF-8 file: read whole, or streamed when it decodes past `STREAM_FROM_BYTES`."""
    fmt = detect_format(path, fmt)
    # A file that small on disk (a byte of CSV or JSON decodes to at most JSON_COST_PER_BYTE) is not read for it.
    size = path.stat().st_size if path.is_file() else 0
    small = fmt != "parquet" and size * JSON_COST_PER_BYTE < STREAM_FROM_BYTES
    if stream or (stream is None and not small and decodes_past(path, fmt, STREAM_FROM_BYTES)):
        rows = open_source(path, fmt, source)
        if rows is not None:
            return _stream_report(rows, kind, mapping, limit, name or path.name)
    table = open_table(path, fmt, source)
    return _build_report(table, kind, mapping, limit, name or path.name)


def _load_converted(
    path: Path,
    encoding: str,
    kind: str,
    mapping: ColumnMapping,
    limit: int | None,
    name: str | None,
    fmt: str,
    source: str | None,
    stream: bool | None,
) -> LoadReport:
    """`load_file` of a file in another encoding: its UTF-8 copy read, with every message
    naming the original. The copy's name goes at once; a streamed report holds the file
    open (`files.OpenFile`), so its rows still read."""
    check_readable(path, source or str(path))
    folder = Path(tempfile.mkdtemp(prefix="calm-utf8-"))
    try:
        copy = utf8_copy(path, encoding, folder)
        return _load_utf8(copy, kind, mapping, limit, name or path.name, fmt, source or path.name, stream)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
