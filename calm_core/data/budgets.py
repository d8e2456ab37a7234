"""What a file may cost: the read budgets, declared once, and `Budget`, which one read of one
file spends against them.

A file is read against these budgets WHILE it is read, before the expanded data exists:
a Parquet file's metadata is checked when it is opened, its text columns are decoded as
dictionaries (a value used a thousand times is held once) and each batch's decoded size is
computed from them before a Python row is made (`calm_core.data.parquet_rows`); a CSV record
or a JSON line is read at most `MAX_ROW_BYTES` at a time, and a JSON line is counted as
Python will hold it (`json_cost`) before it is parsed (`calm_core.data.text_rows`). Every
reader, whole and streamed, goes through `Budget`; a file that decodes to
`stream.STREAM_FROM_BYTES` is streamed (`readers.decodes_past`). A refusal is one DataError
line naming the limit and the way out (docs/security.md, "Upload budgets", has the figures
tests/test_budgets.py and tests/test_attacks_uploads.py measure).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from calm_core.data.rows import Record
from calm_core.data.schema import DataError

# Costs a legitimate user: a spreadsheet wider than 10,000 columns; a dataset uses a handful.
MAX_COLUMNS = 10_000
# Costs: one question, option or answer over 1 MiB of text (about 250,000 tokens, past any
# model's context window). CSV's own stdlib limit (128 KiB) is raised to match (below).
MAX_CELL_BYTES = 2**20
# Costs: one row (a CSV record, a JSON line, a Parquet row) that decodes to over 8 MiB, all
# its cells together (a JSON line: about 2.5 times its text, `json_cost`).
MAX_ROW_BYTES = 8 * 2**20
# Costs nothing: the Python rows made at once from a Parquet batch; a batch over it is made
# a few rows at a time (`parquet_rows.parquet_rows`), so it sets peak memory and refuses no file.
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


def mib(size: int) -> str:
    """`size` bytes in MiB, as a refusal names a limit."""
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


def row_too_long(where: str, number: int) -> DataError:
    return DataError(
        f"Expected rows of at most {mib(MAX_ROW_BYTES)} in {where}, but row {number} holds more: "
        "shorten its cells or split the row"
    )


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
