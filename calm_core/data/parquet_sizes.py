"""What a Parquet file's footer says its rows decode to, before a page of it is read.

Arrow decodes a batch's pages before any row of the batch can be counted, so what a
batch will cost must be known from the metadata, and a batch sized from it: a batch is
so many rows as fit in a byte budget, not a fixed number of rows. Per column chunk:

- a fixed-width binary column (FIXED_LEN_BYTE_ARRAY) decodes every value to its declared
  width, dictionary-encoded or not: one 1 MiB value used by 1,024 rows is 1 KB on disk
  and 1 GiB decoded (Arrow reads only variable-width text as a dictionary);
- text read as a dictionary (`dictionary_text`) decodes its dictionary once (its pages,
  counted by the uncompressed size) and an index per value;
- text stored with a DELTA encoding cannot be read as a dictionary (Arrow has no such
  decoder), and a DELTA_BYTE_ARRAY value repeats a prefix of the one before it: one
  value can reach its chunk's whole uncompressed size, so that is its bound per value
  (times `DELTA_COPIES`, what Arrow holds while it decodes one);
- anything else: 8 bytes a value (the levels, offsets and indices it decodes to).

`declared_bytes` is the file's total (checked against its budget when it is opened,
`sources.Budget.declared`); `batch_rows` the rows one batch of a row group may hold; and
`cell_bytes` what each cell of a decoded batch holds, counted in Arrow before a Python
row is made of it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

DELTA_TEXT = frozenset({"DELTA_BYTE_ARRAY", "DELTA_LENGTH_BYTE_ARRAY"})  # no dictionary decoder in Arrow
VALUE_BYTES = 8  # what any value decodes to beside its data: a level, an offset, an index
# Arrow's DELTA decoder holds a batch's text about four times over while it builds it
# (measured: a batch of 64 MiB of such text peaked 234 MB above where it started), so
# such text counts four times when a batch is sized.
DELTA_COPIES = 4


def _chunks(meta: Any, group: int) -> Iterator[tuple[int, Any]]:
    """(leaf column, its chunk) of one row group."""
    row_group = meta.row_group(group)
    for column in range(meta.num_columns):
        yield column, row_group.column(column)


def dictionary_text(meta: Any, schema: Any) -> list[str]:
    """The text (BYTE_ARRAY) columns Arrow can read as dictionaries: every one whose chunks
    use no DELTA encoding (those raise "Not yet implemented: DecodeArrow of DictAccumulator")."""
    delta = {
        column
        for group in range(meta.num_row_groups)
        for column, chunk in _chunks(meta, group)
        if DELTA_TEXT & set(chunk.encodings)
    }
    return [
        schema.column(c).path
        for c in range(meta.num_columns)
        if schema.column(c).physical_type == "BYTE_ARRAY" and c not in delta
    ]


def chunk_bytes(chunk: Any, column: Any) -> int:
    """The bytes a column chunk declares it decodes to: its uncompressed pages and
    `VALUE_BYTES` a value, and a fixed-width column's width for every value."""
    width = column.length if column.physical_type == "FIXED_LEN_BYTE_ARRAY" else 0
    return int(chunk.total_uncompressed_size) + (VALUE_BYTES + max(width or 0, 0)) * int(chunk.num_values)


def declared_bytes(meta: Any, schema: Any) -> int:
    """What the whole file declares it decodes to (`chunk_bytes` of every chunk)."""
    return sum(
        chunk_bytes(chunk, schema.column(column))
        for group in range(meta.num_row_groups)
        for column, chunk in _chunks(meta, group)
    )


def row_bytes(meta: Any, schema: Any, group: int, dictionary: set[str]) -> int:
    """The most one row of row group `group` may decode to, from the footer: per column,
    its values per row (on average, for a list column) times what a value may hold."""
    rows = max(int(meta.row_group(group).num_rows), 1)
    total = 0
    for column, chunk in _chunks(meta, group):
        leaf = schema.column(column)
        per_row = math.ceil(int(chunk.num_values) / rows)
        if leaf.physical_type == "FIXED_LEN_BYTE_ARRAY":
            value = VALUE_BYTES + max(leaf.length or 0, 0)
        elif leaf.physical_type == "BYTE_ARRAY" and leaf.path not in dictionary:
            value = VALUE_BYTES + DELTA_COPIES * int(chunk.total_uncompressed_size)  # a value: up to its chunk
        else:
            value = VALUE_BYTES  # a dictionary's values are its pages, counted once by `declared_bytes`
        total += per_row * value
    return total


def batch_rows(meta: Any, schema: Any, group: int, dictionary: set[str], max_bytes: int, max_rows: int) -> int:
    """Rows of row group `group` one batch may hold: as many as decode to `max_bytes` by
    `row_bytes`, at least one and at most `max_rows`."""
    return max(1, min(max_rows, max_bytes // max(row_bytes(meta, schema, group, dictionary), 1)))


def cell_bytes(array: Any) -> np.ndarray:
    """The decoded bytes of each cell of an Arrow array, counted without decoding it: a
    dictionary's values are counted once and looked up by index, a list sums its values,
    a struct its fields, a fixed-width value its width (a null: 0)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_dictionary(kind):
        values = cell_bytes(array.dictionary)
        indices = array.indices.fill_null(0).to_numpy()
        found = values[indices] if len(values) else np.zeros(len(array), np.int64)
        return np.where(array.is_null().to_numpy(zero_copy_only=False), 0, found) if array.null_count else found
    if any(test(kind) for test in (pa.types.is_string, pa.types.is_binary, pa.types.is_large_string)):
        lengths: np.ndarray = pc.binary_length(array).fill_null(0).to_numpy().astype(np.int64)
        return lengths
    if pa.types.is_large_binary(kind):
        lengths = pc.binary_length(array).fill_null(0).to_numpy().astype(np.int64)
        return lengths
    if pa.types.is_map(kind):
        entries = pa.StructArray.from_arrays([array.keys, array.items], ["key", "value"])
        array, kind = pa.ListArray.from_arrays(array.offsets, entries), pa.list_(entries.type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        parents = pc.list_parent_indices(array).to_numpy()
        return np.bincount(parents, weights=cell_bytes(array.flatten()), minlength=len(array)).astype(np.int64)
    if pa.types.is_struct(kind):
        return sum((cell_bytes(field) for field in array.flatten()), np.zeros(len(array), np.int64))
    try:
        width = max(kind.bit_width // 8, 1)
    except ValueError:  # any other variable-width type: its buffers, spread over its rows
        width = array.nbytes // max(len(array), 1) + 1
    return np.full(len(array), width, np.int64)
