"""Dataset catalog: every dataset the studio and the CLI can name, plus uploads.

Names, in the order they are resolved:

- `builtin/<domain>/<split>`  demo sets generated from fact tables (`calm_core.data.builtin`)
- `upload/<name>`             a person's upload: `workspace/datasets/<name>/items.jsonl` holds
                              the normalised items, `meta.json` where they came from
- `split/<name>/<part>`       train / heldout / test parts of any dataset (`calm_core.data.split`):
                              `workspace/splits/<name>/<part>.jsonl`, and `split.json` records the
                              source, seed, sizes and the item ids of each part
- a file path (.jsonl / .json / .csv / .parquet), or a `save_to_disk` folder
- `<folder>/<split>`          real datasets under `data_dir()` (CALM_DATA_DIR): `<folder>/<split>.jsonl`
- `hf:<name>[:<config>]:<split>` or `hf:<name>` a Hugging Face dataset (see `hf.load_hf`)

Any name may end with a slice, `name[a:b]` (Python semantics, non-negative bounds),
to use part of a set: e.g. `triviaqa/unfiltered_dev_sub3000[0:2000]` to train and
`[2000:2200]` as the held-out set. The slice applies before `limit`.

Built-in, shared, uploaded and split sets are listed by `entries.list_datasets`; files and
hub datasets are loaded on demand. Uploads (`calm_core.data.uploads`) are plain files, so
they survive a restart and read back as identical items.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from calm_core.data.entries import HF_PREFIX, ITEMS_FILE, META_FILE, find_dataset, load_builtin_set
from calm_core.data.hf import load_hf
from calm_core.data.loaders import check_limit, load_file
from calm_core.data.mapping import ColumnMapping
from calm_core.data.schema import DataError, LoadReport, RowError


def load_dataset(
    name: str,
    limit: int | None = None,
    seed: int = 0,
    mapping: ColumnMapping | str | None = None,
    kind: str = "auto",
    encoding: str | None = None,
) -> LoadReport:
    """Load any nameable dataset (see the module docstring) into a LoadReport.

    `seed` only matters for built-in sets (they are generated); `limit` keeps the first
    N valid items in file order; `mapping` renames columns (shared sets and uploads use
    the default names already, but e.g. "subject=prop" still applies to them);
    `encoding` is a file's text encoding (`loaders.load_file`; UTF-8 by default). The
    catalog's own files are UTF-8 (an upload was converted when it was read), so it
    applies to a file named by its path only.
    """
    name = name.strip()
    check_limit(limit)
    base, part = split_slice(name)
    if part is not None:
        report = load_dataset(base, seed=seed, mapping=mapping, kind=kind, encoding=encoding)
        return dataclasses.replace(report, name=name, items=report.items[part][:limit])  # LazyItems: a view
    mapping = mapping or ColumnMapping()
    if name.startswith(HF_PREFIX):
        return _load_hf_name(name, mapping, kind, limit)
    entry = find_dataset(name)
    if entry.source == "builtin":
        return load_builtin_set(entry.name, seed, limit)
    if entry.path is not None and entry.path.is_dir() and entry.source == "file":
        return load_hf(entry.path, mapping=mapping, kind=kind, limit=limit, name=entry.name)
    path = entry.path / ITEMS_FILE if entry.source == "upload" else entry.path
    kind = entry.kind if kind == "auto" and entry.kind in ("mc", "open") else kind
    encoding = encoding if entry.source == "file" else None
    report = load_file(path, kind=kind, mapping=mapping, limit=limit, name=entry.name, encoding=encoding)  # type: ignore[arg-type]
    return _with_upload_rejects(report, entry.path) if entry.source == "upload" else report  # type: ignore[arg-type]


def _with_upload_rejects(report: LoadReport, folder: Path) -> LoadReport:
    """An upload's report with the rows rejected when it was uploaded (from meta.json):
    items.jsonl holds only the kept rows, and a person training on the upload should
    still see that some of their file was left out, and why."""
    try:
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
        listed = [RowError(**e) for e in meta.get("rejected", [])]
        count = int(meta.get("n_rejected", len(listed)))
    except (OSError, ValueError, TypeError):  # an unreadable meta.json must not hide the items
        return report
    return dataclasses.replace(
        report,
        rejected=listed + report.rejected,
        unlisted_rejected=report.unlisted_rejected + max(count - len(listed), 0),
    )


_SLICE = re.compile(r"^(?P<base>.+)\[(?P<start>\d*):(?P<stop>\d*)\]$")


def split_slice(name: str) -> tuple[str, slice | None]:
    """(`name` without a trailing `[a:b]`, the slice or None). Bounds are optional ints >= 0."""
    match = _SLICE.match(name)
    if match is None:
        if name.endswith("]") and "[" in name:
            raise DataError(f"Expected a slice like `{name.split('[')[0]}[0:100]` at the end of {name!r}")
        return name, None
    start, stop = (int(v) if v else None for v in (match["start"], match["stop"]))
    if start is not None and stop is not None and stop <= start:
        raise DataError(f"Expected a non-empty slice in {name!r} (stop > start)")
    return match["base"], slice(start, stop)


def _load_hf_name(name: str, mapping: ColumnMapping, kind: str, limit: int | None) -> LoadReport:
    """`hf:<name>`, `hf:<name>:<split>` or `hf:<name>:<config>:<split>`; a local folder may hold ':'."""
    rest = name[len(HF_PREFIX) :]
    if Path(rest).expanduser().is_dir():
        return load_hf(rest, mapping=mapping, kind=kind, limit=limit, name=name)
    parts = rest.split(":")
    if len(parts) > 3 or not all(parts):
        raise DataError(f"Expected hf:<name>, hf:<name>:<split> or hf:<name>:<config>:<split>, but got {name!r}")
    config = parts[1] if len(parts) == 3 else None
    split = parts[-1] if len(parts) > 1 else None
    return load_hf(parts[0], split=split, mapping=mapping, kind=kind, limit=limit, name=name, config=config)
