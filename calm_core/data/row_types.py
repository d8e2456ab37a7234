"""The shapes rows are read in: a raw record, a numbered row, a keyed row (what streaming
indexes), and the protocol every streaming reader gives (`calm_core.data.sources` holds
the readers themselves, `readers.FileReader` what a whole read gives).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol, Union

import numpy as np

from calm_core.data.schema import RowError

Record = dict[str, Any]
Row = tuple[int, Union[Record, RowError]]  # (1-based row number, raw record or why it is unreadable)
KeyedRow = tuple[int, int, Any]  # (1-based row number, key, raw record or RowError)


class RowSource(Protocol):
    """One file or dataset read row by row (`scan`) and again at chosen rows (`read`)."""

    source: str  # how row errors name it
    where: str  # how whole-file errors name it
    columns: list[str] | None  # known before reading rows (CSV, Parquet, HF); None for JSONL

    def scan(self) -> Iterator[KeyedRow]: ...

    def read(self, keys: Sequence[int] | np.ndarray) -> list[Any]: ...  # ints, or an int64 array
