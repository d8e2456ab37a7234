"""Row sources: one reader per file format, which reads a file whole (`table`, what the
eager loader validates) and row by row (`scan`) and again at chosen rows (`read`), which
is what streaming (`calm_core.data.stream`) indexes and reads back. Both reads walk the
same rows through the same parser (`calm_core.data.text_rows`, `calm_core.data.parquet_rows`),
so they cannot disagree; what a row is and how rows are walked is `calm_core.data.rows`'s,
what a read may cost `calm_core.data.budgets`'s, and what is opened once per file (a header,
a Parquet schema, the held-open file) is `calm_core.data.files`'s.

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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from calm_core.data.budgets import MAX_COLUMNS, MAX_ROW_BYTES, Budget, check_cells, json_cost, row_too_long
from calm_core.data.files import BOM, OpenFile, check_columns, csv_header, open_parquet
from calm_core.data.parquet_rows import check_parquet, parquet_rows
from calm_core.data.rows import FileReader, KeyedRow, Row, Table, guarded_scan
from calm_core.data.text_rows import bounded_lines, csv_lines, csv_record, json_array_rows, parse_json_line, some_rows

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
