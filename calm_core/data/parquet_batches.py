"""A Parquet file read a batch at a time: what its footer alone refuses (`check_parquet`),
its row groups in batches sized from the footer (`parquet_sizes.batch_rows`), a batch
sliced into pieces Python rows can be made of, and whether the whole file decodes past a
size. `calm_core.data.sources` counts each batch's
rows against the read budgets; `calm_core.data.worker` copies them.

What the budgets cannot see is a hand-made Parquet file whose metadata understates its
pages (`parquet_sizes.declared_bytes`): Arrow decodes a batch sized from it before a row is
counted. An upload's Parquet is therefore decoded in `worker`, a process under a memory limit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from calm_core.data.limits import MAX_BATCH_BYTES, PARQUET_BATCH
from calm_core.data.parquet_sizes import batch_rows, cell_bytes, declared_bytes, dictionary_text


class FooterBudget(Protocol):
    """What a footer is charged against (`sources.Budget` is one): the widest cell, the file's total."""

    def cell(self, size: int, number: int, column: str) -> None: ...

    def declared(self, size: int) -> None: ...


def check_parquet(parquet: Any, budget: FooterBudget) -> None:
    """What a Parquet file's footer alone refuses, before any page is decoded: a fixed-width
    column wider than a cell may be (every value of it decodes to that width), and a file
    that declares more than its budget (`parquet_sizes.declared_bytes`: every chunk's
    uncompressed pages, 8 bytes a value, a fixed-width column's width for every value)."""
    for leaf in parquet.schema:
        if leaf.physical_type == "FIXED_LEN_BYTE_ARRAY":
            budget.cell(max(leaf.length or 0, 0), 1, leaf.path)
    budget.declared(declared_bytes(parquet.metadata, parquet.schema))


def parquet_decodes_past(parquet: Any, size: int) -> bool:
    """Whether a Parquet file's rows decode to `size` bytes or more, counted in Arrow (its
    text as dictionaries) without making a row: `loaders.load_file` streams such a file
    however small it is on disk. A damaged file says False: its read says what is wrong."""
    import pyarrow as pa

    total = 0
    if declared_bytes(parquet.metadata, parquet.schema) >= size:  # streamed: its scan checks the budget first
        return True
    try:
        for batch in batches(parquet):
            total += sum(int(cell_bytes(array).sum()) for array in batch.columns)
            if total >= size:
                return True
    except (pa.ArrowException, OSError):
        return False
    return False


def batches(parquet: Any) -> Iterator[Any]:
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
