"""Loaders: JSONL, CSV and Parquet files -> validated items (HF datasets: `calm_core.data.hf`).

Every loader runs the same three stages, each exactly once:

1. read raw rows (`calm_core.data.readers`): one dict per row, or a `RowError` for a
   row that cannot even be parsed (bad JSON, undecodable bytes, a CSV row with extra fields);
2. rename columns (`calm_core.data.mapping.ColumnMapping`) into the normalised record the schema expects;
3. validate (`validate_mc_record` / `validate_open_record`); bad rows stay data.

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
from pathlib import Path
from typing import Any

from calm_core.data.guess import GUESS_ROWS
from calm_core.data.mapping import ColumnMapping, choices_value, has_column, lookup, split_list
from calm_core.data.readers import Record, Table, detect_format, guarded, open_table
from calm_core.data.schema import (
    REJECTED_SHOWN,
    UNLABELLED_MC,
    DataError,
    LoadReport,
    RowError,
    validate_mc_record,
    validate_open_record,
)
from calm_core.data.sources import JsonlSource, RowSource, open_source
from calm_core.data.stream import STREAM_FROM_BYTES, Index, build_index

KINDS = ("mc", "open", "auto", UNLABELLED_MC)
MAX_ERRORS_SHOWN = REJECTED_SHOWN  # row errors quoted in a DataError message; the report keeps all of them


# ----------------------------------------------------------------------------- mapping + validation


def _normalise(record: Record, mapping: ColumnMapping, kind: str) -> Record:
    """The record the schema validators expect, built from the mapped columns."""
    out = {
        "question": lookup(record, mapping.question),
        "id": lookup(record, mapping.id) if mapping.id else None,
        "subject": lookup(record, mapping.subject) if mapping.subject else None,
    }
    if kind == UNLABELLED_MC:
        out["choices"] = choices_value(record, mapping)
    elif kind == "mc":
        out["choices"] = choices_value(record, mapping)
        out["answer"] = lookup(record, mapping.answer)
        if mapping.labels:
            out["labels"] = split_list(lookup(record, mapping.labels))
    else:
        out["answers"] = split_list(lookup(record, mapping.answers))
    return out


def _source_column(field_name: str, mapping: ColumnMapping) -> str:
    """Name the column the user knows (`q`) rather than the schema field (`question`)."""
    if field_name == "choices":
        return "|".join(mapping.choice_columns)
    return getattr(mapping, field_name, None) or field_name


class MissingColumns(DataError):
    """A mapped column the file does not have; `columns` names them (`calm eval` tells a
    file without its answer column from one it cannot read)."""

    def __init__(self, columns: list[str], message: str) -> None:
        super().__init__(message)
        self.columns = list(columns)


def _resolve_kind(table: Table, kind: str, mapping: ColumnMapping) -> str:
    if kind not in KINDS:
        raise DataError(f"Expected `kind` to be one of {', '.join(KINDS)}, but got {kind!r}")
    if not table.columns:
        # No row could be parsed at all: the no-valid-rows error explains why.
        return "mc" if kind == "auto" else kind
    if kind == "auto":
        kind = _detect_kind(table, mapping)
    missing = [c for c in mapping.required_columns(kind) if not has_column(table.columns, c)]
    if missing:
        raise MissingColumns(
            missing,
            f"Expected column(s) {', '.join(missing)} in {table.where} for {kind} items, but the "
            f"columns are: {', '.join(table.columns)}. Map each field to one of these columns. "
            f"Mapping used: {mapping.to_text()}",
        )
    return kind


def _detect_kind(table: Table, mapping: ColumnMapping) -> str:
    if all(has_column(table.columns, c) for c in mapping.choice_columns):
        return "mc"
    if has_column(table.columns, mapping.answers):
        return "open"
    raise DataError(
        f"Expected multiple-choice columns ({'|'.join(mapping.choice_columns)}) or open-answer column "
        f"({mapping.answers}) in {table.where}, but the columns are: {', '.join(table.columns)}. "
        f"Choose the option columns in order (choices=opt1|opt2|... or one list column) or the column "
        f"of accepted answers. Mapping used: {mapping.to_text()}"
    )


def _build_report(table: Table, kind: str, mapping: ColumnMapping, limit: int | None, name: str) -> LoadReport:
    """Validate rows in file order until `limit` valid items; keep every rejected row."""
    check_limit(limit)
    kind = _resolve_kind(table, kind, mapping)
    report = LoadReport(name=name, kind=kind)
    first_row_of: dict[str, int] = {}  # id -> row: duplicate ids would merge per-item results
    for number, raw in guarded(table):
        item, error = _row_to_item(raw, number, table.source, mapping, kind)
        if item is not None and item.id in first_row_of:
            item, error = None, _duplicate_id(table.source, mapping, item.id, first_row_of[item.id], number)
        if item is None:
            report.rejected.append(error)
            continue
        first_row_of[item.id] = number
        report.items.append(item)
        if limit is not None and len(report.items) >= limit:
            break
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
        kind = _resolve_kind(place, kind, mapping)
        index = _index(rows, kind, mapping, limit)
    report = LoadReport(name=name, kind=kind, items=index.items, rejected=index.rejected)  # type: ignore[arg-type]
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
    _resolve_kind(Table(rows.source, rows.where, [], ()), kind, mapping)  # an unknown `kind` fails first
    guess = _settled_kind(list(first), kind, mapping) or ("mc" if kind == "auto" else kind)
    index = _index(rows, guess, mapping, limit)
    if index.complete and not index.rejected and not index.items:
        raise DataError(f"Expected data rows in {rows.where}, but the file has only blank lines")
    if not index.complete and _settled_kind(list(rows.seen_columns), kind, mapping) is None:
        rows.read_columns()  # stopped at `limit`: the rest of the file's keys may still decide
    final = _resolve_kind(Table(rows.source, rows.where, list(rows.seen_columns), ()), kind, mapping)
    return final, index if final == guess else _index(rows, final, mapping, limit)


def _settled_kind(columns: list[str], kind: str, mapping: ColumnMapping) -> str | None:
    """The kind `columns` resolve to when more columns could not change it; None when they
    cannot tell yet: no columns, a missing column, or "open" only for lack of option columns."""
    if not columns:
        return None
    try:
        resolved = _resolve_kind(Table("", "", columns, ()), kind, mapping)
    except DataError:
        return None
    return None if kind == "auto" and resolved == "open" else resolved


def _row_to_item(
    raw: Record | RowError, number: int, source: str, mapping: ColumnMapping, kind: str
) -> tuple[Any, Any]:
    """(item, None) for a valid row, (None, RowError naming the source column) otherwise."""
    if isinstance(raw, RowError):
        return None, raw
    record = _normalise(raw, mapping, kind)
    if kind in ("mc", UNLABELLED_MC):
        item, error = validate_mc_record(record, source, number, mapping.answer_form, labelled=kind == "mc")
    else:
        item, error = validate_open_record(record, source, number)
    if error is not None and error.field:
        error = dataclasses.replace(error, field=_source_column(error.field, mapping))
    return item, error


def check_limit(limit: int | None) -> None:
    """DataError unless `limit` is None or a positive int (shared by every loader)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise DataError(f"Expected `limit` to be a positive int or None, but got {limit!r}")


def _check_not_empty(report: LoadReport, table: Table) -> None:
    if report.n_rows == 0:
        raise DataError(f"Expected data rows in {table.where}, but it has none")
    if not report.items:
        shown = "\n  ".join(str(e) for e in report.rejected[:MAX_ERRORS_SHOWN])
        more = len(report.rejected) - MAX_ERRORS_SHOWN
        tail = f"\n  ... and {more} more" if more > 0 else ""
        raise DataError(
            f"Expected at least one valid row in {table.where}, but all "
            f"{len(report.rejected)} were rejected:\n  {shown}{tail}"
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
    into a list; None (the default) streams files of `STREAM_FROM_BYTES` or more. Both
    give the same items and the same rejected rows. A `.json` file holding one array is
    always read whole.
    """
    path = Path(path).expanduser()
    mapping = ColumnMapping.parse(mapping) if isinstance(mapping, str) else mapping
    fmt = detect_format(path, fmt)
    if stream or (stream is None and path.is_file() and path.stat().st_size >= STREAM_FROM_BYTES):
        rows = open_source(path, fmt, source)
        if rows is not None:
            return _stream_report(rows, kind, mapping, limit, name or path.name)
    table = open_table(path, fmt, source)
    return _build_report(table, kind, mapping, limit, name or path.name)
