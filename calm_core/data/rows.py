"""What every reader gives and how its rows are walked: a row (`Row`, numbered; `KeyedRow`,
with the key that finds it again), a whole read (`Table`), the two reader shapes (`RowSource`
for streaming, `FileReader` for a whole read), and the walks that turn a read failure half-way
through into one DataError (`guarded`, `guarded_scan`) or hand rows on in chunks
(`row_chunks`). The readers themselves are `calm_core.data.sources`'s.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Iterable, Protocol, Union

import numpy as np

from calm_core.data.files import READ_ERRORS, read_failed
from calm_core.data.schema import RowError

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
    a `sources.FileSource`, and a `RowSource`."""

    def rows(self) -> Iterator[Row]: ...

    def table(self) -> Table: ...


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


def guarded_scan(source: RowSource) -> Iterator[KeyedRow]:
    """`source.scan()`, turning a read failure half-way through into one DataError."""
    number = 0
    try:
        for number, key, raw in source.scan():
            yield number, key, raw
    except READ_ERRORS as exc:
        raise read_failed(source.where, number, exc) from None
