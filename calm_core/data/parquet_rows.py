"""A Parquet file's rows, read within the budgets: what its footer alone refuses
(`check_parquet`), its batches with each row's decoded bytes counted before a Python row is
made (`counted_batches`), and those rows made a slice at a time (`parquet_rows`, `pieces`).
Whether a file decodes past a size (`parquet_decodes_past`) is counted the same way. What
the footer says a batch decodes to is `calm_core.data.parquet_sizes`'s; the limits are
`calm_core.data.budgets`'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from calm_core.data.budgets import MAX_BATCH_BYTES, MAX_CELL_BYTES, Budget
from calm_core.data.parquet_sizes import batch_rows, cell_bytes, declared_bytes, dictionary_text
from calm_core.data.rows import Row
from calm_core.data.schema import DataError

PARQUET_BATCH = 1024  # at most this many rows decoded at a time (fewer when they decode past MAX_BATCH_BYTES)


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


def check_parquet(parquet: Any, budget: Budget) -> None:
    """What a Parquet file's footer alone refuses, before any page is decoded: a fixed-width
    column wider than a cell may be (every value of it decodes to that width), and a file
    that declares more than its budget (`parquet_sizes.declared_bytes`: every chunk's
    uncompressed pages, 8 bytes a value, a fixed-width column's width for every value)."""
    for leaf in parquet.schema:
        if leaf.physical_type == "FIXED_LEN_BYTE_ARRAY":
            budget.cell(max(leaf.length or 0, 0), 1, leaf.path)
    budget.declared(declared_bytes(parquet.metadata, parquet.schema))
