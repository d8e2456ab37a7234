"""The text formats' rows, parsed one at a time: a JSON line, a `.json` array read whole, a CSV
record. The whole read and the streamed one (`calm_core.data.sources`) both go through these
parsers, so they cannot disagree; each row is held to the read budgets
(`calm_core.data.budgets`) before it is parsed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from calm_core.data.budgets import (
    MAX_COLUMNS,
    MAX_JSON_ARRAY_BYTES,
    MAX_ROW_BYTES,
    Budget,
    check_cells,
    json_cost,
    mib,
    row_too_long,
)
from calm_core.data.files import check_columns
from calm_core.data.rows import Record, Row
from calm_core.data.schema import DataError, RowError, is_utf8

UNDECODABLE = "Expected UTF-8 text, but got undecodable bytes"


def bounded_lines(handle: Any, where: str) -> Iterator[bytes]:
    """The lines of a binary handle (split at \\n), each read at most `MAX_ROW_BYTES` at a
    time: a longer one is refused before it is held whole."""
    number = 0
    while line := handle.readline(MAX_ROW_BYTES + 1):
        number += 1
        if len(line) > MAX_ROW_BYTES:
            raise row_too_long(where, number)
        yield line


def some_rows(rows: Iterator[Row], where: str) -> Iterator[Row]:
    """`rows`, or a DataError once they end when there was none (a file of blank lines)."""
    empty = True
    for row in rows:
        empty = False
        yield row
    if empty:
        raise DataError(f"Expected data rows in {where}, but the file has only blank lines")


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


def json_array_rows(path: Path, source: str, where: str) -> Iterator[Row]:
    """A .json file holding one array of objects; rows are 1-based array positions. It is
    parsed whole, so it may decode to at most `MAX_JSON_ARRAY_BYTES` (`json_cost`)."""
    size = path.stat().st_size
    data = path.read_bytes() if size <= MAX_JSON_ARRAY_BYTES else b""  # a larger file is not read
    cost = json_cost(data) if data else size
    if cost > MAX_JSON_ARRAY_BYTES:
        raise DataError(
            f"Expected a JSON array that decodes to at most {mib(MAX_JSON_ARRAY_BYTES)} in {where}, but it decodes to "
            f"{cost:,} bytes: save it as JSON lines (one object a line), which are read a row at a time"
        )
    try:
        values = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise DataError(f"Expected a JSON array of objects in {where}, but it is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        message = f"Expected a JSON array of objects in {where}, but got {exc.msg} at line {exc.lineno}"
        raise DataError(message) from None
    except (ValueError, RecursionError):  # a number past 4300 digits, nesting past Python's stack
        message = f"Expected a JSON array of objects in {where}, but it holds a number or nesting too large to read"
        raise DataError(message) from None
    budget, columns = Budget(path, where), set[str]()
    for number, value in enumerate(values, start=1):
        if isinstance(value, dict):
            check_cells(value, number, budget)
            columns.update(value)
            if len(columns) > MAX_COLUMNS:
                check_columns(len(columns), where, MAX_COLUMNS)
            yield number, value
        else:
            yield number, RowError(source, number, "", f"Expected a JSON object, but got {_json_type(value)}")


def csv_lines(handle: Any) -> Iterator[tuple[int, str]]:
    """(byte offset, text) of every line of a binary handle, as `read_csv`'s text handle
    splits them (at \\n, \\r\\n and a lone \\r) and decodes them (bad bytes kept as
    surrogates). The offset is where a row can be read again (`sources.CsvSource.read`):
    a text handle's `tell()` is an opaque cookie, not a position."""
    offset = 0
    for chunk in iter(lambda: handle.readline(MAX_ROW_BYTES + 1), b""):  # split at \n; a lone \r below
        for raw in chunk.splitlines(keepends=True) if b"\r" in chunk else (chunk,):
            yield offset, raw.decode("utf-8", "surrogateescape")
            offset += len(raw)


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
