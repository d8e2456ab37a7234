"""Files: what is checked and opened once per file, before or beside its rows.

A file must exist, be a file and hold bytes (`check_readable`); a CSV's header and a
Parquet file's schema are read once (`csv_header`, `open_parquet`); a file being
streamed is held open (`OpenFile`) so its rows read from this very file even after its
name is removed, and a change to it in place is refused rather than misread. The rows
themselves are `calm_core.data.sources`'s. A file that cannot be read gives one
`DataError` naming it as the person knows it (`where`).
"""

from __future__ import annotations

import csv
import io
import os
import weakref
from pathlib import Path
from typing import Any

from calm_core.data.parquet_sizes import dictionary_text
from calm_core.data.schema import DataError, is_utf8

BOM = b"\xef\xbb\xbf"  # Excel and Notepad start UTF-8 files with it
READ_ERRORS = (OSError, UnicodeDecodeError, csv.Error)  # a file failing to read part-way


def read_csv(path: Path) -> Any:
    """A text handle for csv.reader: undecodable bytes become lone surrogates (flagged
    per row, below) instead of one UnicodeDecodeError that sinks the whole file."""
    return path.open(newline="", encoding="utf-8-sig", errors="surrogateescape")  # -sig: Excel writes a BOM


def csv_header(path: Path, where: str, max_columns: int, max_bytes: int) -> list[str]:
    """The CSV's column names; DataError when there are none, more than `max_columns`,
    more than `max_bytes` of them, they are not UTF-8 or repeat (`sources` holds the limits).
    Every check is linear in the number of columns."""
    with read_csv(path) as handle:
        header = [h.strip() for h in next(csv.reader(_bounded_lines(handle, max_bytes, where)), [])]
    if not any(header):
        raise DataError(f"Expected a header row in {where}, but the file has none")
    check_columns(len(header), where, max_columns)
    if not all(is_utf8(h) for h in header):
        raise DataError(f"Expected a UTF-8 header row in {where}, but it holds undecodable bytes (save it as UTF-8)")
    check_distinct(header, where)  # dict(zip(header, cells)) would keep the last one silently
    return header


def check_distinct(names: list[str], where: str) -> None:
    """DataError naming each repeated column name's positions (1-based, as a spreadsheet
    counts them) and the fix: a record keeps one value per name, so the others would be
    lost without a word."""
    positions: dict[str, list[int]] = {}
    for column, name in enumerate(names, start=1):
        if name:
            positions.setdefault(name, []).append(column)
    twice = [(name, at) for name, at in positions.items() if len(at) > 1]
    if twice:
        name, at = twice[0]
        raise DataError(
            f"Expected distinct column names in {where}, but {_repeats(twice)}: rename all but one of each "
            f"(say column {at[-1]} to {name}_{len(at)}) and map the one that holds what you mean"
        )


def _repeats(twice: list[tuple[str, list[int]]], shown: int = 3) -> str:
    """'B is at columns 2 and 5, C at columns 3, 4 and 9 (and 2 more names)': the first repeated names."""
    said: list[str] = []
    for name, at in twice[:shown]:
        columns = ", ".join(str(c) for c in at[:-1][:9]) + (", ..." if len(at) > 10 else "") + f" and {at[-1]}"
        said.append(f"{name} {'is ' if not said else ''}at columns {columns}")
    more = f" (and {len(twice) - shown} more names)" if len(twice) > shown else ""
    return ", ".join(said) + more


def _bounded_lines(handle: Any, max_bytes: int, where: str) -> Any:
    """The lines of a text handle for the header's csv.reader, refused once they pass `max_bytes`
    (a header line is never read whole when it is longer)."""
    read = 0
    while line := handle.readline(max_bytes + 1):
        read += len(line)
        if read > max_bytes:
            raise DataError(
                f"Expected a header row of at most {max_bytes / 2**20:g} MiB in {where}, but it is longer: "
                "keep only the columns the dataset uses"
            )
        yield line


def check_columns(count: int, where: str, max_columns: int) -> None:
    """DataError when a file has more than `max_columns` columns (`limits.MAX_COLUMNS`)."""
    if count > max_columns:
        raise DataError(
            f"Expected at most {max_columns:,} columns in {where}, but it has {count:,}: "
            "keep only the columns the dataset uses (question, options, answer, id, subject)"
        )


def open_parquet(path: Path, where: str, max_columns: int | None = None) -> Any:
    """A `pyarrow.parquet.ParquetFile` with at least one row (and at most `max_columns`
    leaf columns); DataError otherwise. Its text columns read as dictionaries: a value a
    file repeats is held once however many rows use it, and `sources` counts its decoded
    size before any row is made of it (`sources.parquet_rows`). Text stored with a DELTA
    encoding reads as plain text, since Arrow cannot decode it to a dictionary
    (`parquet_sizes.dictionary_text`); its batches are sized for that."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        if max_columns is not None:
            check_columns(parquet.metadata.num_columns, where, max_columns)
        check_distinct(list(parquet.schema_arrow.names), where)  # a record would keep the last one silently
        texts = dictionary_text(parquet.metadata, parquet.schema)
        if texts:
            parquet = pq.ParquetFile(path, read_dictionary=texts)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"Expected a Parquet file at {where}, but could not read it: {reason(exc)}") from None
    if parquet.metadata.num_rows == 0:
        raise DataError(f"Expected data rows in {where}, but the Parquet file has none")
    return parquet


def reason(exc: BaseException) -> str:
    """The human part of an exception: "Permission denied", not "PermissionError: [Errno 13] ..."."""
    return getattr(exc, "strerror", None) or str(exc) or "unknown error"


def read_failed(where: str, number: int, exc: BaseException) -> DataError:
    """The DataError for a file that could not be read past row `number`."""
    return DataError(f"Expected readable data in {where}, but reading after row {number} failed: {reason(exc)}")


def unreadable(fmt: str, where: str, exc: BaseException) -> DataError:
    """The DataError for a file that could not be opened as `fmt`."""
    return DataError(f"Expected a readable {fmt} file at {where}, but could not read it: {reason(exc)}")


class OpenFile:
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
        return (OpenFile, (self.path, self.where, self.size, self.mtime_ns))


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
