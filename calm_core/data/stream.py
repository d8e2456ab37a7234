"""Streaming datasets: validated in one pass, kept as an index, parsed again on demand.

A file of a few million rows does not fit in memory as items (about a kilobyte each as
Python objects). `LazyItems` is a `Sequence` of the same `MCItem` / `OpenItem` values the
eager loaders return, backed by an index of fixed-width numbers per valid row:

- its row number (messages, and the default id `<source>-<row>`),
- its key: the byte offset of the line (JSONL, CSV) or its 0-based position (Parquet, HF),
- its number of choices (so a trainer sizes its head without reading every row again).

That is `INDEX_BYTES_PER_ROW` bytes a row. `items[i]` seeks to the key and parses and
validates that row again; `items[a:b]` is a view; `take` and `chunks` read many rows with
one open file (Parquet: one row group decoded at a time, the last one kept).

Rejected rows are decided in the indexing pass, exactly as the eager loader decides them:
every row is parsed, mapped and validated once while the index is built (rows are read
one at a time, so peak memory does not grow with the file), and only the valid ones get
an index entry. So `len(items)`, the rejected rows and their reasons are known when the
load returns and are identical to the eager loader's; no row can turn out bad later.
Duplicate ids, which the eager loader catches with a set of every id, are found after
the pass from an 8-byte hash per row (sorted once; rows whose hashes meet are read again
to compare the real ids), so that check costs no per-row Python objects either. What
does grow with the file: the index (and, during the pass, the hashes and their sort:
a few dozen bytes a row at the peak, against about a kilobyte a row for eager items;
tests/test_stream.py counts both). Rejected rows are kept as the eager report keeps
them: the first `REJECTED_KEPT` with their reasons, the rest counted.

JSONL has no header, so its columns (which decide the kind, "mc" or "open") are known
only after the pass; the loader validates under the kind the first rows settle and
validates again only if the whole file decides otherwise (`loaders._index_headerless`).
A `.json` file holding one array is read whole, as before. HF datasets are memory-mapped
Arrow already: a row is read back by its index.

The file is held open while its items live (`files.OpenFile`), so they read the indexed
file even after its name is removed (the studio indexes an upload in a temporary folder); it
must not change in place: each read checks the size and modification time recorded when the
index was built and raises DataError otherwise. The file sources (one per format) are
`calm_core.data.sources`'s; HF datasets' is `calm_core.data.hf.HFSource`.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from calm_core.data.files import READ_ERRORS
from calm_core.data.row_types import KeyedRow, RowSource
from calm_core.data.schema import REJECTED_KEPT, DataError, RowError
from calm_core.data.sources import guarded_scan

STREAM_FROM_BYTES = 32 * 2**20  # files that decode to this much load as LazyItems (loaders.load_file)
CHUNK_ROWS = 4096  # rows parsed per chunk when iterating
INDEX_BYTES_PER_ROW = 8 + 8 + 2  # row number (int64), key (int64), choices (uint16)

Convert = Callable[[Any, int], "tuple[Any, RowError | None]"]  # (raw row, row number) -> (item, error)
Duplicate = Callable[[str, int, int], RowError]  # (id, first row, this row) -> the rejection


# ----------------------------------------------------------------------------- the index


@dataclass
class Index:
    """What the indexing pass found: the valid rows (as LazyItems) and the rejected ones."""

    items: LazyItems
    rejected: list[RowError]  # the first REJECTED_KEPT, in row order
    complete: bool  # False when `limit` stopped the pass before the end of the source
    unlisted: int = 0  # rejected rows past those listed: counted only


class _Rejected:
    """Rejected rows as the pass meets them: the first `REJECTED_KEPT` kept, the rest counted."""

    def __init__(self) -> None:
        self.listed: list[RowError] = []
        self.count = 0

    def add(self, error: RowError) -> None:
        self.count += 1
        if len(self.listed) < REJECTED_KEPT:
            self.listed.append(error)


class _Growing:
    """Per-row numbers appended during the pass: `array` grows without Python objects."""

    def __init__(self) -> None:
        self.rows, self.keys, self.hashes, self.widths = array("q"), array("q"), array("q"), array("H")
        self.rejected_before = array("q")  # rows rejected before each valid one: the count up to a limit

    def add(self, number: int, key: int, item: Any, rejected_before: int) -> None:
        self.rejected_before.append(rejected_before)
        self.rows.append(number)
        self.keys.append(key)
        self.hashes.append(hash(item.id))
        self.widths.append(min(getattr(item, "n_choices", 1), 65535))

    def arrays(self) -> tuple[np.ndarray, ...]:
        """Zero-copy numpy views of the four columns."""
        return tuple(
            np.frombuffer(a, dtype=a.typecode) if len(a) else np.zeros(0, a.typecode)
            for a in (self.rows, self.keys, self.hashes, self.widths)
        )


def build_index(source: RowSource, convert: Convert, duplicate: Duplicate, limit: int | None = None) -> Index:
    """Validate every row of `source` in order (until `limit` valid items with distinct
    ids), keeping an index entry per valid row and the first rejected rows (the rest
    counted): the same verdicts, in the same order, as the eager loader's `_build_report`."""
    rows = guarded_scan(source)
    grown, invalid = _Growing(), _Rejected()
    kept = np.ones(0, bool)
    while True:  # with `limit`: until that many rows survive the duplicate check
        # Ask for at least as many rows again as read so far: rounds stay few however many ids repeat.
        wanted = None if limit is None else max(limit - int(kept.sum()), len(grown.rows))
        complete = _consume(rows, convert, grown, invalid, wanted)
        kept, repeated = _drop_duplicates(source, convert, duplicate, *grown.arrays()[:3])  # over every row so far
        if complete or limit is None or int(kept.sum()) >= limit:
            break
    numbers, keys, _, widths = grown.arrays()
    rejected = sorted(invalid.listed + repeated.listed, key=lambda e: e.row) if repeated.count else invalid.listed
    count = invalid.count + repeated.count
    if limit is not None and int(kept.sum()) > limit:  # read past the limit-th item: forget what came after it
        last = np.flatnonzero(kept)[limit - 1]
        kept[last + 1 :] = False
        rejected = [e for e in rejected if e.row <= numbers[last]]
        count = grown.rejected_before[last] + int((~kept[:last]).sum())  # invalid, then repeated, up to it
    rejected = rejected[:REJECTED_KEPT]
    items = LazyItems(source, convert, numbers[kept].copy(), keys[kept].copy(), widths[kept].copy())
    return Index(items, rejected, complete, unlisted=count - len(rejected))


def _consume(
    rows: Iterator[KeyedRow], convert: Convert, grown: _Growing, rejected: _Rejected, wanted: int | None
) -> bool:
    """Read rows until `wanted` more valid ones (None: all); True when the source ended."""
    found = 0
    for number, key, raw in rows:
        item, error = (None, raw) if isinstance(raw, RowError) else convert(raw, number)
        if item is None:
            rejected.add(error)
            continue
        grown.add(number, key, item, rejected.count)
        found += 1
        if wanted is not None and found >= wanted:
            return False
    return True


def _drop_duplicates(
    source: RowSource, convert: Convert, duplicate: Duplicate, numbers: np.ndarray, keys: np.ndarray, hashes: np.ndarray
) -> tuple[np.ndarray, _Rejected]:
    """(mask of rows kept, rejections of later rows repeating an earlier row's id). Only
    rows whose id hashes collide are read again, a chunk at a time, to compare the ids."""
    kept, late = np.ones(len(hashes), bool), _Rejected()
    if len(hashes) < 2:
        return kept, late
    order = np.argsort(hashes, kind="stable")  # stable: equal hashes stay in file order
    ordered = hashes[order]
    repeated = np.flatnonzero(ordered[1:] == ordered[:-1])
    if not len(repeated):
        return kept, late
    suspects = np.unique(np.concatenate([order[repeated], order[repeated + 1]]))  # positions, file order
    items = LazyItems(source, convert, numbers[suspects], keys[suspects], np.ones(len(suspects), np.uint16))
    first_row: dict[str, int] = {}
    for position, item in zip(suspects, items, strict=True):
        if item.id in first_row:
            kept[position] = False
            late.add(duplicate(item.id, first_row[item.id], int(numbers[position])))
        else:
            first_row[item.id] = int(numbers[position])
    return kept, late


# ----------------------------------------------------------------------------- the sequence


class LazyItems(Sequence[Any]):
    """The valid items of a source, in file order, parsed when asked for.

    Behaves as the list the eager loader returns: `len`, `items[i]` (negative too),
    `items[a:b:c]` (a view), iteration, `==` against any sequence. Picklable (the open
    Parquet file and its cached row group are not pickled).
    """

    def __init__(
        self, source: RowSource, convert: Convert, numbers: np.ndarray, keys: np.ndarray, widths: np.ndarray
    ) -> None:
        self.source, self.convert = source, convert
        self.numbers, self.keys, self.widths = numbers, keys, widths

    def __len__(self) -> int:
        return len(self.numbers)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> LazyItems: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return self.subset(np.arange(len(self))[index])
        position = int(index) + len(self) if int(index) < 0 else int(index)
        if not 0 <= position < len(self):
            raise IndexError(f"Expected an index in 0..{len(self) - 1}, but got {index}")
        return self.take([position])[0]

    def take(self, positions: Sequence[int] | range) -> list[Any]:
        """The items at `positions` (in that order), with one open file."""
        at = np.asarray(positions, dtype=np.int64)
        try:
            raws = self.source.read(self.keys[at]) if len(at) else []
        except READ_ERRORS as exc:
            raise DataError(
                f"Expected {self.source.where} to stay readable while its items are used, but: {exc}"
            ) from None
        return [self._item(raw, int(number)) for raw, number in zip(raws, self.numbers[at], strict=True)]

    def subset(self, positions: Sequence[int] | np.ndarray) -> LazyItems:
        """A LazyItems of the items at `positions` (in that order): an index, no parsing."""
        positions = np.asarray(positions, dtype=np.int64)
        return LazyItems(
            self.source, self.convert, self.numbers[positions], self.keys[positions], self.widths[positions]
        )

    def chunks(self, size: int = CHUNK_ROWS) -> Iterator[list[Any]]:
        """The items in order, `size` at a time: what `iter` walks, at most `size` parsed at once."""
        for start in range(0, len(self), size):
            yield self.take(range(start, min(start + size, len(self))))

    def __iter__(self) -> Iterator[Any]:
        for chunk in self.chunks():
            yield from chunk

    def _item(self, raw: Any, number: int) -> Any:
        item, error = (None, raw) if isinstance(raw, RowError) else self.convert(raw, number)
        if item is None:  # valid when indexed: the file changed under us
            raise DataError(
                f"Expected row {number} of {self.source.where} to read as it did when the data was "
                f"loaded, but now: {error.message if error else 'it does not'}; load it again"
            )
        return item

    @property
    def max_choices(self) -> int:
        """The most options any item has (1 for open items, 0 when empty), from the index."""
        return int(self.widths.max()) if len(self.widths) else 0

    @property
    def index_nbytes(self) -> int:
        """Bytes the index holds: INDEX_BYTES_PER_ROW a row, nothing else grows with the file."""
        return int(self.numbers.nbytes + self.keys.nbytes + self.widths.nbytes)

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence (list, LazyItems) of equal items in the same order."""
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # mutable-sequence semantics, like the list it stands for

    def __repr__(self) -> str:
        return f"LazyItems({len(self)} items of {self.source.where})"


def max_choices(items: Sequence[Any]) -> int:
    """The most options among `items` (1 for open items, 0 when empty); free on LazyItems."""
    if isinstance(items, LazyItems):
        return items.max_choices
    return max((getattr(item, "n_choices", 1) for item in items), default=0)


def subset(items: Sequence[Any], positions: Sequence[int]) -> Sequence[Any]:
    """The items at `positions`: a LazyItems view of LazyItems, a list otherwise."""
    if isinstance(items, LazyItems):
        return items.subset(positions)
    return [items[i] for i in positions]


def chunks(items: Sequence[Any], size: int = CHUNK_ROWS) -> Iterator[Sequence[Any]]:
    """`items` `size` at a time (LazyItems parse each chunk with one open file)."""
    if isinstance(items, LazyItems):
        yield from items.chunks(size)
    else:
        for start in range(0, len(items), size):
            yield items[start : start + size]
