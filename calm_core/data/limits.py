"""What a data file may cost: the read budgets every reader is held to
(`calm_core.data.sources.Budget` checks them while a file is read), and the one line a
refusal gives. Declared once here, so docs/security.md ("Upload budgets") and
tests/test_budgets.py have one place to check them against.
"""

from __future__ import annotations

import csv

from calm_core.data.schema import DataError

# A file is read against these budgets WHILE it is read, before the expanded data exists:
# a Parquet file's metadata is checked when it is opened, its text columns are decoded as
# dictionaries (a value used a thousand times is held once) and each batch's decoded size is
# computed from them before a Python row is made; a CSV record or a JSON line is read at
# most `MAX_ROW_BYTES` at a time, and a JSON line is counted as Python will hold it
# (`sources.json_cost`) before it is parsed. Every reader, whole and streamed, goes through `sources.Budget`;
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
# a few rows at a time (`sources.parquet_rows`), so it sets peak memory and refuses no file.
MAX_BATCH_BYTES = 64 * 2**20
PARQUET_BATCH = 1024  # at most this many rows decoded at a time (fewer when they decode past MAX_BATCH_BYTES)
# Costs: a file that decodes to more than 64 times its own size, past the first 64 MiB (a
# Parquet file of one long text repeated: the shape of a bomb). CSV decodes a byte to at
# most a byte and JSON to at most about 33 (`json_cost`), so only Parquet can reach it; save
# such a file as JSON lines.
MAX_EXPANSION = 64
EXPANSION_FREE_BYTES = 64 * 2**20
# Costs: a `.json` array that decodes to more than 64 MiB (`json_cost`: about a 25 MB
# file of questions), which is parsed whole; JSON lines stream instead.
MAX_JSON_ARRAY_BYTES = 64 * 2**20

JSON_COST_PER_BYTE = 65  # the most `sources.json_cost` gives a byte (a "["): a smaller file cannot decode past a budget

csv.field_size_limit(max(csv.field_size_limit(), MAX_ROW_BYTES))  # cells are held to MAX_CELL_BYTES by `Budget`


def mib(size: int) -> str:
    """`size` bytes as the MiB a refusal names."""
    return f"{size / 2**20:g} MiB"


def row_too_long(where: str, number: int) -> DataError:
    return DataError(
        f"Expected rows of at most {mib(MAX_ROW_BYTES)} in {where}, but row {number} holds more: "
        "shorten its cells or split the row"
    )
