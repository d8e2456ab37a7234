"""Row sources: one reader per file format, which reads a file whole (`table`, what the
eager loader validates) and row by row (`scan`) and again at chosen rows (`read`), which
is what streaming (`calm_core.data.stream`) indexes and reads back. Both reads walk the
same rows through the same parser (below), so they cannot disagree; what is opened once per
file (a header, a Parquet schema, the held-open file) is `calm_core.data.files`'s.

`FILE_FORMATS` is the one table of formats: a format's name, the suffixes that name its
files, and the reader that opens it. Adding a format is a reader and a line there;
`calm_core.data.readers` opens every file through it. JSON lines and CSV are keyed by
the byte offset of a row, Parquet by its position (one row group decoded at a time, the
last one kept); a `.json` file holding one array is read whole (not a `FileSource`); a
Hugging Face dataset (`HFSource`) is keyed by its index.

A file source holds the indexed file open (`OpenFile`), so its rows read from this very
file even after its name is removed (the studio indexes an upload in a temporary folder);
a change to it in place (size or modification time) raises DataError rather than being misread.
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Protocol, Union

import numpy as np

from calm_core.data.files import (
    BOM,
    READ_ERRORS,
    OpenFile,
    check_columns,
    csv_header,
    open_parquet,
    read_failed,
)
from calm_core.data.parquet_sizes import batch_rows, cell_bytes, declared_bytes, dictionary_text
from calm_core.data.schema import DataError, RowError, is_utf8

UNDECODABLE = "Expected UTF-8 text, but got undecodable bytes"
PARQUET_BATCH = 1024  # at most this many rows decoded at a time (fewer when they decode past MAX_BATCH_BYTES)

Record = dict[str, Any]
Row = tuple[int, Union[Record, RowError]]  # (1-based row number, raw record or why it is unreadable)
KeyedRow = tuple[int, int, Any]  # (1-based row number, key, raw record or RowError)


@dataclass
class Table:
    """Raw rows of one source: the column names present and a (lazy) row iterator."""

    source: str  # the name row errors carry (file name or "hf:<name>")
    where: str  # the full location, for whole-file messages
    columns: list[str]
    rows: Iterable[Row]


class RowSource(Protocol):
    """One file or dataset read row by row (`scan`) and again at chosen rows (`read`)."""

    source: str  # how row errors name it
    where: str  # how whole-file errors name it
    columns: list[str] | None  # known before reading rows (CSV, Parquet, HF); None for JSONL

    def scan(self) -> Iterator[KeyedRow]: ...

    def read(self, keys: Sequence[int] | np.ndarray) -> list[Any]: ...  # ints, or an int64 array


class FileReader(Protocol):
    """What a format's opener gives: its rows read whole. A reader that also streams is
    a `FileSource` (below), and a `RowSource`."""

    def rows(self) -> Iterator[Row]: ...

    def table(self) -> Table: ...


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
            f"Expected a JSON array that decodes to at most {_mib(MAX_JSON_ARRAY_BYTES)} in {where}, but it decodes to "
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
    for batch in _batches(parquet):
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


def parquet_decodes_past(parquet: Any, size: int) -> bool:
    """Whether a Parquet file's rows decode to `size` bytes or more, counted in Arrow (its
    text as dictionaries) without making a row: `loaders.load_file` streams such a file
    however small it is on disk. A damaged file says False: its read says what is wrong."""
    import pyarrow as pa

    total = 0
    if declared_bytes(parquet.metadata, parquet.schema) >= size:  # streamed: its scan checks the budget first
        return True
    try:
        for batch in _batches(parquet):
            total += sum(int(cell_bytes(array).sum()) for array in batch.columns)
            if total >= size:
                return True
    except (pa.ArrowException, OSError):
        return False
    return False


def _batches(parquet: Any) -> Iterator[Any]:
    """One row group after another (a batch across two groups would join two dictionaries,
    which Arrow cannot do for a nested column), each in batches of as many rows as its
    footer says decode to `MAX_BATCH_BYTES` (`parquet_sizes.batch_rows`), at most
    `PARQUET_BATCH`: Arrow decodes a whole batch before any row of it can be counted."""
    meta, schema = parquet.metadata, parquet.schema
    dictionary = set(dictionary_text(meta, schema))
    for group in range(meta.num_row_groups):
        rows = batch_rows(meta, schema, group, dictionary, MAX_BATCH_BYTES, PARQUET_BATCH)
        yield from parquet.iter_batches(batch_size=rows, row_groups=[group])


def pieces(batch: Any, sizes: np.ndarray) -> Iterator[Any]:
    """`batch` in zero-copy slices of at most `MAX_BATCH_BYTES` decoded bytes (at least a row each)."""
    start, total = 0, np.cumsum(sizes)
    while start < len(sizes):
        before = int(total[start - 1]) if start else 0
        stop = max(start + 1, int(np.searchsorted(total, before + MAX_BATCH_BYTES, side="right")))
        yield batch.slice(start, stop - start)
        start = stop


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


def _unkeyed(rows: Iterator[KeyedRow]) -> Iterator[Row]:
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
        return _unkeyed(self.scan())

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
        return some_rows(_unkeyed(self.scan()), self.where)

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


def check_parquet(parquet: Any, budget: Budget) -> None:
    """What a Parquet file's footer alone refuses, before any page is decoded: a fixed-width
    column wider than a cell may be (every value of it decodes to that width), and a file
    that declares more than its budget (`parquet_sizes.declared_bytes`: every chunk's
    uncompressed pages, 8 bytes a value, a fixed-width column's width for every value)."""
    for leaf in parquet.schema:
        if leaf.physical_type == "FIXED_LEN_BYTE_ARRAY":
            budget.cell(max(leaf.length or 0, 0), 1, leaf.path)
    budget.declared(declared_bytes(parquet.metadata, parquet.schema))


class HFSource:
    """A Hugging Face `datasets.Dataset` (memory-mapped Arrow); the key is the row index."""

    def __init__(self, dataset: Any, label: str) -> None:
        self.dataset, self.source, self.where = dataset, label, label
        self.columns: list[str] | None = list(dataset.column_names)

    def scan(self) -> Iterator[KeyedRow]:
        for index, record in enumerate(self.dataset):
            yield index + 1, index, record

    def rows(self) -> Iterator[Row]:
        return _unkeyed(self.scan())

    def table(self) -> Table:
        return Table(self.source, self.where, self.columns or [], self.rows())

    def read(self, keys: Sequence[int] | np.ndarray) -> list[Any]:
        return [self.dataset[int(key)] for key in keys]


# ----------------------------------------------------------------------------- the formats


def is_json_array(path: Path) -> bool:
    """A `.json` file holding one array of objects rather than JSON lines."""
    return path.suffix.lower() == ".json" and starts_with(path, b"[")


def starts_with(path: Path, prefix: bytes) -> bool:
    """Whether the file's first non-blank bytes (after a BOM) are `prefix`."""
    with path.open("rb") as handle:
        return handle.read(4096).removeprefix(BOM).lstrip().startswith(prefix)


# ----------------------------------------------------------------------------- what a file may cost
#
# A file is read against these budgets WHILE it is read, before the expanded data exists:
# a Parquet file's metadata is checked when it is opened, its text columns are decoded as
# dictionaries (a value used a thousand times is held once) and each batch's decoded size is
# computed from them before a Python row is made; a CSV record or a JSON line is read at
# most `MAX_ROW_BYTES` at a time, and a JSON line is counted as Python will hold it
# (`json_cost`) before it is parsed. Every reader, whole and streamed, goes through `Budget`;
# a file that decodes to `stream.STREAM_FROM_BYTES` is streamed (`readers.decodes_past`).
# A refusal is one DataError line naming the limit and the way out (docs/security.md,
# "Upload budgets", has the figures tests/test_budgets.py and tests/test_attacks_uploads.py measure).

# Costs a legitimate user: a spreadsheet wider than 10,000 columns; a dataset uses a handful.
MAX_COLUMNS = 10_000
# Costs: one question, option or answer over 1 MiB of text (about 250,000 tokens, past any
# model's context window). CSV's own stdlib limit (128 KiB) is raised to match (below).
MAX_CELL_BYTES = 2**20
# Costs: one row (a CSV record, a JSON line, a Parquet row) that decodes to over 8 MiB, all
# its cells together (a JSON line: about 2.5 times its text, `json_cost`).
MAX_ROW_BYTES = 8 * 2**20
# Costs nothing: the Python rows made at once from a Parquet batch; a batch over it is made
# a few rows at a time (`parquet_rows`), so it sets peak memory and refuses no file.
MAX_BATCH_BYTES = 64 * 2**20
# Costs: a file that decodes to more than 64 times its own size, past the first 64 MiB (a
# Parquet file of one long text repeated: the shape of a bomb). CSV decodes a byte to at
# most a byte and JSON to at most about 33 (`json_cost`), so only Parquet can reach it; save
# such a file as JSON lines.
MAX_EXPANSION = 64
EXPANSION_FREE_BYTES = 64 * 2**20
# Costs: a `.json` array that decodes to more than 64 MiB (`json_cost`: about a 25 MB
# file of questions), which is parsed whole; JSON lines stream instead.
MAX_JSON_ARRAY_BYTES = 64 * 2**20

csv.field_size_limit(max(csv.field_size_limit(), MAX_ROW_BYTES))  # cells are held to MAX_CELL_BYTES by `Budget`


def json_cost(raw: bytes) -> int:
    """The decoded bytes of JSON text as Python holds it, from its punctuation (no parse):
    64 a list or object, 32 an item (its pointer, a number), 25 a quote (half a string's
    header). Questions decode to about 2.5 times their text; empty lists or objects, the
    worst a parse allows, to 22 or 33 times, which `MAX_ROW_BYTES` and the streaming of
    JSON lines then bound."""
    return len(raw) + 64 * (raw.count(b"[") + raw.count(b"{")) + 32 * raw.count(b",") + 25 * raw.count(b'"')


JSON_COST_PER_BYTE = 65  # the most `json_cost` gives a byte (a "["): a smaller file cannot decode past a budget


def json_decodes_past(path: Path, size: int) -> bool:
    """Whether a JSON-lines file decodes to `size` bytes or more (`json_cost`), read 1 MiB at a time."""
    total = 0
    with path.open("rb") as handle:
        while chunk := handle.read(2**20):
            total += json_cost(chunk)
            if total >= size:
                return True
    return False


def _mib(size: int) -> str:
    return f"{size / 2**20:g} MiB"


class Budget:
    """What one read of one file has spent: each cell and row is checked as it is decoded
    (before Python objects are made of it), and the file's total against `MAX_EXPANSION`
    times its size. Raises one DataError line
    naming the limit and the way out.

    What the budgets cannot see is a hand-made Parquet file whose metadata understates its
    pages (`declared_bytes`): Arrow decodes a batch sized from it before a row is counted.
    An upload's Parquet is therefore decoded in `worker`, a process under a memory limit.
    """

    def __init__(self, path: Path, where: str) -> None:
        self.where = where
        self.allowed = max(EXPANSION_FREE_BYTES, MAX_EXPANSION * path.stat().st_size)
        self.spent = 0

    def cell(self, size: int, number: int, column: str) -> None:
        if size > MAX_CELL_BYTES:
            raise DataError(
                f"Expected cells of at most {_mib(MAX_CELL_BYTES)} in {self.where}, but row {number}'s "
                f"{column} holds {size:,} bytes: shorten it or leave that column out of the file"
            )

    def row(self, size: int, number: int) -> None:
        """A row of `size` decoded bytes: within `MAX_ROW_BYTES`, and within the file's budget."""
        if size > MAX_ROW_BYTES:
            raise row_too_long(self.where, number)
        self.spent += size
        if self.spent > self.allowed:
            raise DataError(
                f"Expected {self.where} to decode to at most {_mib(self.allowed)} ({MAX_EXPANSION} times its size, "
                f"or {_mib(EXPANSION_FREE_BYTES)}), but it decodes to more by row {number}: save it as JSON lines"
            )

    def declared(self, size: int) -> None:
        """A Parquet file whose metadata declares `size` decoded bytes: refused before reading."""
        if size > self.allowed:
            raise DataError(
                f"Expected {self.where} to decode to at most {_mib(self.allowed)} ({MAX_EXPANSION} times its size, "
                f"or {_mib(EXPANSION_FREE_BYTES)}), but its metadata declares {size:,} bytes: save it as JSON lines"
            )


def row_too_long(where: str, number: int) -> DataError:
    return DataError(
        f"Expected rows of at most {_mib(MAX_ROW_BYTES)} in {where}, but row {number} holds more: "
        "shorten its cells or split the row"
    )


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


def guarded_scan(source: RowSource) -> Iterator[KeyedRow]:
    """`source.scan()`, turning a read failure half-way through into one DataError."""
    number = 0
    try:
        for number, key, raw in source.scan():
            yield number, key, raw
    except READ_ERRORS as exc:
        raise read_failed(source.where, number, exc) from None
