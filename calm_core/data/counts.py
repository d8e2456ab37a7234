"""How many items a dataset name holds, from what the data layer already knows: no row is
parsed, mapped or validated.

    item_count("builtin/capitals/train")        # the generator's count for that split
    item_count("upload/quiz", limit=100)        # meta.json's n_items, at most 100
    item_count("questions.jsonl[0:200]")        # the file's non-blank lines, then the slice

Why: the time estimate needs a run's item counts before the run exists, and loading a
dataset to count it puts the whole data layer on the launch path. Each kind of name has a
count that costs next to nothing: a built-in set's generator (`builtin.split_size`), an
upload's meta.json, a split part's split.json, a shared set's or a JSON-lines or CSV
file's non-blank lines (a CSV less its header), a Parquet file's footer. A line count is
an upper bound where some rows would be rejected. A size known only once the set is loaded
(`hf:` names, a `.json` array, a `save_to_disk` folder) is None, unless a slice or a limit
bounds it; the run itself loads the set and says what it holds.
"""

from __future__ import annotations

from pathlib import Path

from calm_core.data.builtin import split_size
from calm_core.data.catalog import split_slice
from calm_core.data.entries import BUILTIN_PREFIX, HF_PREFIX, count_rows, find_dataset, unknown_name_message
from calm_core.data.readers import FORMATS
from calm_core.data.schema import DataError


def item_count(name: str, limit: int | None = None) -> int | None:
    """The items `catalog.load_dataset(name, limit)` would return, at most (see the module
    docstring); None when only loading the set could tell. DataError for a name that names
    nothing."""
    base, part = split_slice(name.strip())
    total = _base_count(base)
    if total is None:
        bounds = [b for b in (_slice_length(part), limit) if b is not None]
        return min(bounds) if bounds else None
    n = len(range(total)[part]) if part is not None else total
    return n if limit is None else min(n, limit)


def _slice_length(part: slice | None) -> int | None:
    """The most items `[a:b]` keeps of a set of unknown size (None without a stop)."""
    return None if part is None or part.stop is None else part.stop - (part.start or 0)


def _base_count(name: str) -> int | None:
    if name.startswith(HF_PREFIX):
        return None
    if name.startswith(BUILTIN_PREFIX):
        return _builtin_count(name)
    entry = find_dataset(name)
    if entry.n_items is not None:
        return entry.n_items
    if entry.source == "file" and entry.path is not None and entry.path.is_file():
        return _file_rows(entry.path)
    return None


def _builtin_count(name: str) -> int:
    """`builtin/<domain>/<split>`, counted by its generator without making the items."""
    parts = name.split("/", 2)
    if len(parts) != 3:
        raise DataError(unknown_name_message(name))
    return split_size(parts[1], parts[2])


def _file_rows(path: Path) -> int | None:
    """A file's rows by its format: lines for JSON lines and CSV, the footer for Parquet,
    None for a `.json` file holding one array (counting it is parsing it)."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return int(pq.read_metadata(path).num_rows)
    if fmt == "csv":
        return max(0, count_rows(path) - 1)  # the header
    if fmt == "jsonl" and not _json_array(path):
        return count_rows(path)
    return None


def _json_array(path: Path) -> bool:
    """Whether the file's first non-blank byte opens a JSON array."""
    with path.open("rb") as handle:
        head = handle.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"[")
