"""Row sources: one reader per file format, which reads a file whole (`table`, what the
eager loader validates) and row by row (`scan`) and again at chosen rows (`read`), which
is what streaming (`calm_core.data.stream`) indexes and reads back. Both reads walk the
same rows through the same parser (below), so they cannot disagree; what is opened once per
file (a header, a Parquet schema, the held-open file) is `calm_core.data.files`'s. A row
is read, parsed and counted (`Budget`) in this one module; `readers.FILE_FORMATS` opens them.

A file source holds the indexed file open (`OpenFile`), so its rows read from this very
file even after its name is removed (the studio indexes an upload in a temporary folder);
a change to it in place (size or modification time) raises DataError rather than being misread.
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from calm_core.data.files import READ_ERRORS, OpenFile, check_columns, open_parquet, read_failed
from calm_core.data.limits import (
    EXPANSION_FREE_BYTES,
    MAX_CELL_BYTES,
    MAX_COLUMNS,
    MAX_EXPANSION,
    MAX_JSON_ARRAY_BYTES,
    MAX_ROW_BYTES,
    mib,
    row_too_long,
)
from calm_core.data.parquet_batches import batches, check_parquet, pieces
from calm_core.data.parquet_sizes import cell_bytes
from calm_core.data.row_types import KeyedRow, Record, Row, RowSource
from calm_core.data.schema import DataError, RowError, is_utf8

UNDECODABLE = "Expected UTF-8 text, but got undecodable bytes"


@dataclass
class Table:
    """Raw rows of one source: the column names present and a (lazy) row iterator."""

    source: str  # the name row errors carry (file name or "hf:<name>")
    where: str  # the full location, for whole-file messages
    columns: list[str]
    rows: Iterable[Row]


# ----------------------------------------------------------------------------- one row at a time


def text_bytes(value: Any) -> int:
    """Decoded bytes of a cell's text: a string, or the strings of a list (a JSON row's
    `choices`); exact UTF-8 only for a string long enough to matter."""
    if isinstance(value, str):
        return len(value) if len(value) <= MAX_CELL_BYTES // 4 else len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, list):
        return sum(text_bytes(v) for v in value if isinstance(v, str))
    return 0


def check_cells(record: Record, number: int, budget: Budget) -> None:
    """Every cell of a parsed text row (CSV, JSON) within `MAX_CELL_BYTES`."""
    for column, value in record.items():
        budget.cell(text_bytes(value), number, column)


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


def parquet_rows(parquet: Any, where: str, budget: Budget) -> Iterator[Row]:
    """The rows of a Parquet file, from its counted batches (`counted_batches`), made into
    Python rows at most `MAX_BATCH_BYTES` of them at once."""
    import pyarrow as pa

    number = 0
    try:
        for batch, sizes in counted_batches(parquet, budget):
            for piece in pieces(batch, sizes):
                for record in piece.to_pylist():  # plain Python values: lists stay lists
                    number += 1
                    yield number, record
    except pa.ArrowException as exc:  # a damaged data page: the rows after it cannot be located
        raise DataError(f"Expected readable data in {where}, but reading after row {number} failed: {exc}") from None


def counted_batches(parquet: Any, budget: Budget) -> Iterator[tuple[Any, np.ndarray]]:
    """A Parquet file's batches (`PARQUET_BATCH` rows at most) with each row's decoded
    bytes. A batch is decoded with its text as dictionaries (`files.open_parquet`), so its
    rows' sizes are counted (`cell_bytes`) and checked against the budget before anything
    is made of it (Python rows, or `worker`'s honest copy)."""
    number = 0
    for batch in batches(parquet):
        sizes = np.zeros(batch.num_rows, np.int64)
        for column, array in zip(batch.schema.names, batch.columns, strict=True):
            cells = cell_bytes(array)
            if len(cells) and cells.max() > MAX_CELL_BYTES:
                first = int(np.argmax(cells > MAX_CELL_BYTES))
                budget.cell(int(cells[first]), number + first + 1, column)
            sizes += cells
        for row, size in enumerate(sizes.tolist(), start=number + 1):
            budget.row(size, row)
        number += batch.num_rows
        yield batch, sizes


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


# ----------------------------------------------------------------------------- the readers


def unkeyed(rows: Iterator[KeyedRow]) -> Iterator[Row]:
    """A scan's rows without their keys: what a whole read yields."""
    for number, _, record in rows:
        yield number, record


class FileSource:
    """The base of a streaming file reader, which gives `scan` and `read`. What every one
    shares: its rows without keys make the whole read (`rows`, `table`), and streaming
    holds the file open (`hold`, by `readers.open_source` before the index is built) so
    that `read` finds its rows in this very file. A whole read never holds it."""

    columns: list[str] | None

    def __init__(self, path: Path, source: str, where: str) -> None:
        self.path, self.source, self.where = path, source, where
        self.file: OpenFile | None = None

    def scan(self) -> Iterator[KeyedRow]:
        raise NotImplementedError

    def hold(self) -> None:
        self.file = OpenFile(self.path, self.where)

    def held(self) -> OpenFile:
        """The held file, checked unchanged since it was opened."""
        if self.file is None:
            raise RuntimeError(f"{type(self).__name__}.read needs the file held: call hold() before the scan")
        self.file.check()
        return self.file

    def rows(self) -> Iterator[Row]:
        return unkeyed(self.scan())

    def table(self) -> Table:
        return Table(self.source, self.where, self.columns or [], self.rows())


class JsonlSource(FileSource):
    """JSON lines; the key is the byte offset of the line. Columns are the union of the
    keys of every record, so they are only known after the scan (`scan` collects them),
    and a whole read reads every row before it gives its table."""

    columns: list[str] | None = None

    def __init__(self, path: Path, source: str, where: str) -> None:
        super().__init__(path, source, where)
        self.seen_columns: dict[str, None] = {}

    def scan(self) -> Iterator[KeyedRow]:
        budget = Budget(self.path, self.where)
        with self.path.open("rb") as handle:  # bytes: one undecodable line must not sink the file
            offset = 0
            for number, raw in enumerate(bounded_lines(handle, self.where), start=1):
                if raw.strip():
                    budget.row(json_cost(raw), number)
                    record = parse_json_line(raw, self.source, number)
                    if isinstance(record, dict):
                        check_cells(record, number, budget)
                        self.seen_columns.update(dict.fromkeys(record))
                        if len(self.seen_columns) > MAX_COLUMNS:
                            check_columns(len(self.seen_columns), self.where, MAX_COLUMNS)
                    yield number, offset, record
                offset += len(raw)

    def rows(self) -> Iterator[Row]:
        return some_rows(unkeyed(self.scan()), self.where)

    def table(self) -> Table:
        rows = list(self.rows())  # the columns are known once every row is read
        return Table(self.source, self.where, list(self.seen_columns), rows)

    def read_columns(self) -> None:
        """Read every row for its keys alone (`seen_columns`), when a pass stopped early."""
        for _ in guarded_scan(self):
            pass

    def read(self, keys: Sequence[int] | np.ndarray) -> list[Any]:
        file = self.held()
        return [parse_json_line(file.binary_at(int(key)).readline(MAX_ROW_BYTES), self.source, 0) for key in keys]


class CsvSource(FileSource):
    """CSV with a header; the key is the byte offset of the record's first line (a quoted
    cell may span lines). Every row goes through `csv_record`."""

    def __init__(self, path: Path, source: str, where: str, header: list[str]) -> None:
        super().__init__(path, source, where)
        self.columns = header

    def scan(self) -> Iterator[KeyedRow]:
        budget = Budget(self.path, self.where)
        with self.path.open("rb") as handle:
            starts: list[int] = []  # offsets of the lines the reader took for the record it is building
            ends = [0]  # where the last line taken ends
            number = 0

            def lines() -> Iterator[str]:
                for offset, line in csv_lines(handle):
                    starts.append(offset)
                    ends[0] = offset + len(line)
                    if ends[0] - starts[0] > MAX_ROW_BYTES:  # a record is refused before it is held whole
                        raise row_too_long(self.where, number + 1)
                    yield line

            reader = csv.reader(lines())
            next(reader, None)  # the header
            starts.clear()
            for number, cells in enumerate(reader, start=1):  # `lines` reads `number`
                key = starts[0]
                starts.clear()
                budget.row(ends[0] - key, number)
                record = csv_record(number, cells, self.columns, self.source)
                if isinstance(record, dict):
                    check_cells(record, number, budget)
                if record is not None:
                    yield number, key, record

    def read(self, keys: Sequence[int] | np.ndarray) -> list[Any]:
        file = self.held()
        return [csv_record(0, next(csv.reader(file.text_at(int(key)))), self.columns, self.source) for key in keys]


class ParquetSource(FileSource):
    """Parquet; the key is the row's 0-based position. A read decodes the row groups that
    hold the wanted rows, one at a time, keeping the last one (batches drawn from a
    shuffled file touch a group each; sequential chunks reuse it)."""

    def __init__(self, path: Path, source: str, where: str, parquet: Any) -> None:
        super().__init__(path, source, where)
        self.parquet = parquet
        self.columns = list(parquet.schema_arrow.names)
        sizes = [parquet.metadata.row_group(g).num_rows for g in range(parquet.metadata.num_row_groups)]
        self.group_starts = np.cumsum([0] + sizes)
        self._cached: tuple[int, Any] | None = None

    def scan(self) -> Iterator[KeyedRow]:
        budget = Budget(self.path, self.where)
        check_parquet(self.parquet, budget)
        for number, record in parquet_rows(self.parquet, self.where, budget):
            yield number, number - 1, record

    def read(self, keys: Sequence[int] | np.ndarray) -> list[Any]:
        self.held()
        rows = np.asarray(keys, dtype=np.int64)
        groups = np.searchsorted(self.group_starts, rows, side="right") - 1
        out: list[Any] = [None] * len(rows)
        for group in np.unique(groups):  # ascending: sequential reads stay sequential
            where = np.flatnonzero(groups == group)
            table = self._group(int(group))
            for position, local in zip(where, rows[where] - self.group_starts[group], strict=True):
                out[position] = table.slice(int(local), 1).to_pylist()[0]  # zero-copy slice: no compute kernels
        return out

    def _group(self, group: int) -> Any:
        if self._cached is None or self._cached[0] != group:
            self._cached = None  # let the previous group go before decoding the next
            self._cached = (group, self.parquet.read_row_group(group))
        return self._cached[1]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "parquet": None, "_cached": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.parquet = open_parquet(self.path, self.where)  # its text as dictionaries, as when indexed


def json_cost(raw: bytes) -> int:
    """The decoded bytes of JSON text as Python holds it, from its punctuation (no parse):
    64 a list or object, 32 an item (its pointer, a number), 25 a quote (half a string's
    header). Questions decode to about 2.5 times their text; empty lists or objects, the
    worst a parse allows, to 22 or 33 times, which `MAX_ROW_BYTES` and the streaming of
    JSON lines then bound."""
    return len(raw) + 64 * (raw.count(b"[") + raw.count(b"{")) + 32 * raw.count(b",") + 25 * raw.count(b'"')


class Budget:
    """What one read of one file has spent: each cell and row is checked as it is decoded
    (before Python objects are made of it), and the file's total against `MAX_EXPANSION` times
    its size. Raises one DataError line naming the limit and the way out (`parquet_batches`: a lying footer)."""

    def __init__(self, path: Path, where: str) -> None:
        self.where = where
        self.allowed = max(EXPANSION_FREE_BYTES, MAX_EXPANSION * path.stat().st_size)
        self.spent = 0

    def cell(self, size: int, number: int, column: str) -> None:
        if size > MAX_CELL_BYTES:
            raise DataError(
                f"Expected cells of at most {mib(MAX_CELL_BYTES)} in {self.where}, but row {number}'s "
                f"{column} holds {size:,} bytes: shorten it or leave that column out of the file"
            )

    def row(self, size: int, number: int) -> None:
        """A row of `size` decoded bytes: within `MAX_ROW_BYTES`, and within the file's budget."""
        if size > MAX_ROW_BYTES:
            raise row_too_long(self.where, number)
        self.spent += size
        if self.spent > self.allowed:
            raise DataError(
                f"Expected {self.where} to decode to at most {mib(self.allowed)} ({MAX_EXPANSION} times its size, "
                f"or {mib(EXPANSION_FREE_BYTES)}), but it decodes to more by row {number}: save it as JSON lines"
            )

    def declared(self, size: int) -> None:
        """A Parquet file whose metadata declares `size` decoded bytes: refused before reading."""
        if size > self.allowed:
            raise DataError(
                f"Expected {self.where} to decode to at most {mib(self.allowed)} ({MAX_EXPANSION} times its size, "
                f"or {mib(EXPANSION_FREE_BYTES)}), but its metadata declares {size:,} bytes: save it as JSON lines"
            )


def guarded_scan(source: RowSource) -> Iterator[KeyedRow]:
    """`source.scan()`, turning a read failure half-way through into one DataError."""
    number = 0
    try:
        for number, key, raw in source.scan():
            yield number, key, raw
    except READ_ERRORS as exc:
        raise read_failed(source.where, number, exc) from None
