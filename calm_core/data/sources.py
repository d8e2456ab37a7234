"""Row sources: one file or dataset read row by row (`scan`) and again at chosen rows
(`read`), which is what streaming (`calm_core.data.stream`) indexes and reads back.

One source per format, opened through `SOURCE_OPENERS` (format -> opener; its twin for
the eager readers is `readers.TABLE_READERS`): JSON lines and CSV keyed by the byte
offset of a row, Parquet by its position (one row group decoded at a time, the last one
kept); a Hugging Face dataset (`HFSource`) by its index.

A file source holds the indexed file open (`_OpenFile`), so its rows read from this very
file even after its name is removed (the studio indexes an upload in a temporary folder);
a change to it in place (size or modification time) raises DataError rather than being misread.
"""

from __future__ import annotations

import csv
import io
import os
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from calm_core.data.readers import (
    READ_ERRORS,
    check_readable,
    csv_header,
    csv_record,
    format_entry,
    is_json_array,
    open_parquet,
    parquet_rows,
    parse_json_line,
    read_csv,
    read_failed,
    unreadable,
)
from calm_core.data.schema import DataError

KeyedRow = tuple[int, int, Any]  # (1-based row number, key, raw record or RowError)


class RowSource(Protocol):
    """One file or dataset read row by row (`scan`) and again at chosen rows (`read`)."""

    source: str  # how row errors name it
    where: str  # how whole-file errors name it
    columns: list[str] | None  # known before reading rows (CSV, Parquet, HF); None for JSONL

    def scan(self) -> Iterator[KeyedRow]: ...

    def read(self, keys: Sequence[int]) -> list[Any]: ...


# ----------------------------------------------------------------------------- sources


class _OpenFile:
    """The indexed file, held open: rows are read from this very file even after its name
    is gone (the studio indexes an upload in a temporary folder that it then removes), and
    a change to it (size or modification time) is refused rather than misread.

    Reads go through `os.pread` at an offset, so threads sharing the items never move one
    another's position. Pickling keeps the path, size and time; unpickling opens the path.
    """

    def __init__(self, path: Path, where: str, size: int | None = None, mtime_ns: int | None = None) -> None:
        self.path, self.where = path, where
        self.fd = os.open(path, os.O_RDONLY)
        weakref.finalize(self, os.close, self.fd)
        stat = os.fstat(self.fd)
        self.size = stat.st_size if size is None else size
        self.mtime_ns = stat.st_mtime_ns if mtime_ns is None else mtime_ns

    def check(self) -> None:
        stat = os.fstat(self.fd)
        if (stat.st_size, stat.st_mtime_ns) != (self.size, self.mtime_ns):
            raise DataError(
                f"Expected {self.where} to stay unchanged while its items are used, but it changed: load it again"
            )

    def binary_at(self, offset: int) -> io.BufferedReader:
        """A buffered binary reader from byte `offset`, with its own position."""
        return io.BufferedReader(_PositionalReader(self.fd, offset))

    def text_at(self, offset: int) -> io.TextIOWrapper:
        """`read_csv`'s text reader (UTF-8, bad bytes kept as surrogates) from byte `offset`."""
        return io.TextIOWrapper(self.binary_at(offset), encoding="utf-8", errors="surrogateescape", newline="")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_OpenFile, (self.path, self.where, self.size, self.mtime_ns))


class _PositionalReader(io.RawIOBase):
    """A raw reader over a shared file descriptor that reads with `os.pread` from its own position."""

    def __init__(self, fd: int, offset: int) -> None:
        self.fd, self.position = fd, offset

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = os.pread(self.fd, len(buffer), self.position)
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)


class JsonlSource:
    """JSON lines; the key is the byte offset of the line. Columns are the union of the
    keys of every record, so they are only known after the scan (`scan` collects them)."""

    columns = None

    def __init__(self, path: Path, source: str, where: str) -> None:
        self.path, self.source, self.where = path, source, where
        self.file = _OpenFile(path, where)
        self.seen_columns: dict[str, None] = {}

    def scan(self) -> Iterator[KeyedRow]:
        with self.path.open("rb") as handle:  # bytes: one undecodable line must not sink the file
            offset = 0
            for number, raw in enumerate(handle, start=1):
                if raw.strip():
                    record = parse_json_line(raw, self.source, number)
                    if isinstance(record, dict):
                        self.seen_columns.update(dict.fromkeys(record))
                    yield number, offset, record
                offset += len(raw)

    def read_columns(self) -> None:
        """Read every row for its keys alone (`seen_columns`), when a pass stopped early."""
        for _ in guarded_scan(self):
            pass

    def read(self, keys: Sequence[int]) -> list[Any]:
        self.file.check()
        return [parse_json_line(self.file.binary_at(int(key)).readline(), self.source, 0) for key in keys]


class CsvSource:
    """CSV with a header; the key is the position of the record's first line (a quoted
    cell may span lines). Reads through `readers.csv_record`, as the eager reader does."""

    def __init__(self, path: Path, source: str, where: str, header: list[str]) -> None:
        self.path, self.source, self.where, self.columns = path, source, where, header
        self.file = _OpenFile(path, where)

    def scan(self) -> Iterator[KeyedRow]:
        with read_csv(self.path) as handle:
            starts: list[int] = []  # positions of the lines the reader took for the record it is building

            def lines() -> Iterator[str]:
                while True:
                    position = handle.tell()  # allowed: readline, not iteration, moves the handle
                    line = handle.readline()
                    if not line:
                        return
                    starts.append(position)
                    yield line

            reader = csv.reader(lines())
            next(reader, None)  # the header
            starts.clear()
            for number, cells in enumerate(reader, start=1):
                key = starts[0]
                starts.clear()
                record = csv_record(number, cells, self.columns, self.source)
                if record is not None:
                    yield number, key, record

    def read(self, keys: Sequence[int]) -> list[Any]:
        self.file.check()
        return [csv_record(0, next(csv.reader(self.file.text_at(int(key)))), self.columns, self.source) for key in keys]


class ParquetSource:
    """Parquet; the key is the row's 0-based position. A read decodes the row groups that
    hold the wanted rows, one at a time, keeping the last one (batches drawn from a
    shuffled file touch a group each; sequential chunks reuse it)."""

    def __init__(self, path: Path, source: str, where: str, parquet: Any) -> None:
        self.path, self.source, self.where = path, source, where
        self.parquet = parquet
        self.columns = list(parquet.schema_arrow.names)
        self.file = _OpenFile(path, where)
        sizes = [parquet.metadata.row_group(g).num_rows for g in range(parquet.metadata.num_row_groups)]
        self.group_starts = np.cumsum([0] + sizes)
        self._cached: tuple[int, Any] | None = None

    def scan(self) -> Iterator[KeyedRow]:
        for number, record in parquet_rows(self.parquet, self.where):
            yield number, number - 1, record

    def read(self, keys: Sequence[int]) -> list[Any]:
        self.file.check()
        keys = np.asarray(keys, dtype=np.int64)
        groups = np.searchsorted(self.group_starts, keys, side="right") - 1
        out: list[Any] = [None] * len(keys)
        for group in np.unique(groups):  # ascending: sequential reads stay sequential
            where = np.flatnonzero(groups == group)
            table = self._group(int(group))
            for position, local in zip(where, keys[where] - self.group_starts[group], strict=True):
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
        import pyarrow.parquet as pq

        self.__dict__.update(state)
        self.parquet = pq.ParquetFile(self.path)


class HFSource:
    """A Hugging Face `datasets.Dataset` (memory-mapped Arrow); the key is the row index."""

    def __init__(self, dataset: Any, label: str) -> None:
        self.dataset, self.source, self.where = dataset, label, label
        self.columns = list(dataset.column_names)

    def scan(self) -> Iterator[KeyedRow]:
        for index, record in enumerate(self.dataset):
            yield index + 1, index, record

    def read(self, keys: Sequence[int]) -> list[Any]:
        return [self.dataset[int(key)] for key in keys]


def open_source(path: Path, fmt: str, source: str | None = None) -> RowSource | None:
    """The row source of a JSONL, CSV or Parquet file, or None for a `.json` file holding
    one array (read whole). Whole-file problems raise the DataError `open_table` raises."""
    where = source or str(path)
    check_readable(path, where)
    opener = format_entry(SOURCE_OPENERS, fmt)
    try:
        return opener(path, source or path.name, where)
    except READ_ERRORS as exc:
        raise unreadable(fmt, where, exc) from None


def _jsonl_source(path: Path, name: str, where: str) -> RowSource | None:
    return None if is_json_array(path) else JsonlSource(path, name, where)


SOURCE_OPENERS: dict[str, Callable[[Path, str, str], RowSource | None]] = {  # format -> streaming opener
    "jsonl": _jsonl_source,
    "csv": lambda path, name, where: CsvSource(path, name, where, csv_header(path, where)),
    "parquet": lambda path, name, where: ParquetSource(path, name, where, open_parquet(path, where)),
}


def guarded_scan(source: RowSource) -> Iterator[KeyedRow]:
    """`source.scan()`, turning a read failure half-way through into one DataError."""
    number = 0
    try:
        for number, key, raw in source.scan():
            yield number, key, raw
    except READ_ERRORS as exc:
        raise read_failed(source.where, number, exc) from None
